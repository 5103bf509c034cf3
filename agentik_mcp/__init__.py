"""agentik as an MCP server: the engine's conversations as MCP tools (``agentik mcp``)."""
