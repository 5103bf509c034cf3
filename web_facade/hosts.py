"""Without authentication, answer only requests addressed to this host by a loopback name.

A facade with no tokens serves only on loopback (``refuse_open_exposure``), but a browser
can still be made to reach it: a page on ``evil.example`` whose DNS name is then re-pointed
to 127.0.0.1 (DNS rebinding) is same-origin with itself, so the browser lets it send any
request to the facade and read the answer — and the facade would take that page for its own.
What gives it away is the ``Host`` header, which still names the attacker's domain. So in
that mode every request but the public ones (health, the agent card, the OpenAPI document)
must name ``localhost`` (or a ``*.localhost`` name), a loopback address, or the host of
``AGENTIK_PUBLIC_URL``; others get 403 ``forbidden_host``.

With tokens the check is off (a page has no token to send), and so it is with
``allow_anonymous`` (a proxy in front decides who may call, and which names it serves).

Whatever the mode, an HTTP/1.1 request without a ``Host`` header is refused with 400
``missing_host`` (RFC 9112, section 3.2: a server MUST), on every path.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from flask import Flask, Response, request

from agentik.config import Settings
from web_facade.errors import error_response

__all__ = ["PUBLIC_PATHS", "install_host_guard", "is_loopback_host", "require_host"]

PUBLIC_PATHS = ("/health", "/.well-known/", "/agentik/openapi.json")
"""Paths anyone may read under any name: they hold nothing of anyone's."""


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a Host header's name, without the port) names this machine."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _name(host_header: str) -> str:
    try:
        return urlsplit(f"//{host_header}").hostname or ""
    except ValueError:
        return ""


def require_host() -> Response | None:
    """400 for an HTTP/1.1 request that names no host (a ``before_request`` hook)."""
    environ = request.environ
    if environ.get("SERVER_PROTOCOL") == "HTTP/1.1" and "HTTP_HOST" not in environ:
        return error_response(
            400, "missing_host", "an HTTP/1.1 request must carry a Host header (RFC 9112)"
        )
    return None


def install_host_guard(app: Flask, settings: Settings) -> None:
    """Refuse HTTP/1.1 requests without ``Host``, and requests to a non-loopback name while
    the facade runs without tokens."""
    app.before_request(require_host)
    if settings.auth_enabled or settings.auth.allow_anonymous:
        return
    public_host = urlsplit(settings.a2a.public_url).hostname if settings.a2a.public_url else None

    @app.before_request
    def _guard_host() -> Response | None:
        if request.path.startswith(PUBLIC_PATHS):
            return None
        name = _name(request.host)
        if is_loopback_host(name) or (public_host is not None and name == public_host):
            return None
        shown = name if name.isprintable() and len(name) <= 200 else "(unreadable)"
        return error_response(
            403,
            "forbidden_host",
            f"this server runs without authentication and answers only requests addressed "
            f"to localhost or a loopback address, not {shown!r}; set AGENTIK_TOKENS to serve "
            "other names",
        )
