"""The whole stack for end-to-end tests: the fake LLM, the engine process, gunicorn."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI

# The stack lives in tests/stack.py (the benches use it too); the tests import it from here.
from tests.stack import ENGINE_LISTENING as ENGINE_LISTENING
from tests.stack import GUNICORN_LISTENING as GUNICORN_LISTENING
from tests.stack import ROOT as ROOT
from tests.stack import STARTUP as STARTUP
from tests.stack import WAIT as WAIT
from tests.stack import Process as Process
from tests.stack import Stack as Stack
from tests.stack import free_port as free_port
from tests.stack import wait_for as wait_for
from tests.web.openapi_check import assert_event_conforms, assert_response_conforms
from tests.web.sse_frames import Frame, SseParser


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("stack"))
    yield running
    running.stop()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def checked(response: httpx.Response) -> httpx.Response:
    """Hold a non-streamed response against the OpenAPI document, then return it."""
    assert_response_conforms(
        response.request.method,
        response.request.url.path,
        response.status_code,
        response.headers.get("content-type", ""),
        response.content,
    )
    return response


class SseStream:
    """An SSE response read with a real streaming client; reads are bounded."""

    def __init__(self, client: httpx.Client, method: str, path: str, **kwargs: Any) -> None:
        self._context = client.stream(method, path, **kwargs)
        self.response = self._context.__enter__()
        assert self.response.status_code == 200, self.response.read()
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._chunks = self.response.iter_raw()
        self._parser = SseParser()
        self.frames: list[Frame] = []

    @property
    def events(self) -> list[Frame]:
        return [f for f in self.frames if f.data is not None]

    def _pull(self) -> bool:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            return False
        for frame in self._parser.feed(chunk):
            if frame.data is not None:
                assert_event_conforms(frame.data)
            self.frames.append(frame)
        return True

    def read_until(self, done: Callable[[list[Frame]], bool], within: float = WAIT) -> list[Frame]:
        deadline = time.monotonic() + within
        while not done(self.events):
            assert time.monotonic() < deadline, f"timed out; got {[f.type for f in self.events]}"
            assert self._pull(), f"stream ended; got {[f.type for f in self.events]}"
        return self.events

    def read_to_end(self, within: float = WAIT) -> list[Frame]:
        deadline = time.monotonic() + within
        while self._pull():
            assert time.monotonic() < deadline, "the stream did not end in time"
        assert self._parser.pending == b"", "the stream ended mid-frame"
        return self.events

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def has(name: str) -> Callable[[list[Frame]], bool]:
    return lambda frames: any(f.type == name for f in frames)


def types(frames: list[Frame]) -> list[str | None]:
    return [f.type for f in frames]
