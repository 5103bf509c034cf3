"""Cross-origin access for browser pages: a configured allow-list, nothing by default.

``[web] cors_origins`` (``AGENTIK_CORS_ORIGINS``) lists the origins a page may call the
facade from; ``["*"]`` allows any page. With the list empty (the default) the facade sends
no CORS headers at all, so a browser lets no foreign page read an answer or send a request
that needs a preflight (JSON bodies, ``Authorization``, ``Last-Event-ID``, ``A2A-Version``).

For an allowed ``Origin``:

- a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) on a route that exists
  is answered 204 with ``Access-Control-Allow-Origin`` (that origin), ``-Allow-Methods``
  (the route's), ``-Allow-Headers`` (:data:`ALLOW_HEADERS`) and ``-Max-Age``;
- every other response, errors and SSE streams included, carries
  ``Access-Control-Allow-Origin`` and ``Access-Control-Expose-Headers``
  (:data:`EXPOSE_HEADERS`).

Another origin gets none of these headers and the browser refuses the page the answer.
``Access-Control-Allow-Credentials`` is never sent: the facade uses no cookies, and a bearer
token in ``Authorization`` is a header the page sets itself, allowed by the preflight. With a
list of origins every response says ``Vary: Origin`` so caches keep the answers apart.

A request that changes something (``POST``, ``PUT``, ``PATCH``, ``DELETE``) from a page of
an origin that is neither allowed nor the facade's own is refused 403 ``forbidden_origin``
before it reaches the engine. A browser sends some such requests without a preflight (a
bodyless ``POST`` to interrupt, say): CORS alone would only hide the answer, not stop the
request. Clients that are not browsers send no ``Origin`` and are not affected.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from flask import Flask, Response, current_app, request

from web_facade.errors import error_response

__all__ = ["ALLOW_HEADERS", "EXPOSE_HEADERS", "MAX_AGE", "UNSAFE_METHODS", "install_cors"]

ALLOW_HEADERS: Final = "Content-Type, Authorization, Last-Event-ID, A2A-Version"
"""Request headers a page may send (``Content-Type`` makes JSON bodies possible)."""

EXPOSE_HEADERS: Final = "Retry-After, Allow, WWW-Authenticate"
"""Response headers a page may read beyond the CORS-safelisted ones."""

MAX_AGE: Final = 600
"""Seconds a browser may cache a preflight's answer."""

UNSAFE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _same_origin(origin: str) -> bool:
    """Whether ``origin`` is the facade's own (the page came from the host it calls)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == request.host.lower()


def _refuse_foreign_origin(origins: tuple[str, ...]) -> Response | None:
    """403 for a state-changing request from a page the allow-list does not name."""
    origin = request.headers.get("Origin")
    if origin is None or request.method not in UNSAFE_METHODS:
        return None
    if _allowed(origins, origin) is not None or _same_origin(origin):
        return None
    shown = origin if len(origin) <= 200 and origin.isprintable() else "(unreadable)"
    return error_response(
        403,
        "forbidden_origin",
        f"requests from pages of {shown} are not allowed; the operator may add that origin "
        "to AGENTIK_CORS_ORIGINS",
    )


def _allowed(origins: tuple[str, ...], origin: str | None) -> str | None:
    """The ``Access-Control-Allow-Origin`` value for ``origin``, or None for no access."""
    if not origin or not origins:
        return None
    if origins == ("*",):
        return "*"
    return origin if origin in origins else None


def _preflight(allow_origin: str) -> Response | None:
    """The answer to a preflight on an existing route, or None (not a preflight / no route)."""
    if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
        return None
    if request.routing_exception is not None:
        return None  # an unknown route: its 404 (without CORS approval) answers
    adapter = current_app.url_map.bind_to_environ(request.environ)
    methods = sorted(set(adapter.allowed_methods()) - {"HEAD"})
    response = current_app.response_class(status=204)
    response.headers["Access-Control-Allow-Origin"] = allow_origin
    response.headers["Access-Control-Allow-Methods"] = ", ".join(methods)
    response.headers["Access-Control-Allow-Headers"] = ALLOW_HEADERS
    response.headers["Access-Control-Max-Age"] = str(MAX_AGE)
    return response


def install_cors(app: Flask, origins: tuple[str, ...]) -> None:
    """Apply the allow-list ``origins`` to every route of ``app``; empty: no CORS at all
    (and state-changing requests from any foreign page are refused)."""

    @app.before_request
    def _guard_origin() -> Response | None:
        return _refuse_foreign_origin(origins)

    if not origins:
        return
    vary = origins != ("*",)

    @app.before_request
    def _answer_preflight() -> Response | None:
        allow_origin = _allowed(origins, request.headers.get("Origin"))
        return None if allow_origin is None else _preflight(allow_origin)

    @app.after_request
    def _add_headers(response: Response) -> Response:
        if vary:
            response.vary.add("Origin")
        allow_origin = _allowed(origins, request.headers.get("Origin"))
        if allow_origin is not None and "Access-Control-Allow-Origin" not in response.headers:
            response.headers["Access-Control-Allow-Origin"] = allow_origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
        return response
