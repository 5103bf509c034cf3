"""Human in the loop over /agentik: input_required, /resume, pending_interrupts, 409s.

The engine runs the offline model with ``calculate`` listed for approval and ``ask_user``
offered: "calculate 2+2" stops for an approval, "ask me your favourite colour" for an answer.
Every response is held against the OpenAPI document (``ApiClient``, ``StreamReader``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from agentik.config import load_settings
from tests.web.agentik.streams import StreamReader, types
from tests.web.conftest import ApiClient, BackgroundEngine, web_settings
from tests.web.sse_frames import Frame
from web_facade import create_app
from web_facade.engine_client import EngineClient

HITL = {
    "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
    "AGENTIK_STORE": "memory://",
    "AGENTIK_SHUTDOWN_GRACE": "0",
    "AGENTIK_TOOLS_APPROVAL": "calculate",
    "AGENTIK_TOOLS_ASK_USER": "true",
}
"""An engine on the offline model (no OPENAI_* keys) that asks a person."""
TOKENS = {"alice": "hitl-alice-token", "bob": "hitl-bob-token"}


def _app(**env: str) -> Iterator[Flask]:
    engine = BackgroundEngine(load_settings(None, {**HITL, **env}))
    target = engine.start()
    client = EngineClient(target)
    app = create_app(web_settings(target), client)
    app.testing = True
    yield app
    client.close()
    engine.stop()


@pytest.fixture(scope="module")
def hitl_app() -> Iterator[Flask]:
    yield from _app()


@pytest.fixture
def api(hitl_app: Flask) -> ApiClient:
    return ApiClient(hitl_app.test_client())


def _stream(api: ApiClient, conversation_id: str, verb: str, body: dict[str, Any]) -> StreamReader:
    response = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/{verb}", json=body, buffered=False
    )
    return StreamReader(response)


def _turn(api: ApiClient, conversation_id: str, verb: str, body: dict[str, Any]) -> list[Frame]:
    reader = _stream(api, conversation_id, verb, body)
    try:
        return reader.read_to_end()
    finally:
        reader.close()


def _paused(api: ApiClient, text: str) -> tuple[str, dict[str, Any], list[Frame]]:
    """A conversation whose turn on ``text`` stopped for a person: id, the interrupt, events."""
    conversation_id = api.new_conversation()
    events = _turn(api, conversation_id, "send", {"text": text})
    assert types(events)[-2:] == ["input_required", "end"]
    [interrupt] = events[-2].data["interrupts"]  # type: ignore[index]
    return conversation_id, interrupt, events


def _resume(api: ApiClient, conversation_id: str, *decisions: dict[str, Any]) -> list[Frame]:
    return _turn(api, conversation_id, "resume", {"decisions": list(decisions)})


def _text(events: list[Frame]) -> str:
    return "".join(f.data["text"] for f in events if f.type == "append_text")  # type: ignore[index]


def _results(events: list[Frame]) -> list[dict[str, Any]]:
    return [f.data for f in events if f.type == "tool_call_result"]  # type: ignore[misc]


def _conversation(api: ApiClient, conversation_id: str) -> dict[str, Any]:
    response = api.call("GET", f"/agentik/conversations/{conversation_id}")
    assert response.status_code == 200
    body: dict[str, Any] = response.get_json()
    return body


def test_a_gated_call_streams_input_required_then_end_and_runs_nothing(api: ApiClient) -> None:
    _, interrupt, events = _paused(api, "calculate 2+2")
    asked, end = events[-2], events[-1]
    run_id = end.data["run_id"]  # type: ignore[index]
    assert asked.id is None and end.id is not None
    assert end.data["outcome"] == "input_required"  # type: ignore[index]
    assert asked.data["run_id"] == run_id  # type: ignore[index]
    assert interrupt["kind"] == "approval"
    assert interrupt["run_id"] == run_id
    assert interrupt["message"].startswith("Approve calling calculate")
    call = interrupt["tool_call"]
    assert (call["name"], call["arguments"]) == ("calculate", {"expression": "2+2"})
    assert not _results(events), "the gated tool must not run before approval"


def test_the_conversation_shows_its_pending_interrupts_until_they_are_answered(
    api: ApiClient,
) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    got = _conversation(api, conversation_id)
    assert got["pending_interrupts"] == [interrupt]
    assert got["active_run_id"] is None
    listed = api.call("GET", "/agentik/conversations?limit=1000").get_json()
    [item] = [c for c in listed["items"] if c["id"] == conversation_id]
    assert item["pending_interrupts"] == [interrupt]
    _resume(api, conversation_id, {"interrupt_id": interrupt["id"], "approve": True})
    assert _conversation(api, conversation_id)["pending_interrupts"] == []


def test_approving_runs_the_call_and_the_turn_goes_on(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    events = _resume(api, conversation_id, {"interrupt_id": interrupt["id"], "approve": True})
    [result] = _results(events)
    assert result["tool_call_id"] == interrupt["tool_call"]["id"]
    assert json.loads(result["content"])["result"] == 4
    assert _text(events) == "2+2 = 4."
    assert types(events)[-1] == "end" and events[-1].data["outcome"] == "success"  # type: ignore[index]
    assert events[-1].data["run_id"] != interrupt["run_id"]  # type: ignore[index]


def test_edited_arguments_are_what_runs(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    edit = {"interrupt_id": interrupt["id"], "approve": True, "arguments": {"expression": "6*7"}}
    events = _resume(api, conversation_id, edit)
    assert json.loads(_results(events)[0]["content"]) == {"expression": "6*7", "result": 42}
    assert _text(events) == "6*7 = 42."


def test_declining_with_a_reason_tells_the_agent_and_runs_nothing(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    decline = {"interrupt_id": interrupt["id"], "approve": False, "reason": "too costly"}
    events = _resume(api, conversation_id, decline)
    [result] = _results(events)
    assert result["content"].startswith("The user declined this call of calculate")
    assert "too costly" in result["content"]
    assert '"result"' not in result["content"]
    assert "declined" in _text(events)


def test_a_question_is_answered_and_the_turn_goes_on(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "ask me your favourite colour")
    assert interrupt["kind"] == "question"
    assert interrupt["question"] == "Your favourite colour?"
    assert interrupt["tool_call"]["name"] == "ask_user"
    events = _resume(api, conversation_id, {"interrupt_id": interrupt["id"], "answer": "teal"})
    assert [r["content"] for r in _results(events)] == ["teal"]
    assert _text(events) == 'You answered: "teal". Thank you.'


def test_a_question_can_be_declined(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "ask me your favourite colour")
    events = _resume(api, conversation_id, {"interrupt_id": interrupt["id"], "approve": False})
    assert [r["content"] for r in _results(events)] == ["The user did not answer (cancelled)."]


def test_a_message_sent_with_the_decisions_is_stored_after_them(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    body = {
        "decisions": [{"interrupt_id": interrupt["id"], "approve": True}],
        "message": "thanks, and hello",
    }
    events = _turn(api, conversation_id, "resume", body)
    stored = [f.data["message"] for f in events if f.type == "message"]  # type: ignore[index]
    roles = [m["role"] for m in stored]
    assert roles.index("tool") < roles.index("user")
    user = stored[roles.index("user")]
    assert user["content"] == [{"type": "text", "text": "thanks, and hello"}]


def test_send_while_the_conversation_waits_is_409_input_required_naming_resume(
    api: ApiClient,
) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    before = _conversation(api, conversation_id)
    response = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/send", json={"text": "hello?"}
    )
    assert response.status_code == 409
    error = response.get_json()["error"]
    assert error["code"] == "input_required"
    assert "/resume" in error["message"] and "/interrupt" in error["message"]
    after = _conversation(api, conversation_id)
    assert (after["count"], after["last_event_id"]) == (before["count"], before["last_event_id"])
    assert after["pending_interrupts"] == [interrupt]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "decisions is required and must be an array, got missing"),
        ({"decisions": {}}, "decisions is required and must be an array, got an object"),
        ({"decisions": []}, "decisions must have at least one decision"),
        ({"decisions": ["yes"]}, "decisions[0] must be an object, got a string"),
        ({"decisions": [{"approve": True}]}, "decisions[0].interrupt_id must be a non-empty"),
        ({"decisions": [{"interrupt_id": "", "approve": True}]}, "decisions[0].interrupt_id"),
        ({"decisions": [{"interrupt_id": 7, "approve": True}]}, "decisions[0].interrupt_id"),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": "yes"}]},
            "decisions[0].approve must be true or false",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}"}]},
            "decisions[0] must have exactly one of approve and answer",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": True, "answer": "x"}]},
            "decisions[0] must have exactly one of approve and answer",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approved": True}]},
            "decisions[0] has an unknown key 'approved'",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": True, "arguments": [1]}]},
            "decisions[0].arguments must be a JSON object, got an array",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": False, "arguments": {}}]},
            "decisions[0].arguments goes with approve: true",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": True, "reason": "x"}]},
            "decisions[0].reason goes with approve: false",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": False, "reason": 3}]},
            "decisions[0].reason must be a string, got a number",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "answer": 3}]},
            "decisions[0].answer must be a string, got a number",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "answer": "4"}]},
            # The engine decides: an approval's entry holds no answer (said in this API's
            # words: the decision, not the engine's resume entry made of it).
            "decisions[0] answers an approval: give approve (true or false), not answer",
        ),
        (
            {"decisions": [{"interrupt_id": "nope", "approve": True}]},
            "decisions[0].interrupt_id 'nope' is not pending in this conversation",
        ),
        (
            {
                "decisions": [
                    {"interrupt_id": "{id}", "approve": True},
                    {"interrupt_id": "{id}", "approve": False},
                ]
            },
            "decisions[1].interrupt_id",
        ),
        (
            {"decisions": [{"interrupt_id": "{id}", "approve": True}], "message": 5},
            "message must be a string",
        ),
    ],
)
def test_bad_decisions_are_400_naming_the_field_and_the_wait_goes_on(
    api: ApiClient, body: dict[str, Any], message: str
) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    filled = json.loads(json.dumps(body).replace("{id}", interrupt["id"]))
    response = api.call("POST", f"/agentik/conversations/{conversation_id}/resume", json=filled)
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_argument"
    assert message in error["message"]
    assert _conversation(api, conversation_id)["pending_interrupts"] == [interrupt]
    # The right answer still works.
    events = _resume(api, conversation_id, {"interrupt_id": interrupt["id"], "approve": True})
    assert events[-1].data["outcome"] == "success"  # type: ignore[index]


def test_approving_a_question_is_400_naming_the_decision(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "ask me your favourite colour")
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/resume",
        json={"decisions": [{"interrupt_id": interrupt["id"], "approve": True}]},
    )
    assert response.status_code == 400
    message = response.get_json()["error"]["message"]
    assert message == (
        "decisions[0] approves a question: give answer, or approve: false to decline it"
    )


def test_resume_on_a_conversation_that_waits_for_nothing_is_400(api: ApiClient) -> None:
    conversation_id = api.new_conversation()
    _turn(api, conversation_id, "send", {"text": "hi"})
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation_id}/resume",
        json={"decisions": [{"interrupt_id": "i1", "approve": True}]},
    )
    assert response.status_code == 400
    assert "waits for no answer" in response.get_json()["error"]["message"]


def test_resume_on_an_unknown_conversation_is_404(api: ApiClient) -> None:
    response = api.call(
        "POST",
        "/agentik/conversations/no-such-conversation/resume",
        json={"decisions": [{"interrupt_id": "i1", "approve": True}]},
    )
    assert response.status_code == 404
    assert response.get_json()["error"] == {
        "code": "not_found",
        "message": "conversation 'no-such-conversation' not found",
    }


def test_input_required_is_replayed_on_reconnect(api: ApiClient) -> None:
    conversation_id, interrupt, live = _paused(api, "calculate 2+2")
    path = f"/agentik/conversations/{conversation_id}/events?until_idle=true"
    replayed = StreamReader(api.call("GET", f"{path}&after=0", buffered=False)).read_to_end()
    assert [(f.id, f.data) for f in replayed] == [(f.id, f.data) for f in live]
    # A client that dropped after the event before them gets both again (Last-Event-ID).
    before_end = [f.id for f in live if f.id is not None][-2]
    resumed = StreamReader(
        api.call("GET", path, headers={"Last-Event-ID": str(before_end)}, buffered=False)
    ).read_to_end()
    assert types(resumed) == ["input_required", "end"]
    assert resumed[0].data["interrupts"] == [interrupt]  # type: ignore[index]


def test_interrupt_stops_the_wait_and_the_conversation_moves_on(api: ApiClient) -> None:
    conversation_id, interrupt, _ = _paused(api, "calculate 2+2")
    stopped = api.call("POST", f"/agentik/conversations/{conversation_id}/interrupt")
    assert stopped.status_code == 200
    assert stopped.get_json() == {"interrupted": True, "run_id": interrupt["run_id"]}
    assert _conversation(api, conversation_id)["pending_interrupts"] == []
    again = api.call("POST", f"/agentik/conversations/{conversation_id}/interrupt")
    assert again.get_json() == {"interrupted": False}
    events = _turn(api, conversation_id, "send", {"text": "never mind"})
    assert events[-1].data["outcome"] == "success"  # type: ignore[index]


@pytest.fixture(scope="module")
def tokens_app() -> Iterator[Flask]:
    yield from _app(AGENTIK_TOKENS=",".join(f"{n}:{t}" for n, t in TOKENS.items()))


def test_resume_needs_a_token_and_another_callers_conversation_is_not_found(
    tokens_app: Flask,
) -> None:
    client = tokens_app.test_client()
    alice = {"Authorization": f"Bearer {TOKENS['alice']}"}
    bob = {"Authorization": f"Bearer {TOKENS['bob']}"}
    conversation_id = client.post("/agentik/conversations", json={}, headers=alice).get_json()["id"]
    response = client.post(
        f"/agentik/conversations/{conversation_id}/send",
        json={"text": "calculate 2+2"},
        headers=alice,
    )
    assert b"event: input_required" in response.get_data()
    [interrupt] = client.get(f"/agentik/conversations/{conversation_id}", headers=alice).get_json()[
        "pending_interrupts"
    ]
    path = f"/agentik/conversations/{conversation_id}/resume"
    body = {"decisions": [{"interrupt_id": interrupt["id"], "approve": True}]}
    unauthenticated = client.post(path, json=body)
    assert unauthenticated.status_code == 401
    assert unauthenticated.get_json()["error"]["code"] == "unauthenticated"
    assert client.post(path, json=body, headers=bob).status_code == 404
    approved = client.post(path, json=body, headers=alice)
    assert approved.status_code == 200
    assert b'"outcome":"success"' in approved.get_data()
