"""The engine event → AG-UI event table, and the stream's promise of a terminal event."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.agui.agui_reader import AguiReader, parse_event, types
from tests.web.conftest import WAIT
from web_facade.agui.events import EVENT_TABLE, TEXT_ROLES, message_to_agui, to_agui
from web_facade.agui.stream import AguiStream, _encoded, _patch
from web_facade.stream import DRAINING, EventRelay


def _event(**kind: Any) -> pb.Event:
    event = pb.Event(seq=3, session_id="t1", run_id="r1", **kind)
    event.time.FromMilliseconds(1_780_000_000_123)
    return event


def _wire(event: pb.Event) -> dict[str, Any]:
    converted = to_agui(event)
    assert converted is not None
    parse_event(converted.model_dump_json(by_alias=True))  # validates as the union
    out: dict[str, Any] = converted.model_dump(by_alias=True, mode="json")
    return out


def test_every_engine_event_kind_has_an_agui_form_except_agentiks_message_stored() -> None:
    kinds = {f.name for f in pb.Event.DESCRIPTOR.oneofs_by_name["kind"].fields}

    assert kinds - set(EVENT_TABLE) == {"message_stored"}
    stored = _event(message_stored=pb.MessageStored(message=pb.Message(id="m")))
    assert to_agui(stored) is None


def test_run_started_declares_protocol_version_1_0_and_the_events_time_in_ms() -> None:
    wire = _wire(_event(run_started=pb.RunStarted(parent_run_id="r0")))

    assert wire == {
        "type": "RUN_STARTED",
        "timestamp": 1_780_000_000_123,
        "threadId": "t1",
        "runId": "r1",
        "protocolVersion": "1.0",
        "parentRunId": "r0",
    }


@pytest.mark.parametrize(
    ("finished", "outcome"),
    [
        (pb.RunFinished(), {"type": "success"}),
        (
            pb.RunFinished(outcome=pb.OUTCOME_TYPE_SUCCESS, pending_tool_call_ids=["c1", "c2"]),
            {"type": "success", "pendingToolCallIds": ["c1", "c2"]},
        ),
        (pb.RunFinished(outcome=pb.OUTCOME_TYPE_CANCELLED), {"type": "cancelled"}),
    ],
)
def test_run_finished_carries_the_outcome(finished: pb.RunFinished, outcome: Any) -> None:
    assert _wire(_event(run_finished=finished))["outcome"] == outcome


def _interrupt(kind: pb.InterruptKind.ValueType, payload: Any, **fields: Any) -> pb.Interrupt:
    interrupt = pb.Interrupt(id="i1", kind=kind, run_id="r1", **fields)
    json_format.ParseDict(payload, interrupt.payload)
    json_format.ParseDict({"type": "object"}, interrupt.response_schema)
    return interrupt


def test_an_interrupted_run_finishes_with_each_interrupt_and_its_structured_request() -> None:
    approval = _interrupt(
        pb.INTERRUPT_KIND_APPROVAL,
        {"tool": "calculate", "arguments": {"expression": "2+2"}},
        message="Approve calling calculate?",
        tool_call=pb.ToolCall(id="c1", name="calculate", arguments='{"expression": "2+2"}'),
    )
    approval.expire_time.FromMilliseconds(1_780_000_060_500)
    question = _interrupt(
        pb.INTERRUPT_KIND_QUESTION,
        {"question": "Tea or coffee?", "choices": ["tea", "coffee"]},
        message="Tea or coffee?",
        tool_call=pb.ToolCall(id="c2", name="ask_user"),
    )
    question.id = "i2"
    finished = pb.RunFinished(outcome=pb.OUTCOME_TYPE_INTERRUPT, interrupts=[approval, question])

    outcome = _wire(_event(run_finished=finished))["outcome"]

    assert outcome == {
        "type": "interrupt",
        "interrupts": [
            {
                "id": "i1",
                "reason": "tool_approval",
                "message": "Approve calling calculate?",
                "toolCallId": "c1",
                "responseSchema": {"type": "object"},
                "expiresAt": "2026-05-28T20:27:40.500Z",
                "metadata": {
                    "kind": "approval",
                    "tool": "calculate",
                    "arguments": {"expression": "2+2"},
                },
            },
            {
                "id": "i2",
                "reason": "question",
                "message": "Tea or coffee?",
                "toolCallId": "c2",
                "responseSchema": {"type": "object"},
                "metadata": {
                    "kind": "question",
                    "question": "Tea or coffee?",
                    "choices": ["tea", "coffee"],
                },
            },
        ],
    }


def test_usage_and_result_of_a_finished_run_are_kept() -> None:
    finished = pb.RunFinished(
        usage=pb.Usage(input_tokens=3, output_tokens=4, total_tokens=7),
        result=struct_pb2.Value(number_value=2),
    )
    wire = _wire(_event(run_finished=finished))

    assert wire["usage"] == [{"inputTokens": 3, "outputTokens": 4, "totalTokens": 7}]
    assert wire["result"] == 2


def test_run_error_keeps_the_engines_code() -> None:
    wire = _wire(_event(run_error=pb.RunError(message="down", code="llm_unavailable")))

    assert (wire["code"], wire["message"]) == ("llm_unavailable", "down")


def test_a_tool_result_with_images_becomes_text_and_image_parts() -> None:
    image = pb.ContentPart(image=pb.ImagePart(data=b"\x01", mime_type="image/png"))
    result = pb.ToolCallResult(message_id="m", tool_call_id="c", content="see", parts=[image])
    wire = _wire(_event(tool_call_result=result))

    assert wire["content"] == [
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "data", "value": "AQ==", "mimeType": "image/png"}},
    ]


def test_state_keeps_whole_numbers_whole() -> None:
    snapshot = struct_pb2.Value()
    snapshot.struct_value.update({"count": 1, "ratio": 0.5, "tags": ["a"]})

    assert _wire(_event(state_snapshot=pb.StateSnapshot(snapshot=snapshot)))["snapshot"] == {
        "count": 1,
        "ratio": 0.5,
        "tags": ["a"],
    }


def test_stored_messages_map_back_with_their_ids_and_roles() -> None:
    text = pb.ContentPart(text=pb.TextPart(text="t"))
    stored = [
        pb.Message(id="a", role=pb.ROLE_ASSISTANT, status=pb.MESSAGE_STATUS_INTERRUPTED),
        pb.Message(
            id="b",
            role=pb.ROLE_TOOL,
            tool_call_id="c",
            status=pb.MESSAGE_STATUS_ERROR,
            content=[text],
        ),
        pb.Message(id="c", role=pb.ROLE_DEVELOPER, content=[text]),
        pb.Message(id="d", role=pb.ROLE_USER, content=[text], name="ann"),
    ]

    assert [message_to_agui(m).model_dump(by_alias=True) for m in stored] == [
        {"id": "a", "role": "assistant"},
        {"id": "b", "role": "tool", "content": "t", "toolCallId": "c", "error": "t"},
        {"id": "c", "role": "developer", "content": "t"},
        {"id": "d", "role": "user", "name": "ann", "content": "t"},
    ]


class _Call:
    """A gRPC server stream stand-in: yields events, then ends or fails."""

    def __init__(self, events: list[pb.Event], failure: grpc.RpcError | None = None) -> None:
        self._events = events
        self._failure = failure
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[pb.Event]:
        yield from self._events
        if self._failure is not None:
            raise self._failure

    def cancel(self) -> None:
        self.cancelled.set()


class _Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "Socket closed"


def _opened() -> list[pb.Event]:
    return [
        _event(run_started=pb.RunStarted()),
        _event(text_message_start=pb.TextMessageStart(message_id="m", role=pb.ROLE_ASSISTANT)),
        _event(text_message_content=pb.TextMessageContent(message_id="m", delta="par")),
    ]


def _stream(call: _Call, **kwargs: Any) -> list[Any]:
    relay = EventRelay(call)
    events = AguiReader(iter(AguiStream(relay, heartbeat=0.2, **kwargs))).read_to_end()
    assert relay.join(WAIT) and call.cancelled.is_set()
    return events


def test_a_stream_whose_engine_connection_breaks_mid_run_ends_with_run_error() -> None:
    events = _stream(_Call(_opened(), _Unavailable()))

    assert types(events)[-1] == "RUN_ERROR"
    assert events[-1].code == "engine_unavailable"


def test_a_stream_that_ends_before_the_run_did_ends_with_run_error() -> None:
    events = _stream(_Call(_opened()))

    assert types(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "RUN_ERROR",
    ]
    assert events[-1].code == "engine_error"


def test_a_draining_worker_ends_an_open_stream_with_run_error() -> None:
    class Endless(_Call):
        def __iter__(self) -> Iterator[pb.Event]:
            yield from self._events
            self.cancelled.wait(WAIT)  # a run that goes on until the facade lets go

    DRAINING.set()
    try:
        events = _stream(Endless(_opened()))
    finally:
        DRAINING.clear()

    assert types(events)[-1] == "RUN_ERROR"
    assert events[-1].code == "shutting_down"


# -- ACTIVITY events (AG-UI 2026) ------------------------------------------------------


def _custom(name: str, value: Any, seq: int = 3) -> pb.Event:
    body = struct_pb2.Value()
    json_format.ParseDict(value, body)
    event = _event(custom=pb.Custom(name=name, value=body))
    event.seq = seq
    return event


def _progress(progress: int, message: str) -> pb.Event:
    value = {"tool_call_id": "c1", "progress": progress, "total": None, "message": message}
    return _custom("tool_progress", value, seq=progress)


def test_tool_progress_is_an_activity_snapshot_of_the_call_not_a_custom_event() -> None:
    wire = _wire(_progress(1, "half way"))

    assert wire == {
        "type": "ACTIVITY_SNAPSHOT",
        "timestamp": 1_780_000_000_123,
        "messageId": "c1-progress",
        "activityType": "tool_progress",
        "content": {"tool_call_id": "c1", "progress": 1, "total": None, "message": "half way"},
    }


def test_a_compaction_is_an_activity_snapshot_and_other_custom_events_stay_custom() -> None:
    compacted = {"mode": "trim", "covered": 4, "through_message_id": "m4"}
    wire = _wire(_custom("compacted", compacted))
    assert (wire["type"], wire["messageId"], wire["activityType"]) == (
        "ACTIVITY_SNAPSHOT",
        "compaction-m4",
        "compaction",
    )
    assert wire["content"] == compacted

    for name, value in [("resumed", {"resumes": 1}), ("superseded", {"messageId": "m"})]:
        assert _wire(_custom(name, value))["type"] == "CUSTOM"
    # a tool_progress without a call id is not an activity anyone can place
    assert _wire(_custom("tool_progress", {"progress": 1}))["type"] == "CUSTOM"


def test_a_tools_later_progress_in_the_same_stream_is_an_activity_delta() -> None:
    events = [
        _event(run_started=pb.RunStarted()),
        _progress(1, "started"),
        _progress(2, "half way"),
        _event(run_finished=pb.RunFinished()),
    ]
    streamed = _stream(_Call(events))

    assert types(streamed) == ["RUN_STARTED", "ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "RUN_FINISHED"]
    delta = streamed[2].model_dump(by_alias=True, mode="json")
    assert delta["messageId"] == "c1-progress" and delta["activityType"] == "tool_progress"
    assert delta["patch"] == [
        {"op": "replace", "path": "/message", "value": "half way"},
        {"op": "replace", "path": "/progress", "value": 2},
    ]


def test_an_activity_delta_adds_removes_and_replaces_keys_with_escaped_pointers() -> None:
    before = {"a/b": 1, "gone": True, "same": [1]}
    after = {"a/b": 2, "new~": "x", "same": [1]}

    assert _patch(before, after) == [
        {"op": "remove", "path": "/gone"},
        {"op": "replace", "path": "/a~1b", "value": 2},
        {"op": "add", "path": "/new~0", "value": "x"},
    ]


def _sdk_frame(event: pb.Event) -> bytes:
    """The frame as the SDK's model and encoder write it."""
    converted = to_agui(event)
    assert converted is not None
    return _encoded(converted)


def _content(delta: str, *, message_id: str = "m1", millis: int = 1_780_000_000_123) -> pb.Event:
    event = _event(text_message_content=pb.TextMessageContent(message_id=message_id, delta=delta))
    event.time.FromMilliseconds(millis)
    return event


def test_a_text_content_frame_is_byte_for_byte_the_sdks_for_every_code_point() -> None:
    """TEXT_MESSAGE_CONTENT, most of a stream's frames, is written without the SDK's model
    (2 µs against 20): the bytes must be what the SDK writes, for any text."""
    stream = AguiStream(EventRelay(iter(())), heartbeat=0)
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(points), 4096):
        delta = "".join(map(chr, points[start : start + 4096]))
        event = _content(delta)
        assert stream.encode_event(event) == _sdk_frame(event)
    for delta, message_id, millis in [
        ("", "m1", 0),
        ('a "quoted" \\ back\\slash\n\r\t\b\f\x00\x1f\x7f', "msg-ü", 1),
        ("\u2028\u2029 <script>&amp;</script> 🎉 日本語", "M" * 64, 253_402_300_799_999),
        ("x", "", 1_780_000_000_999),
    ]:
        event = _content(delta, message_id=message_id, millis=millis)
        assert stream.encode_event(event) == _sdk_frame(event)
    # Nanoseconds below the millisecond are dropped as the SDK's timestamp drops them.
    event = _content("y")
    event.time.nanos += 999_999
    assert stream.encode_event(event) == _sdk_frame(event)


def test_a_text_content_frame_is_written_without_the_sdks_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path is taken: no SDK model is made for TEXT_MESSAGE_CONTENT (every other
    kind still goes through the table)."""
    from web_facade.agui import stream as agui_stream

    made: list[str] = []

    def counting(event: pb.Event) -> Any:
        made.append(str(event.WhichOneof("kind")))
        return to_agui(event)

    monkeypatch.setattr(agui_stream, "to_agui", counting)
    stream = AguiStream(EventRelay(iter(())), heartbeat=0)
    frame = stream.encode_event(_content("hello"))
    assert frame.startswith(b'data: {"type":"TEXT_MESSAGE_CONTENT"')
    stream.encode_event(_event(text_message_start=pb.TextMessageStart(message_id="m1")))
    stream.encode_event(_event(text_message_end=pb.TextMessageEnd(message_id="m1")))
    stream.encode_event(_event(run_finished=pb.RunFinished()))
    assert made == ["run_finished"]


@pytest.mark.parametrize("role", [pb.ROLE_UNSPECIFIED, pb.ROLE_ASSISTANT, *TEXT_ROLES])
@pytest.mark.parametrize(
    ("message_id", "millis"),
    [("m1", 0), ('msg-ü "q" \\ \u2028 🎉', 1_780_000_000_999), ("", 253_402_300_799_999)],
)
def test_a_text_start_and_end_frame_are_byte_for_byte_the_sdks(
    role: pb.Role.ValueType, message_id: str, millis: int
) -> None:
    """TEXT_MESSAGE_START and _END, an answer's other frames, are written without the
    SDK's model too."""
    stream = AguiStream(EventRelay(iter(())), heartbeat=0)
    start = _event(text_message_start=pb.TextMessageStart(message_id=message_id, role=role))
    end = _event(text_message_end=pb.TextMessageEnd(message_id=message_id))
    for event in (start, end):
        event.time.FromMilliseconds(millis)
        event.time.nanos += 999_999 if millis else 0
        assert stream.encode_event(event) == _sdk_frame(event)
