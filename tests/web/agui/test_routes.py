"""``POST /agui`` against a real engine: each run's events parsed by ``ag_ui.core`` and held to
the client's order rules; sessions, tools, state, reasoning, errors and interrupts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any, cast

import grpc
from ag_ui.core import BaseEvent, EventType
from flask.testing import FlaskClient

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.agui.agui_reader import (
    AguiReader,
    assert_well_formed,
    has,
    of,
    text,
    types,
    types_merged,
)
from tests.web.conftest import WAIT

CONFIRM = {
    "name": "confirm_order",
    "description": "Ask the user to confirm an order.",
    "parameters": {"type": "object", "properties": {"item": {"type": "string"}}},
}


def _thread() -> str:
    return f"agui-{uuid.uuid4().hex}"


def _user(content: Any, message_id: str = "") -> dict[str, Any]:
    return {"id": message_id or uuid.uuid4().hex, "role": "user", "content": content}


def _body(thread_id: str, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"threadId": thread_id, "runId": uuid.uuid4().hex, "messages": messages, **extra}


def _start(client: FlaskClient, body: dict[str, Any]) -> AguiReader:
    response = client.post("/agui", json=body, buffered=False)
    assert response.status_code == 200, response.get_data()
    assert response.mimetype == "text/event-stream"
    assert response.headers["Cache-Control"] == "no-cache"
    return AguiReader(cast("Iterable[bytes]", response.response))


def _run(client: FlaskClient, body: dict[str, Any]) -> list[BaseEvent]:
    events = _start(client, body).read_to_end()
    assert_well_formed(events)
    return events


def _snapshot(events: list[BaseEvent]) -> list[dict[str, Any]]:
    (snapshot,) = of(events, EventType.MESSAGES_SNAPSHOT)
    return [m.model_dump(by_alias=True) for m in snapshot.messages]


def _finished(events: list[BaseEvent]) -> dict[str, Any]:
    (finished,) = of(events, EventType.RUN_FINISHED)
    out: dict[str, Any] = finished.model_dump(by_alias=True)
    return out


def test_a_plain_run_streams_events_that_validate_and_end_with_run_finished(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    body = _body(thread_id, [_user("hello agui")], state={}, tools=[], context=[])
    events = _run(client, body)

    assert types_merged(events) == [
        "RUN_STARTED",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "MESSAGES_SNAPSHOT",
        "RUN_FINISHED",
    ]
    (started,) = of(events, EventType.RUN_STARTED)
    assert (started.thread_id, started.run_id) == (thread_id, body["runId"])
    assert text(events) == "Echo: hello agui"
    assert _finished(events)["outcome"] == {"type": "success"}
    assert all(isinstance(e.timestamp, int) for e in events)


def test_message_ids_are_stable_between_streamed_events_and_the_snapshot(
    client: FlaskClient,
) -> None:
    events = _run(client, _body(_thread(), [_user("stable ids", "u-stable")]))

    (start,) = of(events, EventType.TEXT_MESSAGE_START)
    snapshot = _snapshot(events)
    assert [(m["id"], m["role"]) for m in snapshot] == [
        ("u-stable", "user"),
        (start.message_id, "assistant"),
    ]
    assert snapshot[1]["content"] == "Echo: stable ids"


def test_a_backend_tool_answers_inside_the_run(client: FlaskClient) -> None:
    events = _run(client, _body(_thread(), [_user('[[tool:calculate {"expression": "6*7"}]]')]))

    assert types(events)[:2] == ["RUN_STARTED", "TOOL_CALL_START"]
    (call,) = of(events, EventType.TOOL_CALL_START)
    (result,) = of(events, EventType.TOOL_CALL_RESULT)
    assert call.tool_call_name == "calculate" and result.tool_call_id == call.tool_call_id
    assert json.loads(result.content)["result"] == 42
    assert text(events).startswith("Result: ")
    assert "pendingToolCallIds" not in _finished(events)["outcome"]


def test_a_frontend_tool_call_leaves_its_id_pending_and_the_next_run_continues_with_its_result(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    question = _user('[[tool:confirm_order {"item": "tea"}]]')
    first = _run(client, _body(thread_id, [question], tools=[CONFIRM]))

    (call,) = of(first, EventType.TOOL_CALL_START)
    assert call.tool_call_name == "confirm_order"
    assert not of(first, EventType.TOOL_CALL_RESULT), "the client's tool runs in the client"
    assert _finished(first)["outcome"] == {
        "type": "success",
        "pendingToolCallIds": [call.tool_call_id],
    }
    assistant = {
        "id": call.parent_message_id,
        "role": "assistant",
        "toolCalls": [
            {
                "id": call.tool_call_id,
                "type": "function",
                "function": {"name": "confirm_order", "arguments": '{"item": "tea"}'},
            }
        ],
    }
    answer = {"id": "t-1", "role": "tool", "toolCallId": call.tool_call_id, "content": "yes"}
    second = _run(client, _body(thread_id, [question, assistant, answer], tools=[CONFIRM]))

    assert text(second) == "Result: yes"
    assert [m["role"] for m in _snapshot(second)] == ["user", "assistant", "tool", "assistant"]


def test_frontend_and_backend_calls_in_one_turn_leave_only_the_frontend_call_pending(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    ask = '[[tool:confirm_order {"item": "cake"}]] [[tool:calculate {"expression": "2+3"}]]'
    first = _run(client, _body(thread_id, [_user(ask)], tools=[CONFIRM]))

    calls = {c.tool_call_name: c.tool_call_id for c in of(first, EventType.TOOL_CALL_START)}
    assert [r.tool_call_id for r in of(first, EventType.TOOL_CALL_RESULT)] == [calls["calculate"]]
    assert _finished(first)["outcome"]["pendingToolCallIds"] == [calls["confirm_order"]]
    answer = {"id": uuid.uuid4().hex, "role": "tool", "toolCallId": calls["confirm_order"]}
    second = _run(client, _body(thread_id, [{**answer, "content": "ok"}], tools=[CONFIRM]))

    # The LLM sees both results, in the order of the calls.
    assert text(second) == 'Result: ok; {"expression": "2+3", "result": 5}'


def test_update_state_streams_a_snapshot_then_deltas_on_the_state_the_client_sent(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    patch = [{"op": "replace", "path": "/count", "value": 2}]
    ask = f"[[tool:update_state {json.dumps({'patch': patch})}]]"
    first = _run(client, _body(thread_id, [_user(ask)], state={"count": 1}))

    (delta,) = of(first, EventType.STATE_DELTA)
    assert [op.model_dump(by_alias=True) for op in delta.delta] == patch
    replace = '[[tool:update_state {"state": {"count": 10}}]]'
    second = _run(client, _body(thread_id, [_user(replace)], state={"count": 2}))

    assert [s.snapshot for s in of(second, EventType.STATE_SNAPSHOT)] == [{"count": 10}]


def test_a_client_without_state_is_first_told_the_threads_state(client: FlaskClient) -> None:
    thread_id = _thread()
    _run(client, _body(thread_id, [_user('[[tool:update_state {"state": {"n": 1}}]]')]))
    patch = '[[tool:update_state {"patch": [{"op": "add", "path": "/m", "value": 2}]}]]'
    events = _run(client, _body(thread_id, [_user(patch)], state={}))

    assert types(events)[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert of(events, EventType.STATE_SNAPSHOT)[0].snapshot == {"n": 1}
    assert of(events, EventType.STATE_DELTA)[0].delta[0].path == "/m"


def test_reasoning_streams_as_reasoning_events_and_reasoning_messages_sent_back_are_ignored(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    question = _user("[[reason]] why")
    first = _run(client, _body(thread_id, [question]))

    assert types_merged(first)[1:6] == [
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
    ]
    reasoning = "".join(e.delta for e in of(first, EventType.REASONING_MESSAGE_CONTENT))
    assert reasoning == "Let me think about that."
    (start,) = of(first, EventType.REASONING_MESSAGE_START)
    kept = {"id": start.message_id, "role": "reasoning", "content": reasoning}
    second = _run(client, _body(thread_id, [question, kept, _user("next")]))

    assert [m["role"] for m in _snapshot(second)] == ["user", "assistant", "user", "assistant"]


def test_an_llm_failure_after_the_stream_opened_is_run_error_with_its_code(
    client: FlaskClient,
) -> None:
    events = _run(client, _body(_thread(), [_user("[[error:500]] boom")]))

    assert types(events) == ["RUN_STARTED", "RUN_ERROR"]
    (error,) = of(events, EventType.RUN_ERROR)
    assert error.code == "llm_server_error" and error.message


def test_an_interrupt_through_agentik_finishes_the_run_cancelled_after_closing_the_answer(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    thread_id = _thread()
    reader = _start(client, _body(thread_id, [_user("[[hang]] a long story")]))
    reader.read_until(has(EventType.TEXT_MESSAGE_CONTENT))
    stopped = client.post(f"/agentik/conversations/{thread_id}/interrupt")
    assert stopped.get_json()["interrupted"] is True
    events = reader.read_to_end()

    assert_well_formed(events)
    assert types(events)[-3:] == ["TEXT_MESSAGE_END", "MESSAGES_SNAPSHOT", "RUN_FINISHED"]
    assert _finished(events)["outcome"] == {"type": "cancelled"}
    assert _snapshot(events)[-1]["content"] == "Echo: "


def test_an_interrupt_over_grpc_also_finishes_the_run_cancelled(
    client: FlaskClient, engine_target: str
) -> None:
    thread_id = _thread()
    reader = _start(client, _body(thread_id, [_user("[[hang]] stop me over grpc")]))
    reader.read_until(has(EventType.TEXT_MESSAGE_CONTENT))
    with grpc.insecure_channel(engine_target) as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        reply = stub.Interrupt(pb.InterruptRequest(session_id=thread_id), timeout=WAIT)
    events = reader.read_to_end()

    assert reply.interrupted
    assert_well_formed(events)
    assert _finished(events)["outcome"] == {"type": "cancelled"}


def test_a_client_sending_only_its_newest_message_gets_an_answer_that_sees_earlier_turns(
    client: FlaskClient, llm: FakeOpenAI
) -> None:
    thread_id = _thread()
    for word in ("alpha", "beta", "gamma"):
        _run(client, _body(thread_id, [_user(f"turn {word}")]))

    sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
    assert sent == ["turn alpha", "turn beta", "turn gamma"]


def test_a_client_resending_the_whole_history_creates_no_duplicates(client: FlaskClient) -> None:
    thread_id = _thread()
    first = _run(client, _body(thread_id, [_user("one", "u1")]))
    history = _snapshot(first)
    second = _run(client, _body(thread_id, [*history, _user("two", "u2")]))

    assert [m["id"] for m in _snapshot(second)][:3] == ["u1", history[1]["id"], "u2"]
    listed = client.get(f"/agentik/conversations/{thread_id}/messages").get_json()
    assert [m["role"] for m in listed["items"]] == ["user", "assistant", "user", "assistant"]


def test_replace_makes_the_clients_messages_the_history(client: FlaskClient) -> None:
    thread_id = _thread()
    _run(client, _body(thread_id, [_user("forget me")]))
    options = {"agentik": {"reconcile": "replace"}}
    events = _run(client, _body(thread_id, [_user("fresh start", "u-new")], forwardedProps=options))

    assert [m["id"] for m in _snapshot(events)][:1] == ["u-new"]
    assert len(_snapshot(events)) == 2


def test_the_messages_snapshot_can_be_turned_off(client: FlaskClient) -> None:
    options = {"agentik": {"messagesSnapshot": False}, "app": {"kept": True}}
    events = _run(client, _body(_thread(), [_user("no snapshot")], forwardedProps=options))

    assert not of(events, EventType.MESSAGES_SNAPSHOT)


def test_a_run_through_agui_shows_up_in_the_same_conversation_through_agentik(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    events = _run(client, _body(thread_id, [_user("shared session", "u-shared")]))

    conversation = client.get(f"/agentik/conversations/{thread_id}").get_json()
    assert conversation["id"] == thread_id and conversation["count"] == 2
    listed = client.get(f"/agentik/conversations/{thread_id}/messages").get_json()
    assert [m["id"] for m in listed["items"]] == [m["id"] for m in _snapshot(events)]
    assert listed["items"][0]["content"] == [{"type": "text", "text": "shared session"}]


def test_user_images_by_data_and_url_are_stored_and_come_back_in_the_snapshot(
    client: FlaskClient,
) -> None:
    parts = [
        {"type": "text", "text": "what is this"},
        {"type": "image", "source": {"type": "data", "value": "iVBORw==", "mimeType": "image/png"}},
        {"type": "image", "source": {"type": "url", "value": "https://example.com/a.png"}},
    ]
    events = _run(client, _body(_thread(), [_user(parts, "u-img")]))

    assert _snapshot(events)[0]["content"] == parts


def test_a_thread_busy_with_another_run_is_refused_with_409_before_any_stream(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    reader = _start(client, _body(thread_id, [_user("[[hang]] busy")]))
    reader.read_until(has(EventType.TEXT_MESSAGE_CONTENT))
    response = client.post("/agui", json=_body(thread_id, [_user("me too")]))

    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "busy"
    assert error["message"].startswith(f"thread '{thread_id}' is busy with run "), error
    client.post(f"/agentik/conversations/{thread_id}/interrupt")
    assert_well_formed(reader.read_to_end())
