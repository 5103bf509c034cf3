"""Every relayed event reaches the client exactly once, on every protocol.

A fake engine hands the facade a run of more events than one written chunk holds, all of
them already waiting in the relay's queue when the response body starts; each protocol's
stream must then carry every event once, in order, whatever its batching does.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any, cast

import pytest
from flask import Flask
from flask.testing import FlaskClient

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.a2a.conftest import V10, frames_of
from tests.web.agui.agui_reader import AguiReader, text
from tests.web.conftest import WAIT, web_settings
from tests.web.sse_frames import SseParser
from web_facade import create_app
from web_facade.engine_client import EngineClient

TEXT_EVENTS = 1500
"""More text events than several written chunks hold (a chunk takes at most 256)."""


class WaitingCall:
    """A server-streaming call whose events are all there at once; ``cancel`` is recorded."""

    def __init__(self, events: list[pb.Event]) -> None:
        self._events = events
        self.drained = threading.Event()
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[pb.Event]:
        yield from self._events
        # Asked for the next one after the last was queued: every event is waiting.
        self.drained.set()

    def cancel(self) -> None:
        self.cancelled.set()


def _event(seq: int, thread_id: str, run_id: str, **kind: Any) -> pb.Event:
    return pb.Event(seq=seq, session_id=thread_id, run_id=run_id, **kind)


def _run_events(thread_id: str, run_id: str) -> list[pb.Event]:
    """RUN_STARTED, one message of TEXT_EVENTS chunks (each its own seq as text), the end."""
    seqs = iter(range(1, TEXT_EVENTS + 100))
    out = [
        _event(next(seqs), thread_id, run_id, run_started=pb.RunStarted()),
        _event(
            next(seqs),
            thread_id,
            run_id,
            text_message_start=pb.TextMessageStart(message_id="m", role=pb.ROLE_ASSISTANT),
        ),
    ]
    for _ in range(TEXT_EVENTS):
        seq = next(seqs)
        content = pb.TextMessageContent(message_id="m", delta=f"{seq} ")
        out.append(_event(seq, thread_id, run_id, text_message_content=content))
    out.append(
        _event(next(seqs), thread_id, run_id, text_message_end=pb.TextMessageEnd(message_id="m"))
    )
    out.append(_event(next(seqs), thread_id, run_id, run_finished=pb.RunFinished()))
    return out


class FakeStub:
    """The engine's ``Run`` answers with a :class:`WaitingCall`; ``Subscribe`` (the A2A
    facade waits for the run's end to be stored) with an empty one."""

    def __init__(self) -> None:
        self.calls: list[WaitingCall] = []

    def Run(self, request: pb.RunRequest, **_: Any) -> WaitingCall:
        call = WaitingCall(_run_events(request.session_id, request.run_id or "r1"))
        self.calls.append(call)
        return call

    def Subscribe(self, request: pb.SubscribeRequest, **_: Any) -> WaitingCall:
        return WaitingCall([])


class FakeEngine(EngineClient):
    def __init__(self) -> None:
        super().__init__("127.0.0.1:9")
        self.stub = FakeStub()

    @property
    def engine(self) -> Any:
        return self.stub


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def client(engine: FakeEngine) -> FlaskClient:
    # The fake is a sync stub: the streams are read by relay threads.
    settings = web_settings("127.0.0.1:9", AGENTIK_WEB_STREAM_READER="threads")
    app: Flask = create_app(settings, engine)
    app.testing = True
    return app.test_client()


def _open(engine: FakeEngine, response: Any) -> Iterable[bytes]:
    """The body of a streamed response, opened once every event waits in the relay."""
    assert response.status_code == 200, response.get_data()
    assert engine.stub.calls[-1].drained.wait(WAIT)
    return cast("Iterable[bytes]", response.response)


def _expected() -> list[int]:
    return list(range(3, 3 + TEXT_EVENTS))


def _numbers(texts: Iterable[str]) -> list[int]:
    return [int(word) for word in "".join(texts).split()]


def test_agentik_send_streams_every_event_once_when_a_thousand_wait_at_once(
    client: FlaskClient, engine: FakeEngine
) -> None:
    response = client.post("/agentik/conversations/c1/send", json={"text": "hi"}, buffered=False)
    parser = SseParser()
    frames = [f for chunk in _open(engine, response) for f in parser.feed(chunk) if f.data]

    ids = [f.id for f in frames]
    assert len(ids) == len(set(ids)), "an event was sent twice"
    assert [f.id for f in frames if f.type == "append_text"] == _expected()
    assert frames[-1].type == "end"
    assert engine.stub.calls[-1].cancelled.is_set()


def test_agui_run_streams_every_event_once_when_a_thousand_wait_at_once(
    client: FlaskClient, engine: FakeEngine
) -> None:
    body = {
        "threadId": "t1",
        "runId": uuid.uuid4().hex,
        "messages": [{"id": "u1", "role": "user", "content": "hi"}],
    }
    response = client.post("/agui", json=body, buffered=False)
    events = AguiReader(_open(engine, response)).read_to_end()

    assert _numbers([text(events)]) == _expected()
    assert events[-1].type == "RUN_FINISHED"


def test_a2a_streaming_sends_every_event_once_when_a_thousand_wait_at_once(
    client: FlaskClient, engine: FakeEngine
) -> None:
    message = {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }
    response = client.post("/", json=request, headers=V10, buffered=False)
    results = [f["result"] for f in frames_of(iter(_open(engine, response))) if f is not None]

    texts = [
        part["text"]
        for result in results
        if "artifactUpdate" in result
        for part in result["artifactUpdate"]["artifact"]["parts"]
    ]
    assert _numbers(texts) == _expected()
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
