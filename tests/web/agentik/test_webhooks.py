"""Run webhooks on /agentik: ``send`` with ``"webhook": {"url": ...}``, refusals by the SSRF
guard as 400 naming why, and ``GET /agentik/webhooks/failed`` for admins only."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from flask import Flask

from tests.engine.auth_helpers import TOKENS, TOKENS_ENV
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.agentik.streams import StreamReader, has
from tests.web.conftest import WAIT, ApiClient, BackgroundEngine, engine_settings


@pytest.fixture(scope="module")
def own_llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def hooks_engine(own_llm: FakeOpenAI) -> Iterator[str]:
    settings = engine_settings(
        own_llm,
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1",
        AGENTIK_WEBHOOKS_MAX_ATTEMPTS="2",
        AGENTIK_WEBHOOKS_BASE_DELAY="0.05",
        AGENTIK_WEBHOOKS_POLL_INTERVAL="0.05",
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_ADMINS="ops",
    )
    engine = BackgroundEngine(settings)
    yield engine.start()
    engine.stop()


@pytest.fixture
def as_user(make_app: Callable[..., Flask], hooks_engine: str) -> Callable[[str], ApiClient]:
    app = make_app(hooks_engine, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_ADMINS="ops")

    def client(principal: str) -> ApiClient:
        test_client = app.test_client()
        test_client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {TOKENS[principal]}"
        return ApiClient(test_client)

    return client


def send(api: ApiClient, conversation_id: str, body: dict[str, object]) -> object:
    return api.call(
        "POST", f"/agentik/conversations/{conversation_id}/send", json=body, buffered=False
    )


def test_a_turn_sent_with_a_webhook_is_posted_when_it_ends(
    as_user: Callable[[str], ApiClient], own_llm: FakeOpenAI
) -> None:
    api = as_user("alice")
    own_llm.enqueue(FakeReply(text="Hello there."))
    conversation = api.new_conversation()
    with Receiver() as hook:
        response = send(api, conversation, {"text": "hi", "webhook": {"url": hook.url}})
        frames = StreamReader(response).read_until(has("end"))
        run_id = next(f.data["run_id"] for f in frames if f.event == "end" and f.data)
        (got,) = hook.wait_for(1, WAIT)
    payload = json.loads(got.body)
    assert (payload["runId"], payload["sessionId"], payload["outcome"]) == (
        run_id,
        conversation,
        "success",
    )
    assert payload["message"]["text"] == "Hello there."
    assert got.headers["webhook-id"] == payload["id"]
    assert payload["id"].startswith(f"run_{run_id}.")


@pytest.mark.parametrize(
    ("webhook", "why"),
    [
        ({"url": "ftp://hooks.example.com/"}, "the webhook URL must use https"),
        ({"url": "https://169.254.169.254/"}, "a cloud metadata address"),
        ("https://hooks.example.com/", "webhook must be an object"),
        ({"url": ""}, "webhook.url must be a non-empty string"),
        ({"url": "https://a.example.com/", "secret": "x"}, "unknown field 'secret'"),
        ({"url": "https://a.example.com/" + "a" * 3000}, "longer than 2048 characters"),
    ],
)
def test_a_refused_webhook_is_400_naming_why(
    as_user: Callable[[str], ApiClient], webhook: object, why: str
) -> None:
    api = as_user("alice")
    conversation = api.new_conversation()
    response = api.call(
        "POST",
        f"/agentik/conversations/{conversation}/send",
        json={"text": "hi", "webhook": webhook},
    )
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_argument"
    assert why in error["message"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_failed_webhooks_are_listed_for_admins_and_forbidden_to_others(
    as_user: Callable[[str], ApiClient], own_llm: FakeOpenAI
) -> None:
    api = as_user("bob")
    own_llm.enqueue(FakeReply(text="ok"))
    conversation = api.new_conversation()
    down = f"http://127.0.0.1:{free_port()}/hook"
    StreamReader(send(api, conversation, {"text": "hi", "webhook": {"url": down}})).read_until(
        has("end")
    )
    admin = as_user("ops")
    deadline = time.monotonic() + WAIT
    while True:
        page = admin.call("GET", "/agentik/webhooks/failed?limit=100").get_json()
        mine = [item for item in page["items"] if item["url"] == down]
        if mine:
            break
        assert time.monotonic() < deadline, "the delivery did not fail in time"
        time.sleep(0.05)  # polling a condition with a deadline
    (failed,) = mine
    assert (failed["kind"], failed["attempts"], failed["last_error"]) == (
        "run",
        2,
        "connection refused",
    )
    assert failed["failed_at"] >= failed["created_at"]
    refused = api.call("GET", "/agentik/webhooks/failed")
    assert refused.status_code == 403
    assert refused.get_json()["error"]["message"] == "only admins may list failed webhooks"
    bad = admin.call("GET", "/agentik/webhooks/failed?limit=0")
    assert bad.status_code == 400


def test_a_conversation_default_webhook_tells_of_turns_that_name_none(
    as_user: Callable[[str], ApiClient], own_llm: FakeOpenAI
) -> None:
    api = as_user("alice")
    with Receiver() as default, Receiver() as own:
        made = api.call("POST", "/agentik/conversations", json={"webhook": {"url": default.url}})
        assert made.status_code == 201
        conversation = made.get_json()["id"]
        assert made.get_json()["webhook"] == {"url": default.url}
        own_llm.enqueue(FakeReply(text="one"), FakeReply(text="two"))
        StreamReader(send(api, conversation, {"text": "hi"})).read_until(has("end"))
        assert json.loads(default.wait_for(1, WAIT)[0].body)["message"]["text"] == "one"
        # A send that names its own webhook is told there instead.
        StreamReader(
            send(api, conversation, {"text": "again", "webhook": {"url": own.url}})
        ).read_until(has("end"))
        assert json.loads(own.wait_for(1, WAIT)[0].body)["message"]["text"] == "two"
        assert len(default.received) == 1
    patched = api.call("PATCH", f"/agentik/conversations/{conversation}", json={"webhook": None})
    assert patched.status_code == 200 and patched.get_json()["webhook"] is None
    read = api.call("GET", f"/agentik/conversations/{conversation}").get_json()
    assert read["webhook"] is None


def test_setting_a_default_webhook_is_checked_and_owner_scoped(
    as_user: Callable[[str], ApiClient],
) -> None:
    alice = as_user("alice")
    conversation = alice.new_conversation()
    refused = alice.call(
        "PATCH",
        f"/agentik/conversations/{conversation}",
        json={"webhook": {"url": "https://169.254.169.254/"}},
    )
    assert refused.status_code == 400
    assert "cloud metadata address" in refused.get_json()["error"]["message"]
    unknown = alice.call("PATCH", f"/agentik/conversations/{conversation}", json={"title": "x"})
    assert unknown.status_code == 400
    stranger = as_user("bob").call(
        "PATCH",
        f"/agentik/conversations/{conversation}",
        json={"webhook": {"url": "https://hooks.example.com/"}},
    )
    assert stranger.status_code == 404
    ok = alice.call(
        "PATCH",
        f"/agentik/conversations/{conversation}",
        json={"webhook": {"url": "https://hooks.example.com/in"}},
    )
    assert ok.get_json()["webhook"] == {"url": "https://hooks.example.com/in"}
