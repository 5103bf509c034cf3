"""A strict SSE parser for the tests: frames as the spec reads them, checked as they come."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Frame:
    """One dispatched SSE event (or a comment-only / retry-only block)."""

    id: int | None
    event: str | None
    data: dict[str, Any] | None
    comments: list[str] = field(default_factory=list)
    retry: int | None = None

    @property
    def type(self) -> str | None:
        return None if self.data is None else str(self.data["type"])


class SseParser:
    """Feeds on raw bytes; yields a ``Frame`` per blank-line terminated block."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[Frame]:
        assert b"\r" not in chunk, "frames must use LF line ends only"
        self._buffer += chunk
        frames = []
        while b"\n\n" in self._buffer:
            block, self._buffer = self._buffer.split(b"\n\n", 1)
            frames.append(_parse_block(block.decode("utf-8")))
        return frames

    @property
    def pending(self) -> bytes:
        return self._buffer


def _parse_block(block: str) -> Frame:
    frame = Frame(id=None, event=None, data=None)
    data_lines: list[str] = []
    for line in block.split("\n"):
        if line.startswith(":"):
            frame.comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(": ")
        if name == "id":
            frame.id = int(value)
        elif name == "event":
            frame.event = value
        elif name == "data":
            data_lines.append(value)
        elif name == "retry":
            frame.retry = int(value)
        else:
            raise AssertionError(f"unexpected SSE line {line!r}")
    if data_lines:
        assert len(data_lines) == 1, "data must be one line of JSON"
        frame.data = json.loads(data_lines[0])
        assert frame.event == frame.data["type"], "event name and data type must agree"
    return frame


def frames_of(chunks: Iterable[bytes]) -> Iterator[Frame]:
    parser = SseParser()
    for chunk in chunks:
        yield from parser.feed(chunk)
    assert parser.pending == b"", "the stream ended mid-frame"


def events(frames: Iterable[Frame]) -> list[Frame]:
    """Only the frames that carry an event."""
    return [f for f in frames if f.data is not None]
