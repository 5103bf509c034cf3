"""Rules for a request head read in pieces, before anything parses it.

The worker (``web_facade.gunicorn_worker``) reads each request head in its event loop, a
piece at a time as bytes arrive, and hands the connection to a thread only once the head is
whole. These pure functions say when that is, when the bytes already read can never make an
acceptable head, and which path the head names (to pick the thread pool that serves it).
gunicorn's parser still parses and validates the whole head afterwards; these rules only
decide when it may start without waiting on the client.
"""

from __future__ import annotations

from typing import Any, Literal

# gunicorn ships no type information.
from gunicorn.http.body import LengthReader  # type: ignore[import-untyped]
from gunicorn.http.message import (  # type: ignore[import-untyped]
    DEFAULT_MAX_HEADERFIELD_SIZE,
    MAX_HEADERS,
    MAX_REQUEST_LINE,
)

__all__ = [
    "DROPPED_AFTER_ANSWER",
    "HEAD_BYTES",
    "LOOP_BODY_BYTES",
    "BodyTimeout",
    "HeadLimits",
    "body_to_read",
    "drop_rest",
    "head_state",
    "request_path",
]

HEAD_BYTES = 32 * 1024
"""The largest request head (request line and headers) taken. Heads are buffered in the
event loop while they arrive, one per open connection (up to gunicorn's
``worker_connections``), so this bounds that memory; it is about what nginx takes by default
(4 x 8 KiB) and far above what browsers and API clients send."""
LOOP_BODY_BYTES = 64 * 1024
"""The largest body read in the event loop, before a thread is taken (see ``body_to_read``)."""

Refusal = tuple[int, str, str]
"""(status, error code, message) of a request refused before it reaches a thread."""


class HeadLimits:
    """gunicorn's head limits (``limit_request_line``, ``limit_request_fields``,
    ``limit_request_field_size``), resolved the way its parser resolves them."""

    __slots__ = ("field_size", "fields", "line", "total")

    def __init__(self, cfg: Any) -> None:
        line = cfg.limit_request_line
        self.line = MAX_REQUEST_LINE if line < 0 or line >= MAX_REQUEST_LINE else line
        fields = cfg.limit_request_fields
        self.fields = MAX_HEADERS if fields <= 0 or fields > MAX_HEADERS else fields
        size = cfg.limit_request_field_size
        self.field_size = DEFAULT_MAX_HEADERFIELD_SIZE if size <= 0 else size
        # The most a head can hold: its line (1 MiB when unlimited, gunicorn's own bound)
        # and every header at its largest, and never more than HEAD_BYTES.
        most = (self.line or 1024 * 1024) + self.fields * (self.field_size + 2) + 4
        self.total = min(most, HEAD_BYTES)


HeadState = Literal["whole", "partial"] | Refusal


def head_state(data: bytes | bytearray, limits: HeadLimits) -> HeadState:
    """``whole`` when the parser can take ``data`` without reading more (the head is
    complete, or already broken in a way the parser refuses on sight: a bare LF);
    ``partial`` when more bytes must come; a refusal when no more bytes can make it valid."""
    end = data.find(b"\r\n\r\n")
    if end + 4 > limits.total:
        return _too_large(limits)
    if end >= 0:
        return "whole"
    if data.count(b"\n") != data.count(b"\r\n"):
        return "whole"  # a bare LF: gunicorn answers 400 without waiting
    body = data[2:] if data.startswith(b"\r\n") else data  # one empty line may come first
    line_end = body.find(b"\r\n")
    # Without its CRLF yet, a trailing CR may be the start of it.
    line_length = line_end if line_end >= 0 else len(body) - body.endswith(b"\r")
    if 0 < limits.line < line_length:
        return 414, "uri_too_long", f"the request line is longer than {limits.line} bytes"
    if len(data) > limits.total:
        return _too_large(limits)
    return "partial"


def _too_large(limits: HeadLimits) -> Refusal:
    return (
        431,
        "headers_too_large",
        f"the request headers are too large: at most {limits.total} bytes in all, and at most "
        f"{limits.fields} headers of at most {limits.field_size} bytes each",
    )


def body_to_read(data: bytes | bytearray, limit: int | None = None) -> int:
    """How many body bytes follow the whole head in ``data`` that the event loop should read
    before a thread is taken: the ``Content-Length`` when it is the only framing, is
    well-formed and is at most :data:`LOOP_BODY_BYTES` (and ``limit``, the largest body
    taken: a longer one is refused by the app at once, not after it arrived); else 0 (the
    thread reads the body, and gunicorn judges its framing). Never with ``Expect``: that
    client waits for a ``100 Continue`` the thread sends."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return 0
    head = bytes(data[:end])
    lengths = []
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name in (b"transfer-encoding", b"expect"):
            return 0
        if name == b"content-length":
            lengths.append(value.strip())
    if len(lengths) != 1 or not lengths[0].isdigit() or len(lengths[0]) > 6:
        return 0
    length = int(lengths[0])
    if length > LOOP_BODY_BYTES or (limit is not None and length > limit):
        return 0
    return length


def request_path(head: bytes | bytearray) -> str:
    """The path of the request line's target (no query); empty when it has none."""
    if head.startswith(b"\r\n"):
        head = head[2:]
    line = bytes(head[: head.find(b"\r\n")])
    parts = line.split(b" ")
    if len(parts) != 3:
        return ""
    return parts[1].split(b"?", 1)[0].decode("latin-1")


DROPPED_AFTER_ANSWER = "agentik.rest_dropped_after_answer"
"""``environ`` key the worker sets (``gunicorn_worker``): it reads and drops what the app
left unread of a body after the answer is sent, so the app answers at once."""


class BodyTimeout(TimeoutError):
    """The request body did not arrive whole within ``web_body_timeout`` seconds."""


DROP_CHUNK = 65536


def unread_length(stream: Any) -> int | None:
    """Bytes of a body with a ``Content-Length`` that are still to come from the socket
    (gunicorn's ``Body`` over its ``LengthReader``); None when that is not known."""
    reader = getattr(stream, "reader", None)
    if isinstance(reader, LengthReader):
        return int(reader.length)
    return None


def drop_rest(stream: Any, length: int | None, bound: int) -> bool:
    """Read and drop what is left of a request body (``stream``: its ``wsgi.input``, of
    ``length`` bytes if known), when that is at most ``bound`` bytes; whether the body was
    then read to its end. A body announced longer than ``bound`` is not read (one byte tells
    whether the app read it whole); one that does not arrive in time (``BodyTimeout``), has
    a broken chunked encoding or is reset counts as not read."""
    try:
        if length is not None and length > bound:
            left = unread_length(stream)
            if left is not None:
                # Known without a read: a client that holds its body back is not waited for.
                return left == 0
            return not stream.read(1)
        dropped = 0
        while dropped <= bound:
            chunk = stream.read(DROP_CHUNK)
            if not chunk:
                return True
            dropped += len(chunk)
    except Exception:
        return False
    return False
