"""Multi-turn A2A tasks over the in-process app and a real engine with the offline model:
a run that stops for a person makes the task INPUT_REQUIRED; a message on the task answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask

from agentik.config import load_settings
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import Rpc, user_message
from tests.web.conftest import BackgroundEngine, engine_settings
from tests.web.e2e.conftest import wait_for

HITL = {
    "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
    "AGENTIK_STORE": "memory://",
    "AGENTIK_SHUTDOWN_GRACE": "0",
    "AGENTIK_TOOLS_APPROVAL": "calculate",
    "AGENTIK_TOOLS_ASK_USER": "true",
}
"""An engine with the offline model: "calculate 2+2" asks for approval, "ask me ..." asks."""


@pytest.fixture(scope="module")
def hitl_target() -> Iterator[str]:
    engine = BackgroundEngine(load_settings(None, HITL))
    target = engine.start()
    yield target
    engine.stop()


@pytest.fixture
def rpc(make_app: Callable[..., Flask], hitl_target: str) -> Rpc:
    return Rpc(make_app(hitl_target).test_client())


def _send(rpc: Rpc, message: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = rpc.result("SendMessage", {"message": message})["task"]
    return task


def _reply(task: dict[str, Any], *parts: dict[str, Any], **ids: str) -> dict[str, Any]:
    message = user_message("", taskId=task["id"], **ids)
    message["parts"] = list(parts)
    return message


def _answer(task: dict[str, Any]) -> str:
    return "".join(p["text"] for a in task.get("artifacts", []) for p in a["parts"])


def _paused(rpc: Rpc, text: str = "calculate 2+2") -> dict[str, Any]:
    task = _send(rpc, user_message(text))
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task
    return task


def test_a_call_that_needs_approval_leaves_the_task_input_required_with_text_and_data(
    rpc: Rpc,
) -> None:
    task = _paused(rpc)
    status = task["status"]["message"]
    assert status["role"] == "ROLE_AGENT" and status["taskId"] == task["id"]
    text, data = status["parts"]
    assert text["text"].startswith("Approve calling calculate")
    [interrupt] = data["data"]["interrupts"]
    assert interrupt["kind"] == "approval" and interrupt["id"]
    assert interrupt["tool"] == "calculate"
    assert interrupt["arguments"] == {"expression": "2+2"}
    got = rpc.result("GetTask", {"id": task["id"]})["status"]
    got.pop("timestamp"), task["status"].pop("timestamp")
    assert got == task["status"]
    listed = rpc.result("ListTasks", {"contextId": task["contextId"]})["tasks"]
    assert [(t["id"], t["status"]["state"]) for t in listed] == [
        (task["id"], "TASK_STATE_INPUT_REQUIRED")
    ]


def test_an_approval_sent_as_data_completes_the_same_task(rpc: Rpc) -> None:
    task = _paused(rpc)
    done = _send(rpc, _reply(task, {"data": {"approved": True}}, contextId=task["contextId"]))
    assert done["id"] == task["id"] and done["contextId"] == task["contextId"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _answer(done) == "2+2 = 4."
    got = rpc.result("GetTask", {"id": task["id"]})
    assert got["status"]["state"] == "TASK_STATE_COMPLETED" and got["history"] == done["history"]
    texts = [(m["role"], m["parts"][0]["text"]) for m in got["history"]]
    assert texts[0] == ("ROLE_USER", "calculate 2+2")
    assert texts[1][0] == "ROLE_AGENT" and texts[1][1].startswith("Approve calling calculate")
    assert texts[-1] == ("ROLE_AGENT", "2+2 = 4.")
    listed = rpc.result("ListTasks", {"contextId": task["contextId"]})["tasks"]
    assert [(t["id"], t["status"]["state"]) for t in listed] == [
        (task["id"], "TASK_STATE_COMPLETED")
    ]

    # One engine call lists the whole chain: both runs' messages, and the request between.
    def said(history: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return [(m["messageId"], m["role"], m["parts"][0]["text"]) for m in history]

    assert said(listed[0]["history"]) == said(got["history"])


def test_edited_arguments_are_what_runs(rpc: Rpc) -> None:
    task = _paused(rpc)
    edit = {"data": {"approved": True, "arguments": {"expression": "6*7"}}}
    assert _answer(_send(rpc, _reply(task, edit))) == "6*7 = 42."


@pytest.mark.parametrize("word", ["no", "No.", "deny", "reject"])
def test_no_in_text_declines_the_call(rpc: Rpc, word: str) -> None:
    task = _paused(rpc)
    done = _send(rpc, _reply(task, {"text": word}))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert _answer(done).startswith("The user declined this call of calculate")


@pytest.mark.parametrize("word", ["yes", "Y", "ok!", "approve"])
def test_yes_in_text_approves_the_call(rpc: Rpc, word: str) -> None:
    task = _paused(rpc)
    assert _answer(_send(rpc, _reply(task, {"text": word}))) == "2+2 = 4."


def test_a_question_is_answered_in_text(rpc: Rpc) -> None:
    task = _paused(rpc, "ask me your favourite colour")
    [interrupt] = task["status"]["message"]["parts"][1]["data"]["interrupts"]
    assert interrupt["kind"] == "question"
    assert interrupt["question"] == "Your favourite colour?"
    done = _send(rpc, _reply(task, {"text": "teal"}))
    assert _answer(done) == 'You answered: "teal". Thank you.'


def test_a_question_is_answered_with_data_naming_the_interrupt(rpc: Rpc) -> None:
    task = _paused(rpc, "ask me your favourite colour")
    [interrupt] = task["status"]["message"]["parts"][1]["data"]["interrupts"]
    answer = {"data": {"decisions": [{"interruptId": interrupt["id"], "answer": "red"}]}}
    assert _answer(_send(rpc, _reply(task, answer))) == 'You answered: "red". Thank you.'


@pytest.mark.parametrize(
    ("part", "field", "says"),
    [
        ({"text": "maybe later"}, "message.parts", 'reply "yes" or "no"'),
        ({"data": {"answer": "4"}}, "message.parts[0].data", "asks for approval"),
        ({"data": {"approved": "yes"}}, "message.parts[0].data.approved", "true or false"),
        ({"data": [1, 2]}, "message.parts[0].data", "must be an object"),
        ({"data": {"approved": True, "arguments": "2+3"}}, "message.parts[0].data.arguments", ""),
        (
            {"data": {"approved": True, "interruptId": "nope"}},
            "message.parts[0].data.interruptId",
            "",
        ),
        ({"data": {"decisions": []}}, "message.parts[0].data.decisions", "non-empty"),
        ({"url": "https://example.com/a.png", "mediaType": "image/png"}, "message.parts[0]", ""),
    ],
    ids=[
        "unclear-text",
        "answer-to-approval",
        "approved-not-bool",
        "not-object",
        "arguments-not-object",
        "unknown-interrupt",
        "no-decisions",
        "image",
    ],
)
def test_an_unclear_reply_is_invalid_params_and_the_task_still_waits(
    rpc: Rpc, part: dict[str, Any], field: str, says: str
) -> None:
    task = _paused(rpc)
    error = rpc.error("SendMessage", {"message": _reply(task, part)})
    assert error["code"] == -32602, error
    assert error["data"][0]["metadata"]["field"] == field
    assert says in error["message"]
    got = rpc.result("GetTask", {"id": task["id"]})
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert _answer(_send(rpc, _reply(task, {"text": "yes"}))) == "2+2 = 4."


@pytest.fixture(scope="module")
def two_calls_target() -> Iterator[str]:
    """An engine whose LLM (the fake) makes the calls a message names, in parallel."""
    with FakeOpenAI() as llm:
        engine = BackgroundEngine(engine_settings(llm, AGENTIK_TOOLS_APPROVAL="calculate"))
        target = engine.start()
        yield target
        engine.stop()


def test_a_reply_that_leaves_an_interrupt_unanswered_is_refused_by_the_engine(
    make_app: Callable[..., Flask], two_calls_target: str
) -> None:
    rpc = Rpc(make_app(two_calls_target).test_client())
    calls = '[[tool:calculate {"expression": "1+1"}]][[tool:calculate {"expression": "2+2"}]]'
    task = _paused(rpc, f"{calls} both")
    first, second = task["status"]["message"]["parts"][1]["data"]["interrupts"]
    one = {"data": {"decisions": [{"interruptId": first["id"], "approved": True}]}}
    error = rpc.error("SendMessage", {"message": _reply(task, one)})
    # The facade only translates the reply; the engine decides what it lacks.
    assert error["code"] == -32602, error
    assert "resume must answer every pending interrupt" in error["message"]
    assert second["id"] in error["message"]
    got = rpc.result("GetTask", {"id": task["id"]})
    assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_a_reply_with_another_context_is_invalid_params(rpc: Rpc) -> None:
    task = _paused(rpc)
    error = rpc.error(
        "SendMessage", {"message": _reply(task, {"text": "yes"}, contextId="other-context")}
    )
    assert error["code"] == -32602 and "is not the context of task" in error["message"]
    assert rpc.result("GetTask", {"id": task["id"]})["status"]["state"] == (
        "TASK_STATE_INPUT_REQUIRED"
    )


def test_a_message_to_a_completed_multi_turn_task_is_refused(rpc: Rpc) -> None:
    task = _paused(rpc)
    _send(rpc, _reply(task, {"text": "yes"}))
    error = rpc.error("SendMessage", {"message": _reply(task, {"text": "yes"})})
    assert error["code"] == -32004 and "is completed and takes no more messages" in error["message"]


def test_a_new_message_on_a_waiting_context_names_the_task_to_reply_to(rpc: Rpc) -> None:
    task = _paused(rpc)
    error = rpc.error(
        "SendMessage", {"message": user_message("hello", contextId=task["contextId"])}
    )
    assert error["code"] == -32602, error
    assert error["data"][0]["metadata"]["field"] == "message.taskId"
    assert f"taskId {task['id']!r}" in error["message"]


def test_a_decline_with_a_reason_reaches_the_model(rpc: Rpc) -> None:
    task = _paused(rpc)
    done = _send(rpc, _reply(task, {"data": {"approved": False, "reason": "not now"}}))
    assert "declined: not now" in _answer(done)
    assert done["id"] == task["id"]


def test_cancel_task_stops_waiting_for_input(rpc: Rpc) -> None:
    task = _paused(rpc)
    canceled = rpc.result("CancelTask", {"id": task["id"]})
    assert canceled["id"] == task["id"] and canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert rpc.result("GetTask", {"id": task["id"]})["status"]["state"] == "TASK_STATE_CANCELED"
    error = rpc.error("SendMessage", {"message": _reply(task, {"text": "yes"})})
    assert error["code"] == -32004
    again = _send(rpc, user_message("hello", contextId=task["contextId"]))
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"


def test_subscribe_to_a_waiting_task_answers_the_task_and_ends(rpc: Rpc) -> None:
    task = _paused(rpc)
    replies = rpc.stream("SubscribeToTask", {"id": task["id"]})
    assert len(replies) == 1
    assert replies[0]["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


def test_streaming_ends_at_input_required_and_the_streamed_reply_completes(rpc: Rpc) -> None:
    replies = rpc.stream("SendStreamingMessage", {"message": user_message("calculate 2+2")})
    results = [r["result"] for r in replies]
    assert list(results[0]) == ["task"]
    last = results[-1]["statusUpdate"]
    assert last["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert last["status"]["message"]["parts"][1]["data"]["interrupts"][0]["tool"] == "calculate"
    task = results[0]["task"]
    replies = rpc.stream("SendStreamingMessage", {"message": _reply(task, {"text": "yes"})})
    results = [r["result"] for r in replies]
    assert results[0]["task"]["id"] == task["id"]
    assert results[1]["statusUpdate"]["status"]["state"] == "TASK_STATE_WORKING"
    assert results[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    text = "".join(
        p["text"]
        for r in results
        if "artifactUpdate" in r
        for p in r["artifactUpdate"]["artifact"]["parts"]
    )
    assert text == "2+2 = 4."


def test_0_3_message_stream_marks_input_required_final(rpc: Rpc) -> None:
    message = {
        "kind": "message",
        "messageId": "m-" + user_message("x")["messageId"],
        "role": "user",
        "parts": [{"kind": "text", "text": "calculate 2+2"}],
    }
    replies = rpc.stream("message/stream", {"message": message}, headers={})
    last = replies[-1]["result"]
    assert last["status"]["state"] == "input-required" and last["final"] is True


def test_a_reply_that_returns_immediately_is_followed_by_get_task_to_completed(rpc: Rpc) -> None:
    task = _paused(rpc)
    reply = _reply(task, {"text": "yes"})
    params = {"message": reply, "configuration": {"returnImmediately": True}}
    started = rpc.result("SendMessage", params)["task"]
    assert started["id"] == task["id"]
    assert started["status"]["state"] in ("TASK_STATE_WORKING", "TASK_STATE_COMPLETED")
    seen: list[dict[str, Any]] = []

    def completed() -> bool:
        seen[:] = [rpc.result("GetTask", {"id": task["id"]})]
        state = seen[0]["status"]["state"]
        assert state in ("TASK_STATE_WORKING", "TASK_STATE_COMPLETED"), seen[0]
        return bool(state == "TASK_STATE_COMPLETED")

    wait_for(completed, "the reply to complete")
    assert _answer(seen[0]) == "2+2 = 4."
