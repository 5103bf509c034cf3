"""What is left of a request body after its answer, dropped by the worker's event loop.

A route may answer without reading its request's body (a 404, a 405, the host check's 403,
a 413). The worker (``web_facade.gunicorn_worker``) sends that answer at once, then hands the
connection back to its event loop, which reads and drops the rest of the body as it comes, so
the next request on the kept-alive connection starts where it should, and no thread waits for
a client that holds its body back. These rules say where such a body ends, fed the bytes the
loop reads, a piece at a time:

- :class:`LengthRest`: a ``Content-Length`` body, of which a known number of bytes is left;
- :class:`ChunkedRest`: a chunked body not read at all, with the same rules as gunicorn's
  parser (size lines, extensions, the CRLF after each chunk); a broken body, one with
  trailers, or one longer than the bound is not dropped (:class:`RestNotDropped`): the
  connection closes.

:func:`rest_of` picks the rule for a request's body as gunicorn left it. A chunked body the
app read part of (a 413 past the limit) has no rule: where gunicorn's reader stopped inside
it is not known from outside, so its answer closes the connection (:func:`must_close`).
"""

from __future__ import annotations

import abc
import inspect
from typing import Any

# gunicorn ships no type information.
from gunicorn.http.body import (  # type: ignore[import-untyped]
    CHUNK_EXT_RE,
    DEFAULT_MAX_CHUNK_SIZE_LINE,
    ChunkedReader,
    LengthReader,
)

__all__ = [
    "BodyRest",
    "ChunkedRest",
    "LengthRest",
    "RestNotDropped",
    "must_close",
    "read_in_part",
    "rest_of",
]

_HEX = frozenset(b"0123456789abcdefABCDEF")


class RestNotDropped(ValueError):
    """The rest of a body cannot be dropped (broken, too long, or with trailers): the
    connection must close."""


class BodyRest(abc.ABC):
    """What is left of a body: :meth:`feed` drops its bytes."""

    @abc.abstractmethod
    def feed(self, data: bytes) -> bytes | None:
        """Drop the body's bytes at the start of ``data``: ``None`` while more of the body
        must come, else what follows its end (the next request's start, maybe empty).
        Raises :class:`RestNotDropped`."""


class LengthRest(BodyRest):
    """``left`` bytes of a ``Content-Length`` body."""

    def __init__(self, left: int) -> None:
        self.left = left

    def feed(self, data: bytes) -> bytes | None:
        taken = min(self.left, len(data))
        self.left -= taken
        return None if self.left else data[taken:]


class ChunkedRest(BodyRest):
    """A chunked body from its first size line, of at most ``bound`` bytes as sent."""

    def __init__(self, bound: int, line_limit: int = DEFAULT_MAX_CHUNK_SIZE_LINE) -> None:
        self.bound = bound
        self.line_limit = line_limit
        self.seen = 0
        """Bytes of the body fed so far."""
        self.pending = bytearray()
        """A size line, or a chunk's CRLF, read in part."""
        self.state = "size"
        """``size`` (a size line), ``data`` (a chunk's bytes), ``crlf`` (after them) or
        ``last`` (the CRLF after the last chunk's size line)."""
        self.left = 0
        """Bytes of the current chunk still to come."""

    def feed(self, data: bytes) -> bytes | None:
        view = memoryview(data)
        while view:
            if self.state == "size":
                used = self._size_line(view)
            elif self.state == "data":
                used = min(self.left, len(view))
                self.left -= used
                if not self.left:
                    self.state = "crlf"
            else:  # "crlf" or "last": exactly two bytes, a CRLF
                used = min(2 - len(self.pending), len(view))
                self.pending += view[:used]
                if not b"\r\n".startswith(self.pending):
                    what = "trailers" if self.state == "last" else "a chunk without its CRLF"
                    raise RestNotDropped(f"the rest of a chunked body has {what}")
                if len(self.pending) == 2:
                    self.pending.clear()
                    if self.state == "last":
                        self._count(used)
                        return bytes(view[used:])
                    self.state = "size"
            self._count(used)
            view = view[used:]
        return None

    def _size_line(self, view: memoryview) -> int:
        """Take bytes of a size line (at most ``line_limit`` of them, and its CRLF) from
        ``view``; how many it took."""
        searched = max(0, len(self.pending) - 1)
        piece = view[: self.line_limit + 2 - len(self.pending)]
        self.pending += piece
        end = self.pending.find(b"\r\n", searched)
        if end < 0:
            if len(self.pending) >= self.line_limit + 2:
                raise RestNotDropped("a chunk size line of a dropped body is too long")
            return len(piece)
        used = len(piece) - (len(self.pending) - end - 2)
        size = _chunk_size(bytes(self.pending[:end]))
        self.pending.clear()
        if size == 0:
            self.state = "last"
        else:
            self.state, self.left = "data", size
            if self.seen + used + size > self.bound:
                raise RestNotDropped("the rest of a chunked body is longer than the bound")
        return used

    def _count(self, used: int) -> None:
        self.seen += used
        if self.seen > self.bound:
            raise RestNotDropped("the rest of a chunked body is longer than the bound")


def _chunk_size(line: bytes) -> int:
    """A chunk's size from its size line, by gunicorn's rules (``ChunkedReader``)."""
    size, semicolon, extension = line.partition(b";")
    if semicolon:
        if b"\r" in extension:
            raise RestNotDropped("a chunk extension with a bare CR")
        size = size.rstrip(b" \t")
    if not size or any(byte not in _HEX for byte in size):
        raise RestNotDropped("a chunk size that is not hexadecimal")
    if semicolon and not CHUNK_EXT_RE.fullmatch(b";" + extension):
        raise RestNotDropped("an invalid chunk extension")
    return int(size, 16)


def read_in_part(body: Any) -> bool:
    """Whether a request's ``body`` (gunicorn's ``Body``) is chunked and was read in part,
    not to its end: where its rest starts is not known here."""
    reader = getattr(body, "reader", None)
    if not isinstance(reader, ChunkedReader) or reader.parser is None:
        return False
    return inspect.getgeneratorstate(reader.parser) != inspect.GEN_CREATED


def must_close(body: Any) -> bool:
    """Whether what is left of a request's ``body`` cannot be dropped whatever comes (it is
    read in part, or broken): its answer must close the connection."""
    return getattr(body, "failed", False) is True or read_in_part(body)


def rest_of(body: Any, bound: int) -> BodyRest | None:
    """What the loop must drop of ``body`` (gunicorn's ``Body``, once its answer is sent):
    ``None`` when it was read to its end (or has none). Raises :class:`RestNotDropped` when
    it cannot be dropped: broken, read in part (chunked), or announced longer than ``bound``."""
    if must_close(body):
        raise RestNotDropped("the body was read in part, or is broken")
    reader = getattr(body, "reader", None)
    if isinstance(reader, LengthReader):
        if reader.length > bound:
            raise RestNotDropped("the rest of the body is longer than the bound")
        return LengthRest(reader.length) if reader.length else None
    if isinstance(reader, ChunkedReader):
        if reader.parser is None:
            return None
        return ChunkedRest(bound, reader.limit_chunk_size_line)
    return None
