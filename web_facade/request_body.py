"""Reading a request's body, the same way for every protocol.

werkzeug checks ``MAX_CONTENT_LENGTH`` against a ``Content-Length`` header, but a chunked
body (no length) is cut silently at the limit, and the view would parse a truncated
document. So a chunked body is read one byte past the limit and refused when it is longer.
Each protocol words the refusal its own way (``/agentik`` and AG-UI: HTTP 413; A2A: a
JSON-RPC InvalidRequest), so this module raises werkzeug's ``RequestEntityTooLarge``.

Python's JSON parser accepts documents the engine's protobuf messages cannot carry, and
those used to fail deep inside a conversion as a 5xx. :func:`check_json` refuses them where
every body is parsed, naming the field, with :class:`UnacceptableJson`:

- strings (values and keys) that are not Unicode scalar values: a lone UTF-16 surrogate
  (``"x\\ud83d"``, or its raw bytes, which ``json.loads`` lets through);
- nesting deeper than :data:`MAX_JSON_DEPTH` (the body itself is level 1): each JSON level
  is two protobuf levels in a ``Struct``, and protobuf stops at 100;
- numbers that are not finite: ``1e400`` (parses as infinity), ``NaN``, ``Infinity`` and
  ``-Infinity`` (literals Python accepts), and integers beyond a double's range.

A body is JSON only when the request says so: ``Content-Type: application/json`` or an
``application/*+json`` type, parameters such as ``; charset=utf-8`` allowed. Anything else
(``text/plain``, a form, no ``Content-Type``) is refused with werkzeug's
``UnsupportedMediaType`` (415), which closes the browser "simple request" hole: a page on
another origin may POST ``text/plain`` without a CORS preflight, but never
``application/json``. An empty body needs no ``Content-Type``.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from flask import current_app, request
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, UnsupportedMediaType

from web_facade.errors import ApiError
from web_facade.request_heads import DROPPED_AFTER_ANSWER, drop_rest

__all__ = [
    "ACCEPTED_MEDIA_TYPES",
    "MAX_JSON_DEPTH",
    "UnacceptableJson",
    "check_json",
    "field_path",
    "media_type_problem",
    "parse_failure",
    "parse_json",
    "read_body",
    "scalar_problem",
    "read_json",
]

MAX_JSON_DEPTH = 32
"""Deepest nesting of objects and arrays in a request body; the body itself is level 1."""

_PATH_SHOWN = 6
"""Segments of a path a depth refusal shows before eliding the rest."""

Path = tuple[str | int, ...]


class UnacceptableJson(ValueError):
    """Valid JSON the engine cannot take; ``path`` leads from the body to the culprit."""

    def __init__(self, path: Path, problem: str, shown: int | None = None) -> None:
        self.path = path
        self.problem = problem
        self.shown = shown
        super().__init__(f"{self.field() or 'the request body'}: {problem}")

    def field(self, skip: int = 0) -> str:
        """The path as text, without its first ``skip`` segments (A2A drops ``params``)."""
        shown = None if self.shown is None else self.shown - skip
        return field_path(self.path[skip:], shown)


def field_path(path: Path, shown: int | None = None) -> str:
    """``("tools", 0, "parameters")`` as ``tools[0].parameters``; past ``shown`` segments, ``…``."""
    out = ""
    for segment in path[:shown]:
        if isinstance(segment, int):
            out += f"[{segment}]"
        else:
            out += f".{segment.encode('utf-8', 'backslashreplace').decode()}" if out else segment
    if shown is not None and len(path) > shown:
        out += "…"
    return out


def scalar_problem(text: str) -> str | None:
    """Why ``text`` is not a string of Unicode scalar values (it could not be encoded as
    UTF-8), or None when it is."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone UTF-16 surrogate \\u{ord(text[exc.start]):04x}; "
            "strings must be valid Unicode (scalar values only)"
        )
    return None


def check_json(value: Any, path: Path = ()) -> None:
    """Refuse (:class:`UnacceptableJson`) what protobuf cannot carry; see the module doc."""
    if len(path) >= MAX_JSON_DEPTH and isinstance(value, dict | list):
        too_deep = f"nested deeper than {MAX_JSON_DEPTH} levels, the limit for a request body"
        raise UnacceptableJson(path, too_deep, shown=_PATH_SHOWN)
    if isinstance(value, str):
        problem = scalar_problem(value)
        if problem is not None:
            raise UnacceptableJson(path, problem)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise UnacceptableJson(path, f"must be a finite number, got {value}")
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) > sys.float_info.max:
            raise UnacceptableJson(
                path, "must be a finite number; this one is beyond a double's range"
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            bad_key = scalar_problem(key)
            if bad_key is not None:
                raise UnacceptableJson(path, f"an object key {bad_key}")
            check_json(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json(item, (*path, index))


ACCEPTED_MEDIA_TYPES = "application/json (or an application/*+json type)"
"""What a request body may be, as the 415 refusal names it."""


def media_type_problem(body: bytes) -> str | None:
    """Why the request's ``Content-Type`` does not announce the JSON ``body``; None when it
    does, or when there is no body."""
    if not body:
        return None
    mimetype = request.mimetype  # lower case, without parameters
    if mimetype == "application/json" or (
        mimetype.startswith("application/") and mimetype.endswith("+json")
    ):
        return None
    sent = f"Content-Type {request.content_type!r}" if request.content_type else "no Content-Type"
    return f"the request body must be {ACCEPTED_MEDIA_TYPES}; the request sent {sent}"


MALFORMED_BODY = "the request body is malformed: its chunked transfer encoding is not valid"


def read_body() -> bytes:
    """The raw body; ``RequestEntityTooLarge`` past the limit, with or without a length,
    ``UnsupportedMediaType`` for a body that is not announced as JSON, and ``BadRequest``
    when the server cannot read it (a broken chunked encoding)."""
    try:
        return _read_body()
    except Exception as exc:
        # gunicorn parses a chunked body lazily, as it is read, and raises its own parse
        # errors here: the client's fault, not the facade's.
        if type(exc).__module__.startswith("gunicorn.http"):
            raise BadRequest(MALFORMED_BODY) from None
        raise


def _read_body() -> bytes:
    if request.content_length:
        # A body announced by its length is refused by its length, then by its type, before
        # it is read: a client that waits for the answer before it sends the body gets it.
        limit = request.max_content_length
        if limit is not None and request.content_length > limit:
            raise RequestEntityTooLarge()
        problem = media_type_problem(b"announced")
        if problem is not None:
            raise UnsupportedMediaType(problem)
    if request.content_length is not None or not request.environ.get("wsgi.input_terminated"):
        data: bytes = request.get_data(cache=False)  # werkzeug checks Content-Length up front
    else:
        limit = request.max_content_length
        stream = request.environ["wsgi.input"]
        data = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(data) > limit:
            raise RequestEntityTooLarge()
    problem = media_type_problem(data)
    if problem is not None:
        raise UnsupportedMediaType(problem)
    return data


DISCARD_KEY = "agentik.discard_body_bytes"
"""``app.config`` key: how much of a refused body is read and dropped (``discard_body``)."""


def discard_body() -> bool:
    """Read and drop the rest of a body refused as too large, up to the app's
    ``[web] discard_body_bytes``: a client that sends it whole before reading (no ``Expect:
    100-continue``) then reads the 413 instead of a reset connection. False when the body
    is longer than that, or did not arrive in time: the answer must close the connection.

    Under agentik's gunicorn worker nothing is read here (True): the worker's event loop
    drops the rest after the answer, which then goes out at once, and closes the connection
    when it cannot (a client that holds its body back is waited for by no thread).
    """
    environ = request.environ
    if environ.get(DROPPED_AFTER_ANSWER):
        return True
    if "agentik.discarded" in environ:
        return bool(environ["agentik.discarded"])
    bound = int(current_app.config.get(DISCARD_KEY) or 0)
    whole = bound > 0 and drop_rest(environ["wsgi.input"], request.content_length, bound)
    environ["agentik.discarded"] = whole
    return whole


def parse_failure(exc: ValueError | RecursionError) -> str:
    """Why ``json.loads`` refused a body, in the client's words, the same on every surface:
    the parser's reason, but not Python's own for a limit of its (that text names a remedy
    of the server's, ``sys.set_int_max_str_digits()``)."""
    if isinstance(exc, RecursionError):
        reason = f"nested deeper than {MAX_JSON_DEPTH} levels, the limit for a request body"
        return f"the request body is {reason}"
    if isinstance(exc, json.JSONDecodeError):
        return f"the request body is not valid JSON: {exc}"
    if "digits" in str(exc):  # a number of over 4,300 digits
        return "the request body holds a number with more digits than the server accepts"
    return "the request body is not valid JSON"


def parse_json(raw: bytes, unacceptable: int = 400) -> Any:
    """``raw`` as JSON; 400 ``invalid_json`` (with the parser's reason) when it is not, and
    ``unacceptable`` (400 or 422) ``invalid_argument`` naming the field when :func:`check_json`
    refuses it."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", parse_failure(exc)) from None
    try:
        check_json(value)
    except UnacceptableJson as exc:
        raise ApiError(unacceptable, "invalid_argument", str(exc)) from None
    return value


def read_json(unacceptable: int = 400) -> Any:
    """The body as JSON; 400 ``invalid_json`` when it is not, 413 past the limit, and
    ``unacceptable`` for JSON the engine cannot take (see :func:`parse_json`)."""
    return parse_json(read_body(), unacceptable)
