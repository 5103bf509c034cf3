"""agentik as an MCP server: the tools (``server``), streamable HTTP at ``/mcp`` (``routes``,
``http``); ``agentik mcp`` (agentik_mcp/cli.py) serves the same tools over stdio."""
