"""The web worker's own answers, in the facade's JSON error shape.

gunicorn refuses a request it cannot parse before the app sees it — a request line past
``limit_request_line`` (414), headers past ``limit_request_field_size`` /
``limit_request_fields`` (431), a malformed request line, method, version, header or chunk
(400), a transfer coding it does not support (501), an ``Expect`` it cannot meet (417) — and
writes those answers as HTML. gunicorn has no setting for the format, so the facade's worker
class (``web_facade.gunicorn_worker``; a documented extension point: ``worker_class``)
overrides ``handle_error``, the worker method
every gunicorn worker calls with a request it could not parse, and answers each of these in
the facade's JSON shape with a fixed message (never the raw bytes it refused). Anything else
goes to gunicorn's own handling unchanged.

The worker's event loop answers with the same bytes when it refuses a request itself (408,
503, 414/431 before the head ended).
"""

from __future__ import annotations

import json
from typing import Any

# gunicorn ships no type information.
from gunicorn.http import errors as http_errors  # type: ignore[import-untyped]
from gunicorn.http.errors import (  # type: ignore[import-untyped]
    LimitRequestHeaders,
    LimitRequestLine,
)

__all__ = ["error_bytes", "limit_error", "parse_error"]

_REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    414: "URI Too Long",
    417: "Expectation Failed",
    431: "Request Header Fields Too Large",
    501: "Not Implemented",
    503: "Service Unavailable",
}

_PARSE_ERRORS: tuple[tuple[str, int, str, str], ...] = (
    ("InvalidRequestLine", 400, "bad_request", "the request line is not valid HTTP"),
    ("InvalidRequestMethod", 400, "bad_request", "the request method is not valid"),
    ("InvalidHTTPVersion", 400, "bad_request", "the HTTP version is not supported"),
    ("InvalidHeaderName", 400, "bad_request", "a header name is not valid"),
    ("InvalidHeader", 400, "bad_request", "a header is not valid or is repeated"),
    ("ObsoleteFolding", 400, "bad_request", "a header is folded over lines (obsolete)"),
    ("InvalidSchemeHeaders", 400, "bad_request", "the scheme headers contradict each other"),
    ("InvalidChunkSize", 400, "bad_request", "the chunked body has an invalid chunk size"),
    ("ChunkMissingTerminator", 400, "bad_request", "a chunk of the body is not terminated"),
    ("InvalidChunkExtension", 400, "bad_request", "a chunk extension is not valid"),
    ("UnsupportedTransferCoding", 501, "not_implemented", "the transfer coding is not supported"),
    ("ExpectationFailed", 417, "expectation_failed", "the Expect header cannot be met"),
)
"""gunicorn parse error class name → (status, code, message), most specific first."""


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


def parse_error(exc: BaseException, cfg: Any) -> tuple[int, str, str] | None:
    """(status, code, message) for any request gunicorn refused to parse, None otherwise."""
    refusal = limit_error(exc, cfg)
    if refusal is not None:
        return refusal
    for name, status, code, message in _PARSE_ERRORS:
        error_class = getattr(http_errors, name, None)
        if error_class is not None and isinstance(exc, error_class):
            return status, code, message
    return None


def error_bytes(status: int, code: str, message: str, retry_after: int = 0) -> bytes:
    """A whole HTTP/1.1 response carrying ``{"error": {"code", "message"}}``; closes."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    retry = f"Retry-After: {retry_after}\r\n" if retry_after else ""
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        "Connection: close\r\n"
        f"{retry}"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode("latin-1") + body
