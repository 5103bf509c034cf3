"""The engine event → /agentik SSE table, row by row."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.openapi_check import assert_event_conforms
from tests.web.sse_frames import SseParser
from web_facade.agentik.events import EVENT_TABLE, event_frame, input_required, to_agentik


def _event(seq: int = 7, **kind: Any) -> pb.Event:
    return pb.Event(seq=seq, session_id="t1", run_id="r1", **kind)


def _user_message() -> pb.Message:
    message = pb.Message(
        id="m1",
        role=pb.ROLE_USER,
        content=[
            pb.ContentPart(text=pb.TextPart(text="hi")),
            pb.ContentPart(image=pb.ImagePart(data=b"\x89PNG", mime_type="image/png")),
        ],
        status=pb.MESSAGE_STATUS_COMPLETE,
        run_id="r1",
    )
    message.create_time.FromSeconds(1_780_000_000)
    return message


def _compacted() -> struct_pb2.Value:
    value = struct_pb2.Value()
    value.struct_value.update(
        {
            "mode": "summarize",
            "covered": 40,
            "through_message_id": "m39",
            "tokens_before": 3100,
            "tokens_after": 900,
            "summary_tokens": 120,
            "summary": "They talked about cats.",
        }
    )
    return value


ROWS: list[tuple[pb.Event, str, dict[str, Any]]] = [
    (
        _event(message_stored=pb.MessageStored(message=_user_message())),
        "message",
        {
            "message": {
                "id": "m1",
                "role": "user",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "image", "data": "iVBORw==", "mime_type": "image/png"},
                ],
                "status": "complete",
                "created_at": "2026-05-28T20:26:40.000Z",
                "run_id": "r1",
            }
        },
    ),
    (
        _event(reasoning_start=pb.ReasoningStart(message_id="x")),
        "start_reasoning",
        {"message_id": "x"},
    ),
    (
        _event(text_message_start=pb.TextMessageStart(message_id="a", role=pb.ROLE_ASSISTANT)),
        "start_response",
        {"message_id": "a"},
    ),
    (
        _event(text_message_content=pb.TextMessageContent(message_id="a", delta="Hel")),
        "append_text",
        {"message_id": "a", "text": "Hel"},
    ),
    (
        _event(reasoning_message_content=pb.ReasoningMessageContent(message_id="x", delta="hm")),
        "append_text",
        {"message_id": "x", "text": "hm"},
    ),
    (
        _event(
            run_finished=pb.RunFinished(
                outcome=pb.OUTCOME_TYPE_SUCCESS,
                usage=pb.Usage(input_tokens=3, output_tokens=4, total_tokens=7),
                pending_tool_call_ids=["c1"],
            )
        ),
        "end",
        {
            "outcome": "success",
            "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7, "cached_tokens": 0},
            "pending_tool_call_ids": ["c1"],
        },
    ),
    (_event(run_finished=pb.RunFinished()), "end", {"outcome": "success"}),
    (
        _event(run_finished=pb.RunFinished(outcome=pb.OUTCOME_TYPE_INTERRUPT)),
        "end",
        {"outcome": "input_required"},
    ),
    (_event(run_finished=pb.RunFinished(outcome=pb.OUTCOME_TYPE_CANCELLED)), "interrupted", {}),
    (
        _event(run_error=pb.RunError(code="llm_timeout", message="slow")),
        "error",
        {"code": "llm_timeout", "message": "slow"},
    ),
    (
        _event(
            tool_call_start=pb.ToolCallStart(
                tool_call_id="c1", tool_call_name="calculate", parent_message_id="a"
            )
        ),
        "tool_call_start",
        {"tool_call_id": "c1", "name": "calculate", "message_id": "a"},
    ),
    (
        _event(tool_call_args=pb.ToolCallArgs(tool_call_id="c1", delta='{"x"')),
        "tool_call_args",
        {"tool_call_id": "c1", "delta": '{"x"'},
    ),
    (
        _event(tool_call_end=pb.ToolCallEnd(tool_call_id="c1")),
        "tool_call_end",
        {"tool_call_id": "c1"},
    ),
    (
        _event(
            tool_call_result=pb.ToolCallResult(
                message_id="m9",
                tool_call_id="c1",
                content="42",
                parts=[pb.ContentPart(image=pb.ImagePart(url="https://x/y.png"))],
            )
        ),
        "tool_call_result",
        {
            "tool_call_id": "c1",
            "message_id": "m9",
            "content": "42",
            "is_error": False,
            "parts": [{"type": "image", "url": "https://x/y.png"}],
        },
    ),
    (
        _event(
            custom=pb.Custom(name="tool_progress", value=struct_pb2.Value(string_value="half way"))
        ),
        "custom",
        {"name": "tool_progress", "value": "half way"},
    ),
    (
        _event(custom=pb.Custom(name="compacted", value=_compacted())),
        "compacted",
        {
            "mode": "summarize",
            "covered": 40,
            "through_message_id": "m39",
            "tokens_before": 3100,
            "tokens_after": 900,
            "summary_tokens": 120,
            "summary": "They talked about cats.",
        },
    ),
    (
        _event(
            custom=pb.Custom(
                name="superseded",
                value=struct_pb2.Value(
                    struct_value=struct_pb2.Struct(
                        fields={
                            "messageId": struct_pb2.Value(string_value="m1"),
                            "reason": struct_pb2.Value(string_value="asked again"),
                        }
                    )
                ),
            )
        ),
        "retry",
        {"message_id": "m1", "reason": "asked again"},
    ),
    (
        _event(state_snapshot=pb.StateSnapshot(snapshot=struct_pb2.Value(string_value="s"))),
        "state_snapshot",
        {"snapshot": "s"},
    ),
]


@pytest.mark.parametrize(
    ("event", "name", "fields"), ROWS, ids=[f"{r[1]}-{i}" for i, r in enumerate(ROWS)]
)
def test_each_engine_event_maps_to_its_agentik_event_with_type_and_run_id(
    event: pb.Event, name: str, fields: dict[str, Any]
) -> None:
    mapped = to_agentik(event)
    assert mapped == (name, {"type": name, "run_id": "r1", **fields})
    assert_event_conforms(mapped[1])


def test_state_delta_carries_the_json_patch_operations() -> None:
    delta = struct_pb2.ListValue()
    delta.add_struct().update({"op": "replace", "path": "/a", "value": 1})
    mapped = to_agentik(_event(state_delta=pb.StateDelta(delta=delta)))
    assert mapped is not None
    assert mapped[1]["delta"] == [{"op": "replace", "path": "/a", "value": 1}]
    assert_event_conforms(mapped[1])


@pytest.mark.parametrize(
    "event",
    [
        _event(run_started=pb.RunStarted()),
        _event(step_started=pb.StepStarted(step_name="s")),
        _event(step_finished=pb.StepFinished(step_name="s")),
        _event(text_message_end=pb.TextMessageEnd(message_id="a")),
        _event(reasoning_message_start=pb.ReasoningMessageStart(message_id="x")),
        _event(reasoning_message_end=pb.ReasoningMessageEnd(message_id="x")),
        _event(reasoning_end=pb.ReasoningEnd(message_id="x")),
        _event(messages_snapshot=pb.MessagesSnapshot()),
        _event(raw=pb.Raw(source="s")),
        _event(),
    ],
)
def test_events_without_a_row_are_skipped(event: pb.Event) -> None:
    assert to_agentik(event) is None
    assert event_frame(event) is None


def test_every_mapped_event_name_is_documented_in_the_openapi_event_union() -> None:
    names = {to_agentik(event)[0] for event, _, _ in ROWS if to_agentik(event)}  # type: ignore[index]
    assert names | {"state_delta"} == {
        "message",
        "start_reasoning",
        "start_response",
        "append_text",
        "end",
        "interrupted",
        "error",
        "tool_call_start",
        "tool_call_args",
        "tool_call_end",
        "tool_call_result",
        "state_snapshot",
        "state_delta",
        "custom",
        "compacted",
        "retry",
    }
    assert len(EVENT_TABLE) == 14


def test_a_frame_has_the_seq_as_id_the_name_as_event_and_one_line_of_json() -> None:
    text = "line one\nline two\r\n\u2028end"
    encoded = event_frame(
        _event(seq=41, text_message_content=pb.TextMessageContent(message_id="a", delta=text))
    )
    assert encoded is not None
    assert encoded.startswith(b"id: 41\nevent: append_text\ndata: {")
    assert encoded.endswith(b"}\n\n")
    assert encoded.count(b"\n") == 4
    (frame,) = SseParser().feed(encoded)
    assert frame.id == 41
    assert frame.data == {"type": "append_text", "run_id": "r1", "message_id": "a", "text": text}


def _interrupted_run(seq: int = 9) -> pb.Event:
    approval = pb.Interrupt(
        id="i1",
        kind=pb.INTERRUPT_KIND_APPROVAL,
        message="Approve calling calculate?",
        run_id="r1",
        tool_call=pb.ToolCall(id="c1", name="calculate", arguments='{"expression": "2+2"}'),
    )
    question = pb.Interrupt(
        id="i2",
        kind=pb.INTERRUPT_KIND_QUESTION,
        message="Colour?",
        run_id="r1",
        tool_call=pb.ToolCall(id="c2", name="ask_user", arguments="not json"),
        payload=struct_pb2.Value(
            struct_value=struct_pb2.Struct(
                fields={
                    "question": struct_pb2.Value(string_value="Colour?"),
                    "choices": struct_pb2.Value(
                        list_value=struct_pb2.ListValue(
                            values=[struct_pb2.Value(string_value="teal")]
                        )
                    ),
                }
            )
        ),
    )
    question.expire_time.FromSeconds(1_780_000_000)
    finished = pb.RunFinished(outcome=pb.OUTCOME_TYPE_INTERRUPT, interrupts=[approval, question])
    return _event(seq=seq, run_finished=finished)


def test_a_run_that_stops_for_a_person_gives_input_required_with_its_interrupts() -> None:
    data = input_required(_interrupted_run())
    assert data == {
        "type": "input_required",
        "run_id": "r1",
        "interrupts": [
            {
                "id": "i1",
                "kind": "approval",
                "message": "Approve calling calculate?",
                "run_id": "r1",
                "tool_call": {"id": "c1", "name": "calculate", "arguments": {"expression": "2+2"}},
            },
            {
                "id": "i2",
                "kind": "question",
                "message": "Colour?",
                "run_id": "r1",
                "tool_call": {"id": "c2", "name": "ask_user", "arguments": "not json"},
                "question": "Colour?",
                "choices": ["teal"],
                "expires_at": "2026-05-28T20:26:40.000Z",
            },
        ],
    }
    assert_event_conforms(data)


def test_input_required_comes_before_end_without_an_id_so_a_resume_gets_both() -> None:
    encoded = event_frame(_interrupted_run(seq=9))
    assert encoded is not None
    first, second = SseParser().feed(encoded)
    assert (first.type, first.id) == ("input_required", None)
    assert (second.type, second.id) == ("end", 9)
    assert second.data == {"type": "end", "run_id": "r1", "outcome": "input_required"}


@pytest.mark.parametrize(
    "outcome", [pb.OUTCOME_TYPE_SUCCESS, pb.OUTCOME_TYPE_CANCELLED, pb.OUTCOME_TYPE_UNSPECIFIED]
)
def test_no_input_required_for_runs_that_did_not_stop_for_a_person(outcome: int) -> None:
    assert input_required(_event(run_finished=pb.RunFinished(outcome=outcome))) is None  # type: ignore[arg-type]
