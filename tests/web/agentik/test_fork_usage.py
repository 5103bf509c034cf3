"""/agentik fork, usage on the end event and the conversation, and token budgets (issue 21)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from flask.testing import FlaskClient

from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.a2a.conftest import V10
from tests.web.agentik.test_routes import _send, _wait_idle
from tests.web.conftest import ApiClient
from tests.web.test_auth import (
    ALICE,
    BOB,
    MakeClient,
    StartEngine,
    conversation,
    make_client,
    messages,
    new_conversation,
    rpc_body,
    say,
    start_engine,
    user_message,
)

__all__ = ["make_client", "start_engine"]  # the fixtures, shared with tests.web.test_auth


def _fork(api: ApiClient, conversation_id: str, body: Any) -> Any:
    return api.call("POST", f"/agentik/conversations/{conversation_id}/fork", json=body)


def test_fork_copies_up_to_a_message_and_leaves_the_original(api: ApiClient) -> None:
    original = api.new_conversation("trip")
    _send(api, original, "first question").read_to_end()
    _send(api, original, "second question").read_to_end()
    items = api.call("GET", f"/agentik/conversations/{original}/messages").get_json()["items"]
    assert len(items) == 4

    response = _fork(api, original, {"up_to_message_id": items[1]["id"], "id": "my-fork"})
    assert response.status_code == 201, response.get_json()
    fork = response.get_json()
    assert (fork["id"], fork["title"], fork["count"]) == ("my-fork", "trip", 2)
    assert fork["usage"]["total_tokens"] == 0
    copied = api.call("GET", "/agentik/conversations/my-fork/messages").get_json()["items"]
    assert copied == items[:2]
    # The fork goes its own way; the original keeps its four messages.
    _send(api, "my-fork", "another second question").read_to_end()
    assert _wait_idle(api, "my-fork")["count"] == 4
    assert api.call("GET", f"/agentik/conversations/{original}").get_json()["count"] == 4


def test_fork_refuses_a_bad_request_clearly(api: ApiClient) -> None:
    original = api.new_conversation()
    _send(api, original, "hello").read_to_end()
    for body, status, words in [
        ({}, 400, "up_to_message_id is required"),
        ({"up_to_message_id": 7}, 400, "up_to_message_id is required"),
        ({"up_to_message_id": "not-here"}, 400, "up_to_message_id 'not-here' is not a message"),
        ({"up_to_message_id": "bad id!"}, 400, "up_to_message_id 'bad id!' is not a valid id"),
    ]:
        response = _fork(api, original, body)
        assert response.status_code == status, body
        assert words in response.get_json()["error"]["message"], response.get_json()
    missing = _fork(api, "no-such-conversation", {"up_to_message_id": "m"})
    assert missing.status_code == 404
    first = api.call("GET", f"/agentik/conversations/{original}/messages").get_json()["items"][0]
    _fork(api, original, {"up_to_message_id": first["id"], "id": "taken"})
    again = _fork(api, original, {"up_to_message_id": first["id"], "id": "taken"})
    assert again.status_code == 409 and again.get_json()["error"]["code"] == "already_exists"


def test_a_stranger_cannot_fork_and_the_copy_is_the_callers(make_client: MakeClient) -> None:
    client: FlaskClient = make_client()
    alices = new_conversation(client, ALICE, "alice's")
    say(client, ALICE, alices, "secret plans")
    first = messages(client, ALICE, alices)[0]["id"]

    stranger = client.post(
        f"/agentik/conversations/{alices}/fork", json={"up_to_message_id": first}, headers=BOB
    )
    assert stranger.status_code == 404
    assert stranger.get_json()["error"] == {
        "code": "not_found",
        "message": f"conversation {alices!r} not found",
    }
    # Alice forks her own; the copy is hers, and Bob sees neither.
    mine = client.post(
        f"/agentik/conversations/{alices}/fork", json={"up_to_message_id": first}, headers=ALICE
    )
    assert mine.status_code == 201
    copy_id = mine.get_json()["id"]
    assert conversation(client, ALICE, copy_id)["count"] == 1
    assert client.get(f"/agentik/conversations/{copy_id}", headers=BOB).status_code == 404


def test_usage_is_on_the_end_event_and_summed_on_the_conversation(
    api: ApiClient, llm: FakeOpenAI
) -> None:
    conversation_id = api.new_conversation()
    llm.enqueue(FakeReply(text="one", usage=(100, 7), cached_tokens=64))
    end = _send(api, conversation_id, "hi").read_to_end()[-1]
    assert end.type == "end"
    assert end.data["usage"] == {  # type: ignore[index]
        "input_tokens": 100,
        "output_tokens": 7,
        "total_tokens": 107,
        "cached_tokens": 64,
    }
    llm.enqueue(FakeReply(text="two", usage=(150, 3)))
    _send(api, conversation_id, "again").read_to_end()
    body = _wait_idle(api, conversation_id)
    assert body["usage"] == {
        "input_tokens": 250,
        "output_tokens": 10,
        "total_tokens": 260,
        "cached_tokens": 64,
    }


def test_over_the_token_budget_is_429_with_the_reset_and_others_go_on(
    start_engine: StartEngine, make_client: MakeClient, llm: FakeOpenAI
) -> None:
    client = make_client(start_engine(AGENTIK_TOKENS_PER_DAY="100"))
    alices = new_conversation(client, ALICE)
    llm.enqueue(FakeReply(text="pricey", usage=(90, 20)))
    say(client, ALICE, alices, "one")  # under the budget when it starts: it finishes

    refused = client.post(
        f"/agentik/conversations/{alices}/send", json={"text": "two"}, headers=ALICE
    )
    assert refused.status_code == 429
    error = refused.get_json()["error"]
    assert error["code"] == "budget_exceeded"
    assert "used 110 of 100 tokens today" in error["message"]
    wait = int(refused.headers["Retry-After"])
    resets = (datetime.now(UTC) + timedelta(seconds=wait)).date().isoformat()
    assert f"resets at the start of {resets} UTC (midnight, in {wait} s)" in error["message"]
    assert 0 < wait <= 86_400
    # A2A says it in its own error table: HTTP 429, reason BUDGET_EXCEEDED, Retry-After.
    a2a = client.post(
        "/",
        json=rpc_body("SendMessage", {"message": user_message("three")}),
        headers={**V10, **ALICE},
    )
    assert a2a.status_code == 429 and 0 < int(a2a.headers["Retry-After"]) <= 86_400
    a2a_error = a2a.get_json()["error"]
    assert "used 110 of 100 tokens today" in a2a_error["message"]
    assert a2a_error["data"][0]["reason"] == "BUDGET_EXCEEDED"
    # Bob has a budget of his own.
    bobs = new_conversation(client, BOB)
    assert "Echo: hi" in say(client, BOB, bobs, "hi")
