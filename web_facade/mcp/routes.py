"""``/mcp``: agentik as an MCP server over streamable HTTP (docs/mcp.md).

A Flask view hands the request to :class:`web_facade.mcp.http.McpHttpApp` (a WSGI app around
the MCP SDK's ASGI server), so the facade's host guard, CORS and observability apply to it
as to every other route. The SDK is imported on the first ``/mcp`` request only.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, current_app

from web_facade.engine_client import current_settings

__all__ = ["bp"]

bp = Blueprint("mcp", __name__)

_EXTENSION = "agentik.mcp"


@bp.route("/mcp", methods=["GET", "POST", "DELETE"])
def mcp() -> Any:
    app = current_app.extensions.get(_EXTENSION)
    if app is None:
        from web_facade.mcp.http import McpHttpApp

        app = current_app.extensions.setdefault(
            _EXTENSION, McpHttpApp(current_settings().engine_target)
        )
    return app  # Flask runs a returned WSGI app with this request's environ
