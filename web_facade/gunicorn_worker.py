"""gunicorn's ``gthread`` worker, with its own refusals answered in the facade's JSON shape.

gunicorn refuses a request line past ``limit_request_line`` (414) and headers past
``limit_request_field_size`` / ``limit_request_fields`` (431) before the app sees the
request, and writes those answers as HTML. gunicorn has no setting for the format, so this
worker class (a documented extension point: ``worker_class``) overrides ``handle_error``, the
worker method every gunicorn worker calls with a request it could not parse, for these two
errors only; every other error goes to gunicorn's own handling unchanged.
"""

from __future__ import annotations

import json
from typing import Any

# gunicorn ships no type information.
from gunicorn import util  # type: ignore[import-untyped]
from gunicorn.http.errors import (  # type: ignore[import-untyped]
    LimitRequestHeaders,
    LimitRequestLine,
)
from gunicorn.workers.gthread import ThreadWorker  # type: ignore[import-untyped]

__all__ = ["JsonErrorsThreadWorker", "error_bytes", "limit_error"]

_REASONS = {414: "URI Too Long", 431: "Request Header Fields Too Large"}


def limit_error(exc: BaseException, cfg: Any) -> tuple[int, str, str] | None:
    """(status, code, message) for a gunicorn limit error, None for any other error."""
    if isinstance(exc, LimitRequestLine):
        limit = exc.max_size or cfg.limit_request_line
        return 414, "uri_too_long", f"the request line is longer than {limit} bytes"
    if isinstance(exc, LimitRequestHeaders):
        message = (
            f"the request headers are too large: at most {cfg.limit_request_fields} headers"
            f" of at most {cfg.limit_request_field_size} bytes each"
        )
        return 431, "headers_too_large", message
    return None


def error_bytes(status: int, code: str, message: str) -> bytes:
    """A whole HTTP/1.1 response carrying ``{"error": {"code", "message"}}``; closes."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body


class JsonErrorsThreadWorker(ThreadWorker):  # type: ignore[misc]
    """``gthread`` with 414 and 431 as JSON (see the module doc)."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        refusal = limit_error(exc, self.cfg)
        if refusal is None:
            super().handle_error(req, client, addr, exc)
            return
        ip = addr[0] if addr else ""
        self.log.warning("Invalid request from ip=%s: %s", ip, exc)
        try:
            util.write_nonblock(client, error_bytes(*refusal))
        except OSError:
            self.log.debug("Failed to send error message.")
