"""The config file's tool tables (``[[mcp.servers]]``, ``[[a2a.agents]]``,
``[[tools.python]]``) as typed entries, read by ``agentik.config``; no SDK is imported
here. The engine's tools (``engine_service.tools``) are built from these entries."""
