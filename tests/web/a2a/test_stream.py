"""An A2A streamed task costs the engine what an ``/agentik`` send costs: one ``Run``
stream, no extra ``Subscribe`` once the task finished, no store reads per event (issue 25:
the A2A tail under load was such extra work per task); and its mapping per text chunk is
built directly, the same JSON ``MessageToDict`` gives."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from a2a.types import (
    Artifact,
    Part,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from flask import Flask
from google.protobuf import json_format

from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.web.a2a.conftest import Rpc, user_message
from tests.web.conftest import web_settings
from web_facade import create_app
from web_facade.a2a.jsonrpc import encode
from web_facade.a2a.stream import stream_json
from web_facade.engine_client import EngineClient
from web_facade.engine_credentials import ForwardCredentials
from web_facade.proto_json import whole_numbers


class _Recorder(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Records the method of every engine call the facade makes."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.streams: list[Any] = []
        """The requests of the stream calls."""
        self._lock = threading.Lock()

    def _note(self, details: Any) -> None:
        with self._lock:
            self.methods.append(details.method.rsplit("/", 1)[-1])

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        self._note(details)
        return continuation(details, request)

    def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        self._note(details)
        self.streams.append(request)
        return continuation(details, request)


class _RecordedClient(EngineClient):
    """The facade's engine client, its calls recorded on the way out (a real channel)."""

    def __init__(self, target: str, recorder: _Recorder) -> None:
        super().__init__(target)
        self._recorder = recorder

    def _connect(self) -> None:
        super()._connect()
        self._stubs = [
            pb_grpc.AgentEngineStub(
                grpc.intercept_channel(channel, self._recorder, ForwardCredentials())
            )
            for channel in self._channels
        ]


@pytest.fixture
def recorded(engine_target: str) -> Iterator[tuple[Flask, _Recorder]]:
    recorder = _Recorder()
    client = _RecordedClient(engine_target, recorder)
    # The calls are recorded on the sync channel: its streams too.
    app = create_app(web_settings(engine_target, AGENTIK_WEB_STREAM_READER="threads"), client)
    app.testing = True
    try:
        yield app, recorder
    finally:
        client.close()


def test_a_streamed_task_is_one_run_call_however_many_events(
    recorded: tuple[Flask, _Recorder],
) -> None:
    app, recorder = recorded
    rpc = Rpc(app.test_client())
    # Paced well apart from the engine's 5 ms flush gap: tokens the engine reads together are
    # one event, and this wants many events even on a loaded box.
    text = "[[chunks:40]][[slow:0.03]] many little words to stream"
    replies = rpc.stream("SendStreamingMessage", {"message": user_message(text)})
    assert replies[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert sum("artifactUpdate" in r["result"] for r in replies) >= 10
    assert recorder.methods == ["Run"]
    # The facade asks for the events that are ready together in one message each.
    assert recorder.streams[0].batch_events


def test_a_streamed_task_in_a_known_context_adds_only_the_message_id_check(
    recorded: tuple[Flask, _Recorder],
) -> None:
    app, recorder = recorded
    rpc = Rpc(app.test_client())
    first = rpc.stream("SendStreamingMessage", {"message": user_message("hello")})
    context = first[0]["result"]["task"]["contextId"]
    recorder.methods.clear()
    replies = rpc.stream(
        "SendStreamingMessage", {"message": user_message("again", contextId=context)}
    )
    assert replies[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    # The /agentik send to a known conversation is one Run; A2A checks its messageId first.
    assert recorder.methods == ["ListMessages", "Run"]


def _chunk(text: str, **fields: Any) -> StreamResponse:
    artifact = Artifact(artifact_id="m1", name="answer", parts=[Part(text=text)])
    update = TaskArtifactUpdateEvent(task_id="t", context_id="c", artifact=artifact, **fields)
    return StreamResponse(artifact_update=update)


def _varied() -> list[StreamResponse]:
    with_metadata = _chunk("x")
    with_metadata.artifact_update.artifact.metadata.update({"k": 1})
    described = _chunk("y")
    described.artifact_update.artifact.description = "d"
    two_parts = _chunk("a")
    two_parts.artifact_update.artifact.parts.append(Part(text="b"))
    a_file = _chunk("z")
    a_file.artifact_update.artifact.parts[0].media_type = "text/plain"
    no_ids = StreamResponse(artifact_update=TaskArtifactUpdateEvent(artifact=Artifact()))
    status = StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t", context_id="c"))
    status.status_update.status.state = TaskState.TASK_STATE_WORKING
    return [
        _chunk("hello"),
        _chunk(" world", append=True),
        _chunk("", append=True, last_chunk=True),
        _chunk('é ☃ \n "quoted"'),
        with_metadata,
        described,
        two_parts,
        a_file,
        no_ids,
        StreamResponse(artifact_update=TaskArtifactUpdateEvent(task_id="t")),
        status,
        StreamResponse(task=Task(id="t", context_id="c")),
    ]


@pytest.mark.parametrize("response", _varied(), ids=lambda r: str(r.WhichOneof("payload")))
def test_a_stream_response_is_shaped_as_message_to_dict_shapes_it(
    response: StreamResponse,
) -> None:
    # Whole numbers as integers: a metadata Struct's {"k": 1} is sent as 1, not 1.0.
    shaped = whole_numbers(json_format.MessageToDict(response))
    assert stream_json(response) == shaped
    assert encode(stream_json(response)) == encode(shaped)


def test_a_real_streams_responses_are_shaped_as_message_to_dict_shapes_them(rpc: Rpc) -> None:
    replies = rpc.stream(
        "SendStreamingMessage", {"message": user_message("[[chunks:5]] five words")}
    )
    for reply in replies:
        response = json_format.ParseDict(reply["result"], StreamResponse())
        assert stream_json(response) == reply["result"] == json_format.MessageToDict(response)
