"""``agentik mcp``: the MCP tools of web_facade/mcp/server.py over stdio (``cli``)."""
