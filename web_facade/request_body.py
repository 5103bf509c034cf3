"""Reading a request's body, the same way for every protocol.

werkzeug checks ``MAX_CONTENT_LENGTH`` against a ``Content-Length`` header, but a chunked
body (no length) is cut silently at the limit, and the view would parse a truncated
document. So a chunked body is read one byte past the limit and refused when it is longer.
Each protocol words the refusal its own way (``/agentik`` and AG-UI: HTTP 413; A2A: a
JSON-RPC InvalidRequest), so this module raises werkzeug's ``RequestEntityTooLarge``.
"""

from __future__ import annotations

import json
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge

from web_facade.errors import ApiError

__all__ = ["parse_json", "read_body", "read_json"]


def read_body() -> bytes:
    """The raw body; ``RequestEntityTooLarge`` past the limit, with or without a length."""
    if request.content_length is not None or not request.environ.get("wsgi.input_terminated"):
        return request.get_data(cache=False)  # werkzeug checks Content-Length up front
    limit = request.max_content_length
    stream = request.environ["wsgi.input"]
    data: bytes = stream.read() if limit is None else stream.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise RequestEntityTooLarge()
    return data


def parse_json(raw: bytes) -> Any:
    """``raw`` as JSON; 400 ``invalid_json`` (with the parser's reason) when it is not."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from None


def read_json() -> Any:
    """The body as JSON; 400 ``invalid_json`` when it is not, 413 past the limit."""
    return parse_json(read_body())
