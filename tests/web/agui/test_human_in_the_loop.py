"""Human in the loop over ``POST /agui``: a gated call ends the run with outcome interrupt, and
the next run's ``resume`` approves, edits, declines or answers it.

A real engine with the offline model drives the flows deterministically: "calculate 2+2" calls
``calculate`` (listed for approval), "ask me ..." calls ``ask_user``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from ag_ui.core import BaseEvent, EventType
from flask import Flask
from flask.testing import FlaskClient

from agentik.config import load_settings
from tests.web.agui.agui_reader import AguiReader, assert_well_formed, of, text, types
from tests.web.conftest import BackgroundEngine

EXPIRY = 3600
HITL = {
    "AGENTIK_TOOLS_APPROVAL": "calculate",
    "AGENTIK_TOOLS_ASK_USER": "true",
    "AGENTIK_INTERRUPT_EXPIRY": str(EXPIRY),
}


@pytest.fixture(scope="module")
def hitl_target() -> Iterator[str]:
    """An engine with the offline model, ``calculate`` gated and ``ask_user`` offered."""
    env = {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://", **HITL}
    engine = BackgroundEngine(load_settings(None, {**env, "AGENTIK_SHUTDOWN_GRACE": "0"}))
    target = engine.start()
    yield target
    engine.stop()


@pytest.fixture
def client(make_app: Callable[..., Flask], hitl_target: str) -> FlaskClient:
    return make_app(hitl_target).test_client()


def _thread() -> str:
    return f"hitl-{uuid.uuid4().hex}"


def _body(thread_id: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = [{"id": uuid.uuid4().hex, "role": "user", "content": text}] if text else []
    return {"threadId": thread_id, "runId": uuid.uuid4().hex, "messages": messages, **extra}


def _run(client: FlaskClient, body: dict[str, Any]) -> list[BaseEvent]:
    response = client.post("/agui", json=body, buffered=False)
    assert response.status_code == 200, response.get_data()
    events = AguiReader(cast("Iterable[bytes]", response.response)).read_to_end()
    assert_well_formed(events)
    return events


def _outcome(events: list[BaseEvent]) -> dict[str, Any]:
    (finished,) = of(events, EventType.RUN_FINISHED)
    wire: dict[str, Any] = json.loads(finished.model_dump_json(by_alias=True, exclude_none=True))
    outcome: dict[str, Any] = wire["outcome"]
    return outcome


def _paused(client: FlaskClient, thread_id: str, text: str) -> tuple[dict[str, Any], list[Any]]:
    """Run ``text``; the one interrupt the run ended with, and the run's events."""
    events = _run(client, _body(thread_id, text))
    outcome = _outcome(events)
    assert outcome["type"] == "interrupt", outcome
    (interrupt,) = outcome["interrupts"]
    return interrupt, events


def _resume(interrupt_id: str, status: str = "resolved", **entry: Any) -> dict[str, Any]:
    """A resume entry; a resolved one approves explicitly unless it brings its own payload."""
    if status == "resolved":
        entry.setdefault("payload", {"approved": True})
    return {"interruptId": interrupt_id, "status": status, **entry}


def _results(events: list[BaseEvent]) -> list[Any]:
    return [(e.tool_call_id, e.content) for e in of(events, EventType.TOOL_CALL_RESULT)]


def test_a_gated_call_ends_the_run_with_an_interrupt_outcome_naming_the_call(
    client: FlaskClient,
) -> None:
    before = time.time()
    interrupt, events = _paused(client, _thread(), "calculate 2+2")

    (start,) = of(events, EventType.TOOL_CALL_START)
    assert start.tool_call_name == "calculate"
    assert not of(events, EventType.TOOL_CALL_RESULT), "the gated tool must not run yet"
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["toolCallId"] == start.tool_call_id
    assert interrupt["message"].startswith("Approve calling calculate")
    assert interrupt["metadata"] == {
        "kind": "approval",
        "tool": "calculate",
        "arguments": {"expression": "2+2"},
    }
    assert interrupt["responseSchema"]["type"] == "object"
    assert "approved" in interrupt["responseSchema"]["properties"]
    expires = datetime.fromisoformat(interrupt["expiresAt"]).astimezone(UTC).timestamp()
    assert before + EXPIRY - 5 < expires < time.time() + EXPIRY + 5
    assert interrupt["expiresAt"].endswith("Z")
    assert set(interrupt) == {
        "id",
        "reason",
        "message",
        "toolCallId",
        "responseSchema",
        "expiresAt",
        "metadata",
    }


def test_an_approved_call_runs_in_the_resume_run_and_the_turn_goes_on(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    interrupt, _ = _paused(client, thread_id, "calculate 2+2")

    after = _run(client, _body(thread_id, resume=[_resume(interrupt["id"])]))

    ((call_id, content),) = _results(after)
    assert call_id == interrupt["toolCallId"]
    assert json.loads(content)["result"] == 4
    assert text(after) == "2+2 = 4."
    assert _outcome(after) == {"type": "success"}
    assert types(after).index("TOOL_CALL_RESULT") < types(after).index("TEXT_MESSAGE_START")


def test_an_approval_with_edited_arguments_runs_the_edited_call(client: FlaskClient) -> None:
    thread_id = _thread()
    interrupt, _ = _paused(client, thread_id, "calculate 2+2")
    edit = _resume(interrupt["id"], payload={"approved": True, "arguments": {"expression": "6*7"}})

    after = _run(client, _body(thread_id, resume=[edit]))

    ((_, content),) = _results(after)
    assert json.loads(content) == {"expression": "6*7", "result": 42}


@pytest.mark.parametrize(
    "entry",
    [
        {"status": "cancelled"},
        {"status": "resolved", "payload": {"approved": False, "reason": "not now"}},
    ],
    ids=["cancelled", "resolved-not-approved"],
)
def test_a_declined_call_is_not_run_and_the_llm_is_told(
    client: FlaskClient, entry: dict[str, Any]
) -> None:
    thread_id = _thread()
    interrupt, _ = _paused(client, thread_id, "calculate 2+2")

    after = _run(client, _body(thread_id, resume=[_resume(interrupt["id"], **entry)]))

    ((call_id, content),) = _results(after)
    assert call_id == interrupt["toolCallId"]
    assert content.startswith("The user declined this call of calculate")
    assert "declined" in text(after)
    assert _outcome(after) == {"type": "success"}


@pytest.mark.parametrize(
    "entry",
    [
        {"status": "resolved"},
        {"status": "resolved", "payload": None},
        {"status": "resolved", "payload": {}},
        {"status": "resolved", "payload": {"reason": "too risky"}},
        {"status": "resolved", "payload": {"tool": "calculate"}},
        {"status": "resolved", "payload": {"arguments": {"expression": "6*7"}}},
    ],
    ids=["no-payload", "null", "empty", "reason-only", "tool-only", "arguments-only"],
)
def test_a_resume_without_an_explicit_approval_is_refused_and_the_call_never_runs(
    client: FlaskClient, entry: dict[str, Any]
) -> None:
    thread_id = _thread()
    interrupt, _ = _paused(client, thread_id, "calculate 2+2")

    refused = client.post(
        "/agui", json=_body(thread_id, resume=[{"interruptId": interrupt["id"], **entry}])
    )

    assert refused.status_code == 400, refused.get_data()
    assert "resume[0].payload" in refused.get_json()["error"]["message"]
    assert "approved" in refused.get_json()["error"]["message"]
    # Still waiting: the call did not run, and an explicit no declines it.
    declined = _run(client, _body(thread_id, resume=[_resume(interrupt["id"], "cancelled")]))
    ((_, content),) = _results(declined)
    assert content.startswith("The user declined this call of calculate")


def test_a_question_is_an_interrupt_and_its_answer_is_the_tool_result(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    interrupt, events = _paused(client, thread_id, "ask me your favourite colour")

    assert interrupt["reason"] == "question"
    assert interrupt["message"] == "Your favourite colour?"
    assert interrupt["metadata"]["kind"] == "question"
    assert interrupt["metadata"]["question"] == "Your favourite colour?"
    (start,) = of(events, EventType.TOOL_CALL_START)
    assert (start.tool_call_name, start.tool_call_id) == ("ask_user", interrupt["toolCallId"])
    answer = _resume(interrupt["id"], payload={"answer": "teal"})

    after = _run(client, _body(thread_id, resume=[answer]))

    assert [content for _, content in _results(after)] == ["teal"]
    assert text(after) == 'You answered: "teal". Thank you.'


def test_resume_may_come_with_the_whole_history_the_client_already_has(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    interrupt, events = _paused(client, thread_id, "calculate 2+2")
    (snapshot,) = of(events, EventType.MESSAGES_SNAPSHOT)
    history = [m.model_dump(by_alias=True, exclude_none=True) for m in snapshot.messages]

    body = _body(thread_id, resume=[_resume(interrupt["id"])])
    after = _run(client, {**body, "messages": history})

    assert text(after) == "2+2 = 4."
    (final,) = of(after, EventType.MESSAGES_SNAPSHOT)
    assert [m.role for m in final.messages] == ["user", "assistant", "tool", "assistant"]


def test_a_run_without_resume_while_the_thread_waits_is_409_input_required(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    interrupt, _ = _paused(client, thread_id, "calculate 2+2")

    response = client.post("/agui", json=_body(thread_id, "never mind"))

    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "input_required"
    assert interrupt["id"] in error["message"]
    # Nothing was stored: the approval still works.
    after = _run(client, _body(thread_id, resume=[_resume(interrupt["id"])]))
    assert text(after) == "2+2 = 4."


@pytest.mark.parametrize(
    ("resume", "named"),
    [
        ([{"interruptId": "i1", "status": "approved"}], "resume[0].status"),
        ([{"status": "resolved"}], "resume[0].interruptId"),
        ([{"interruptId": 7, "status": "resolved"}], "resume[0].interruptId"),
        ({"interruptId": "i1"}, "resume"),
        ([{"interruptId": "i1", "status": "resolved", "metadata": []}], "resume[0].metadata"),
    ],
)
def test_a_malformed_resume_is_refused_with_422_naming_the_field(
    client: FlaskClient, resume: Any, named: str
) -> None:
    response = client.post("/agui", json=_body(_thread(), resume=resume))

    assert response.status_code == 422
    error = response.get_json()["error"]
    assert error["code"] == "invalid_argument"
    assert error["message"].startswith(f"{named}:"), error["message"]


def test_a_resume_the_thread_does_not_wait_for_is_refused_with_400_naming_the_entry(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    interrupt, _ = _paused(client, thread_id, "calculate 2+2")

    unknown = [_resume(interrupt["id"]), _resume("not-an-interrupt")]
    response = client.post("/agui", json=_body(thread_id, resume=unknown))
    assert response.status_code == 400
    assert response.get_json()["error"]["message"] == (
        "resume[1].interruptId 'not-an-interrupt' is not pending in this conversation"
    )

    twice = [_resume(interrupt["id"]), _resume(interrupt["id"], "cancelled")]
    response = client.post("/agui", json=_body(thread_id, resume=twice))
    assert response.status_code == 400
    assert "answered twice" in response.get_json()["error"]["message"]

    bad_answer = [_resume(interrupt["id"], payload={"approved": True, "arguments": "2+2"})]
    response = client.post("/agui", json=_body(thread_id, resume=bad_answer))
    assert response.status_code == 400
    assert "resume[0]" in response.get_json()["error"]["message"]


def test_a_run_id_used_on_another_thread_is_409_naming_the_run_id_only(
    client: FlaskClient,
) -> None:
    first, second = _thread(), _thread()
    run_id = f"run-{uuid.uuid4().hex}"
    _run(client, {**_body(first, "hello"), "runId": run_id})

    response = client.post("/agui", json={**_body(second, "hello"), "runId": run_id})

    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "already_exists"
    assert run_id in error["message"]
    assert first not in error["message"], "the other thread must not be disclosed"


def test_interrupting_a_waiting_thread_drops_the_wait_and_the_next_run_needs_no_resume(
    client: FlaskClient,
) -> None:
    thread_id = _thread()
    _paused(client, thread_id, "calculate 2+2")

    stopped = client.post(f"/agentik/conversations/{thread_id}/interrupt")
    assert stopped.status_code == 200, stopped.get_data()

    after = _run(client, _body(thread_id, "hello again"))
    assert _outcome(after) == {"type": "success"}
