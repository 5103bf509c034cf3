"""Fixtures for the A2A facade: JSON-RPC over the in-process app (a real engine with the
fake LLM, from ``tests/web/conftest.py``), and the whole stack under gunicorn for the
a2a-sdk's own client."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import WAIT
from tests.web.e2e.conftest import Process, Stack

V10 = {"A2A-Version": "1.0"}


def user_message(text: str, **ids: str) -> dict[str, Any]:
    """An A2A 1.0 user message (ProtoJSON) with a fresh messageId."""
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **ids}


def frames_of(chunks: Iterator[bytes], within: float = WAIT) -> Iterator[dict[str, Any] | None]:
    """The JSON of each SSE frame (None for a comment-only frame); LF line ends, one
    ``data:`` line per frame, reads bounded by ``within``."""
    deadline = time.monotonic() + within
    buffer = b""
    for chunk in chunks:
        assert time.monotonic() < deadline, "the stream did not end in time"
        assert b"\r" not in chunk, "frames must use LF line ends only"
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            lines = block.decode().split("\n")
            data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
            assert all(line.startswith((":", "data: ", "retry: ")) for line in lines), lines
            assert len(data) <= 1, "data must be one line of JSON"
            yield json.loads(data[0]) if data else None
    assert buffer == b"", "the stream ended mid-frame"


class Rpc:
    """JSON-RPC calls on the in-process app."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client
        self._ids = iter(range(1, 1_000_000))

    def call(
        self, method: str, params: Any = None, *, headers: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """One call; asserts HTTP 200 and the echoed id, returns the whole response."""
        request_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}}
        response = self.client.post("/", json=body, headers=V10 if headers is None else headers)
        assert response.status_code == 200, response.get_data()
        assert response.mimetype == "application/json"
        reply: dict[str, Any] = response.get_json()
        assert reply["jsonrpc"] == "2.0" and reply["id"] == request_id
        return reply

    def result(self, method: str, params: Any = None, **kwargs: Any) -> dict[str, Any]:
        reply = self.call(method, params, **kwargs)
        assert "error" not in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def error(self, method: str, params: Any = None, **kwargs: Any) -> dict[str, Any]:
        reply = self.call(method, params, **kwargs)
        assert "result" not in reply, reply
        error: dict[str, Any] = reply["error"]
        return error

    def open(
        self, method: str, params: Any, *, headers: dict[str, str] | None = None
    ) -> ReplyStream:
        """A streaming call, to be read reply by reply."""
        body = {"jsonrpc": "2.0", "id": "s", "method": method, "params": params}
        response = self.client.post(
            "/", json=body, headers=V10 if headers is None else headers, buffered=False
        )
        assert response.status_code == 200
        assert response.mimetype == "text/event-stream", response.get_data()
        return ReplyStream(response)

    def stream(
        self, method: str, params: Any, *, headers: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """A streaming call read to its end: the JSON-RPC responses, heartbeats dropped."""
        replies = self.open(method, params, headers=headers)
        try:
            return replies.rest()
        finally:
            replies.close()


class ReplyStream:
    """The JSON-RPC responses of an SSE response, read with bounded waits."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self._frames = frames_of(iter(response.response))

    def next(self) -> dict[str, Any]:
        """The next response (heartbeats skipped); fails when the stream ended."""
        for frame in self._frames:
            if frame is not None:
                assert frame["jsonrpc"] == "2.0" and frame["id"] == "s", frame
                return frame
        raise AssertionError("the stream ended")

    def rest(self) -> list[dict[str, Any]]:
        """Every response up to the end of the stream."""
        replies = [frame for frame in self._frames if frame is not None]
        assert all(r["jsonrpc"] == "2.0" and r["id"] == "s" for r in replies), replies
        return replies

    def close(self) -> None:
        self.response.close()


@pytest.fixture
def rpc(app: Flask) -> Rpc:
    return Rpc(app.test_client())


class ConfiguredStack(Stack):
    """The end-to-end stack, its facade configured with its public URL (``localhost``, where
    it binds 127.0.0.1)."""

    def start_web(self) -> Process:
        self.env["AGENTIK_PUBLIC_URL"] = f"http://localhost:{self.http_port}/"
        return super().start_web()


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = ConfiguredStack(llm, tmp_path_factory.mktemp("a2a-stack"))
    yield running
    running.stop()
