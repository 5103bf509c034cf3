"""MCP servers as tools: one source per configured server (``tool``), the names and
results they give (``results``), their transports (``transport``), and the set of sources
the engine holds (``sources``). The MCP SDK is imported here only."""
