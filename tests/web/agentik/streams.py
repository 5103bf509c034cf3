"""Reading SSE responses of the Flask test client with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.web.conftest import WAIT
from tests.web.openapi_check import assert_event_conforms
from tests.web.sse_frames import Frame, SseParser


class StreamReader:
    """Pulls frames from a streamed test-client response; every read is bounded.

    The facade writes a heartbeat at least every AGENTIK_HEARTBEAT seconds, so a pull
    never blocks past the deadline by more than that.
    """

    def __init__(self, response: Any) -> None:
        assert response.status_code == 200, response.get_data()
        assert response.mimetype == "text/event-stream"
        self.response = response
        self._chunks = iter(response.response)
        self._parser = SseParser()
        self.frames: list[Frame] = []
        self.ended = False

    @property
    def events(self) -> list[Frame]:
        return [f for f in self.frames if f.data is not None]

    def read_until(self, done: Callable[[list[Frame]], bool], within: float = WAIT) -> list[Frame]:
        deadline = time.monotonic() + within
        while not done(self.events):
            assert time.monotonic() < deadline, f"timed out; got {[f.type for f in self.events]}"
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self.ended = True
                raise AssertionError(f"stream ended; got {[f.type for f in self.events]}") from None
            for frame in self._parser.feed(chunk):
                if frame.data is not None:
                    assert_event_conforms(frame.data)
                self.frames.append(frame)
        return self.events

    def read_to_end(self, within: float = WAIT) -> list[Frame]:
        deadline = time.monotonic() + within
        for chunk in self._chunks:
            assert time.monotonic() < deadline, "the stream did not end in time"
            for frame in self._parser.feed(chunk):
                if frame.data is not None:
                    assert_event_conforms(frame.data)
                self.frames.append(frame)
        assert self._parser.pending == b""
        self.ended = True
        return self.events

    def close(self) -> None:
        self.response.close()


def types(frames: list[Frame]) -> list[str | None]:
    return [f.type for f in frames]


def has(name: str) -> Callable[[list[Frame]], bool]:
    return lambda frames: any(f.type == name for f in frames)
