"""The config file's arrays of tables (``[[mcp.servers]]``, ``[[a2a.agents]]``,
``[[tools.python]]``, ``[[agents]]``) as entry models, read by ``agentik.config.Entry``; no
SDK is imported here. The engine's tools (``engine_service.tools``) are built from them."""

from urllib.parse import urlsplit


def display_url(url: str) -> str:
    """``scheme://host:port/path`` of ``url``: no credentials, query or fragment (for logs)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname or ''}{port}{parts.path}"
