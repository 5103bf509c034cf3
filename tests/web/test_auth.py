"""Authentication and ownership through the facade, enforced by a real engine with tokens.

Every surface (``/agentik``, ``/agui``, A2A) answers a request without valid bearer
credentials 401 with ``WWW-Authenticate`` in its own error shape; another principal's
conversation or task is not found (and is left as it was); lists are per principal, an
admin sees all; the engine's per-principal limits are 429 with ``Retry-After``. The public
routes (health, the agent card, the OpenAPI document) need no token.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import pytest
from flask.testing import FlaskClient

from agentik.a2a.rules import FIRST_WINDOW
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import frames_of
from tests.web.conftest import BackgroundEngine, engine_settings, web_settings
from tests.web.sse_frames import SseParser
from web_facade import create_app
from web_facade.engine_client import EngineClient

TOKENS = "alice:tokenA,bob:tokenB,ops:tokenO"
ALICE = {"Authorization": "Bearer tokenA"}
BOB = {"Authorization": "Bearer tokenB"}
OPS = {"Authorization": "Bearer tokenO"}
V10 = {"A2A-Version": "1.0"}

CHALLENGE = 'Bearer realm="agentik"'
INVALID_TOKEN = 'Bearer realm="agentik", error="invalid_token"'

BAD_CREDENTIALS = [
    pytest.param({}, CHALLENGE, id="no-token"),
    pytest.param({"Authorization": "Bearer not-a-token"}, INVALID_TOKEN, id="wrong-token"),
    pytest.param(
        {"Authorization": "Basic " + base64.b64encode(b"alice:tokenA").decode()},
        INVALID_TOKEN,
        id="basic-scheme",
    ),
]

StartEngine = Callable[..., str]
MakeClient = Callable[..., FlaskClient]


@pytest.fixture
def start_engine(llm: FakeOpenAI) -> Iterator[StartEngine]:
    """Start engines with tokens (``env`` adds to or overrides the auth settings)."""
    engines: list[BackgroundEngine] = []

    def start(**env: str) -> str:
        settings = engine_settings(
            llm, **{"AGENTIK_TOKENS": TOKENS, "AGENTIK_ADMINS": "ops", **env}
        )
        engine = BackgroundEngine(settings)
        engines.append(engine)
        return engine.start()

    yield start
    for engine in engines:
        engine.stop()


@pytest.fixture
def make_client(start_engine: StartEngine) -> Iterator[MakeClient]:
    """Test clients of facades configured with the tokens, on ``target`` (or a new engine)."""
    channels: list[EngineClient] = []

    def make(target: str | None = None, **env: str) -> FlaskClient:
        settings = web_settings(target or start_engine(), **{"AGENTIK_TOKENS": TOKENS, **env})
        channel = EngineClient(settings.web.engine_target)
        channels.append(channel)
        app = create_app(settings, channel)
        app.testing = True
        return app.test_client()

    yield make
    for channel in channels:
        channel.close()


@pytest.fixture
def client(make_client: MakeClient) -> FlaskClient:
    return make_client()


# -- helpers -----------------------------------------------------------------------


def new_conversation(client: FlaskClient, who: dict[str, str], title: str = "") -> str:
    response = client.post("/agentik/conversations", json={"title": title}, headers=who)
    assert response.status_code == 201, response.get_data()
    conversation_id: str = response.get_json()["id"]
    return conversation_id


def say(client: FlaskClient, who: dict[str, str], conversation_id: str, text: str) -> str:
    """Send one message and read the SSE answer to its end; the whole stream's text."""
    response = client.post(
        f"/agentik/conversations/{conversation_id}/send", json={"text": text}, headers=who
    )
    assert response.status_code == 200, response.get_data()
    return response.get_data(as_text=True)


def messages(client: FlaskClient, who: dict[str, str], conversation_id: str) -> list[Any]:
    response = client.get(f"/agentik/conversations/{conversation_id}/messages", headers=who)
    assert response.status_code == 200, response.get_data()
    items: list[Any] = response.get_json()["items"]
    return items


def conversation(client: FlaskClient, who: dict[str, str], conversation_id: str) -> Any:
    response = client.get(f"/agentik/conversations/{conversation_id}", headers=who)
    assert response.status_code == 200, response.get_data()
    return response.get_json()


def user_message(text: str, **ids: str) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **ids}


def rpc_body(method: str, params: dict[str, Any], request_id: int = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def rpc(client: FlaskClient, who: dict[str, str], method: str, params: dict[str, Any]) -> Any:
    """A JSON-RPC call answered with HTTP 200: the whole JSON-RPC response."""
    response = client.post("/", json=rpc_body(method, params), headers={**V10, **who})
    assert response.status_code == 200, response.get_data()
    assert response.mimetype == "application/json", response.get_data()
    return response.get_json()


def a2a_task(client: FlaskClient, who: dict[str, str], text: str, **ids: str) -> Any:
    reply = rpc(client, who, "SendMessage", {"message": user_message(text, **ids)})
    assert "result" in reply, reply
    return reply["result"]["task"]


def agui_input(thread_id: str, text: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def assert_unauthenticated(response: Any, challenge: str) -> None:
    """401 in the facade's error shape, with the RFC 6750 challenge."""
    assert response.status_code == 401, response.get_data()
    assert response.headers["WWW-Authenticate"] == challenge
    body = response.get_json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == "unauthenticated" and body["error"]["message"]


def assert_not_found(response: Any) -> None:
    assert response.status_code == 404, response.get_data()
    assert response.get_json()["error"]["code"] == "not_found"
    assert "WWW-Authenticate" not in response.headers


def assert_a2a_error(response: Any, status: int, reason: str, request_id: int = 7) -> Any:
    """An HTTP ``status`` whose body is a JSON-RPC InvalidRequest with ErrorInfo ``reason``."""
    assert response.status_code == status, response.get_data()
    assert response.mimetype == "application/json"
    body = response.get_json()
    assert body["jsonrpc"] == "2.0" and body["id"] == request_id and "result" not in body
    assert body["error"]["code"] == -32600 and body["error"]["message"]
    assert body["error"]["data"][0]["reason"] == reason
    return body


# -- /agentik ----------------------------------------------------------------------

AGENTIK_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/agentik/conversations", {"title": "t"}),
    ("GET", "/agentik/conversations", None),
    ("GET", "/agentik/conversations/{id}", None),
    ("GET", "/agentik/conversations/{id}/messages", None),
    ("POST", "/agentik/conversations/{id}/rename", {"title": "renamed"}),
    ("DELETE", "/agentik/conversations/{id}", None),
    ("POST", "/agentik/conversations/{id}/send", {"text": "hello"}),
    ("GET", "/agentik/conversations/{id}/events", None),
    ("POST", "/agentik/conversations/{id}/interrupt", {}),
]
ROUTE_IDS = [f"{m} {p.removeprefix('/agentik/conversations') or '/'}" for m, p, _ in AGENTIK_ROUTES]


@pytest.mark.parametrize(("headers", "challenge"), BAD_CREDENTIALS)
def test_every_agentik_route_refuses_bad_credentials_with_401(
    client: FlaskClient, headers: dict[str, str], challenge: str
) -> None:
    conversation_id = new_conversation(client, ALICE, "alice's")
    for method, template, body in AGENTIK_ROUTES:
        path = template.replace("{id}", conversation_id)
        response = client.open(path, method=method, json=body, headers=headers)
        assert_unauthenticated(response, challenge)
    # nothing above touched alice's conversation
    assert conversation(client, ALICE, conversation_id)["title"] == "alice's"
    assert messages(client, ALICE, conversation_id) == []
    listed = client.get("/agentik/conversations", headers=ALICE).get_json()
    assert listed["total"] == 1


@pytest.mark.parametrize(
    ("method", "template", "body"),
    [r for r in AGENTIK_ROUTES if "{id}" in r[1]],
    ids=[i for i, r in zip(ROUTE_IDS, AGENTIK_ROUTES, strict=True) if "{id}" in r[1]],
)
def test_another_principals_conversation_is_not_found_and_left_alone(
    client: FlaskClient, method: str, template: str, body: dict[str, Any] | None
) -> None:
    bobs = new_conversation(client, BOB, "bob's")
    say(client, BOB, bobs, "bob's secret")
    before = messages(client, BOB, bobs)
    response = client.open(template.replace("{id}", bobs), method=method, json=body, headers=ALICE)
    assert_not_found(response)
    assert "secret" not in response.get_data(as_text=True)
    assert conversation(client, BOB, bobs)["title"] == "bob's"
    assert messages(client, BOB, bobs) == before


def test_an_unknown_conversation_and_another_principals_look_the_same(
    client: FlaskClient,
) -> None:
    bobs = new_conversation(client, BOB)
    theirs = client.get(f"/agentik/conversations/{bobs}", headers=ALICE)
    unknown = client.get("/agentik/conversations/no-such-one", headers=ALICE)
    assert theirs.status_code == unknown.status_code == 404
    # the same answer, but for the id the request itself named
    assert theirs.get_data(as_text=True).replace(bobs, "ID") == unknown.get_data(
        as_text=True
    ).replace("no-such-one", "ID")


def test_lists_and_totals_are_per_principal_and_the_admin_sees_all(client: FlaskClient) -> None:
    alices = {new_conversation(client, ALICE, f"a{i}") for i in range(3)}
    bobs = {new_conversation(client, BOB, f"b{i}") for i in range(2)}

    def listed(who: dict[str, str]) -> tuple[set[str], int]:
        response = client.get("/agentik/conversations?limit=2", headers=who)
        assert response.status_code == 200
        page = response.get_json()
        everything = client.get("/agentik/conversations?limit=100", headers=who).get_json()
        assert everything["total"] == page["total"] and len(page["items"]) <= 2
        return {c["id"] for c in everything["items"]}, page["total"]

    assert listed(ALICE) == (alices, 3)
    assert listed(BOB) == (bobs, 2)
    assert listed(OPS) == (alices | bobs, 5)


def test_the_admin_reads_another_principals_conversation(client: FlaskClient) -> None:
    bobs = new_conversation(client, BOB, "bob's")
    say(client, BOB, bobs, "for the admin")
    assert conversation(client, OPS, bobs)["title"] == "bob's"
    assert [m["role"] for m in messages(client, OPS, bobs)] == ["user", "assistant"]


def test_a_non_ascii_authorization_header_is_401_not_500(client: FlaskClient) -> None:
    # WSGI hands header values over as latin-1 decoded str: 'tökén' arrives as such.
    latin1 = {"Authorization": b"Bearer t\xf6k\xe9n".decode("latin-1")}
    assert_unauthenticated(client.get("/agentik/conversations", headers=latin1), INVALID_TOKEN)
    body = agui_input("t-" + uuid.uuid4().hex, "hi")
    assert_unauthenticated(client.post("/agui", json=body, headers=latin1), INVALID_TOKEN)
    response = client.post("/", json=rpc_body("ListTasks", {}), headers={**V10, **latin1})
    assert_a2a_error(response, 401, "UNAUTHENTICATED")


# -- AG-UI -------------------------------------------------------------------------


@pytest.mark.parametrize(("headers", "challenge"), BAD_CREDENTIALS)
def test_an_agui_run_refuses_bad_credentials_with_401(
    client: FlaskClient, headers: dict[str, str], challenge: str
) -> None:
    thread_id = "t-" + uuid.uuid4().hex
    response = client.post("/agui", json=agui_input(thread_id, "hello"), headers=headers)
    assert_unauthenticated(response, challenge)
    assert_not_found(client.get(f"/agentik/conversations/{thread_id}", headers=ALICE))


@pytest.mark.parametrize(("headers", "challenge"), BAD_CREDENTIALS)
def test_agui_capabilities_refuse_bad_credentials_with_401(
    client: FlaskClient, headers: dict[str, str], challenge: str
) -> None:
    for path in ("/agui/capabilities", "/agui/agentik/capabilities"):
        assert_unauthenticated(client.get(path, headers=headers), challenge)
    assert client.get("/agui/capabilities", headers=ALICE).status_code == 200


def test_an_agui_run_on_another_principals_thread_neither_leaks_nor_appends(
    client: FlaskClient,
) -> None:
    bobs = new_conversation(client, BOB, "bob's")
    say(client, BOB, bobs, "bob's secret")
    before = messages(client, BOB, bobs)
    response = client.post("/agui", json=agui_input(bobs, "let me in"), headers=ALICE)
    assert_not_found(response)
    text = response.get_data(as_text=True)
    assert "secret" not in text and "MESSAGES_SNAPSHOT" not in text
    assert messages(client, BOB, bobs) == before
    assert client.get("/agentik/conversations", headers=ALICE).get_json()["total"] == 0


def test_an_agui_run_with_a_token_runs_and_the_thread_is_its_callers(client: FlaskClient) -> None:
    thread_id = "t-" + uuid.uuid4().hex
    response = client.post("/agui", json=agui_input(thread_id, "hello agui"), headers=ALICE)
    assert response.status_code == 200, response.get_data()
    assert "Echo: hello agui" in response.get_data(as_text=True)
    assert conversation(client, ALICE, thread_id)["id"] == thread_id
    assert_not_found(client.get(f"/agentik/conversations/{thread_id}", headers=BOB))


# -- A2A ---------------------------------------------------------------------------

A2A_METHODS = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
]


def a2a_params(method: str, task: Any) -> dict[str, Any]:
    if method in ("SendMessage", "SendStreamingMessage"):
        return {"message": user_message("hello", contextId=task["contextId"])}
    if method == "ListTasks":
        return {}
    return {"id": task["id"]}


@pytest.mark.parametrize(("headers", "challenge"), BAD_CREDENTIALS)
def test_every_a2a_method_refuses_bad_credentials_with_http_401_and_a_json_rpc_error(
    client: FlaskClient, headers: dict[str, str], challenge: str
) -> None:
    task = a2a_task(client, ALICE, "alice's task")
    for method in A2A_METHODS:
        body = rpc_body(method, a2a_params(method, task))
        response = client.post("/", json=body, headers={**V10, **headers})
        assert response.headers.get("WWW-Authenticate") == challenge, method
        assert_a2a_error(response, 401, "UNAUTHENTICATED")
    assert len(messages(client, ALICE, task["contextId"])) == 2


@pytest.mark.parametrize("method", ["GetTask", "CancelTask", "SubscribeToTask"])
def test_another_principals_task_is_task_not_found(client: FlaskClient, method: str) -> None:
    bobs = a2a_task(client, BOB, "bob's secret")
    reply = rpc(client, ALICE, method, {"id": bobs["id"]})
    assert "result" not in reply and reply["error"]["code"] == -32001, reply
    assert "secret" not in json.dumps(reply)
    unknown = rpc(client, ALICE, method, {"id": "no-such-task"})
    assert unknown["error"]["code"] == -32001
    got = rpc(client, BOB, "GetTask", {"id": bobs["id"]})["result"]
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_a_message_into_another_principals_context_is_refused_and_appends_nothing(
    client: FlaskClient, method: str
) -> None:
    bobs = a2a_task(client, BOB, "bob's secret")
    before = messages(client, BOB, bobs["contextId"])
    params = {"message": user_message("let me in", contextId=bobs["contextId"])}
    response = client.post("/", json=rpc_body(method, params), headers={**V10, **ALICE})
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    assert "secret" not in text and '"result"' not in text
    frames = [line for line in text.splitlines() if line.startswith("data: ")]
    reply = json.loads(frames[0].removeprefix("data: ")) if frames else json.loads(text)
    assert reply["error"]["code"] == -32001, reply
    assert messages(client, BOB, bobs["contextId"]) == before


def test_list_tasks_shows_only_the_callers_tasks(client: FlaskClient) -> None:
    mine = {a2a_task(client, ALICE, f"alice {i}")["id"] for i in range(2)}
    bobs = a2a_task(client, BOB, "bob's")
    listed = rpc(client, ALICE, "ListTasks", {})["result"]
    assert {t["id"] for t in listed["tasks"]} == mine and listed["totalSize"] == 2
    theirs = rpc(client, ALICE, "ListTasks", {"contextId": bobs["contextId"]})["result"]
    assert theirs.get("tasks", []) == [] and theirs.get("totalSize", 0) == 0
    everything = rpc(client, OPS, "ListTasks", {})["result"]
    assert {t["id"] for t in everything["tasks"]} == mine | {bobs["id"]}


# -- 429 ---------------------------------------------------------------------------


def test_over_the_request_rate_agentik_is_429_rate_limited_with_retry_after(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(start_engine(AGENTIK_REQUESTS_PER_MINUTE="3"))
    for _ in range(3):
        assert client.get("/agentik/conversations", headers=ALICE).status_code == 200
    response = client.get("/agentik/conversations", headers=ALICE)
    assert response.status_code == 429, response.get_data()
    assert response.get_json()["error"]["code"] == "rate_limited"
    assert response.headers["Retry-After"].isdigit() and int(response.headers["Retry-After"]) >= 1
    # the bucket is alice's: bob still passes
    assert client.get("/agentik/conversations", headers=BOB).status_code == 200


def test_over_the_request_rate_a2a_is_http_429_with_a_json_rpc_body(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(start_engine(AGENTIK_REQUESTS_PER_MINUTE="3"))
    statuses = []
    for _ in range(4):
        response = client.post("/", json=rpc_body("ListTasks", {}), headers={**V10, **BOB})
        statuses.append(response.status_code)
        if response.status_code != 200:
            break
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, statuses
    assert_a2a_error(response, 429, "RATE_LIMITED")
    assert response.headers["Retry-After"].isdigit() and int(response.headers["Retry-After"]) >= 1


def test_over_the_request_rate_a2a_http_json_is_429_resource_exhausted(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(start_engine(AGENTIK_REQUESTS_PER_MINUTE="3"))
    statuses = []
    for _ in range(4):
        response = client.get("/a2a/tasks", headers={**V10, **BOB})
        statuses.append(response.status_code)
        if response.status_code != 200:
            break
    assert statuses[:3] == [200, 200, 200] and statuses[-1] == 429, statuses
    error = response.get_json()["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert error["details"][0]["reason"] == "RATE_LIMITED"
    assert response.headers["Retry-After"].isdigit() and int(response.headers["Retry-After"]) >= 1
    unauthenticated = client.get("/a2a/tasks", headers=V10)
    assert unauthenticated.status_code == 401
    assert unauthenticated.headers["WWW-Authenticate"].startswith("Bearer")
    assert unauthenticated.get_json()["error"]["details"][0]["reason"] == "UNAUTHENTICATED"


def test_a_second_concurrent_run_of_one_principal_is_429(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(start_engine(AGENTIK_MAX_RUNS_PER_CALLER="1"))
    first, second = new_conversation(client, ALICE), new_conversation(client, ALICE)
    running = client.post(
        f"/agentik/conversations/{first}/send",
        json={"text": "[[hang]] a long one"},
        headers=ALICE,
        buffered=False,
    )
    try:
        assert running.status_code == 200
        refused = client.post(
            f"/agentik/conversations/{second}/send", json={"text": "another"}, headers=ALICE
        )
        assert refused.status_code == 429, refused.get_data()
        assert refused.get_json()["error"]["code"] == "rate_limited"
        assert refused.headers["Retry-After"].isdigit()
        # another principal is not held to alice's limit
        bobs = new_conversation(client, BOB)
        assert "Echo: mine" in say(client, BOB, bobs, "mine")
    finally:
        stopped = client.post(f"/agentik/conversations/{first}/interrupt", json={}, headers=ALICE)
        running.close()
    assert stopped.status_code == 200 and stopped.get_json()["interrupted"] is True


@pytest.mark.parametrize("reader", ["asyncio", "threads"])
def test_a_principal_past_its_open_streams_is_429_naming_the_setting_on_every_surface(
    make_client: MakeClient, start_engine: StartEngine, reader: str
) -> None:
    engine = start_engine(AGENTIK_MAX_STREAMS_PER_CALLER="1")
    client = make_client(engine, AGENTIK_WEB_STREAM_READER=reader)
    hers, his = new_conversation(client, ALICE), new_conversation(client, BOB)
    held = client.get(f"/agentik/conversations/{hers}/events", headers=ALICE, buffered=False)
    try:
        assert held.status_code == 200
        refused = client.get(f"/agentik/conversations/{hers}/events", headers=ALICE)
        assert refused.status_code == 429, refused.get_data()
        error = refused.get_json()["error"]
        assert error["code"] == "rate_limited"
        assert "1 event streams open, the most [auth] max_streams_per_caller" in error["message"]
        assert refused.headers["Retry-After"].isdigit()
        sent = client.post(f"/agentik/conversations/{hers}/send", json={"text": "x"}, headers=ALICE)
        assert sent.status_code == 429  # a run's stream is a stream too
        message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
        body = rpc_body("SendStreamingMessage", {"message": message})
        streamed = client.post("/", json=body, headers={**V10, **ALICE})
        assert_a2a_error(streamed, 429, "RATE_LIMITED")
        bobs = client.get(f"/agentik/conversations/{his}/events", headers=BOB, buffered=False)
        assert bobs.status_code == 200  # bob has his own
        bobs.close()
    finally:
        held.close()


def _past_seq(stream: Any, seq: int) -> None:
    """Read the SSE ``stream`` until an event numbered past ``seq`` came."""
    parser = SseParser()
    for chunk in stream.response:
        if any(frame.id is not None and frame.id > seq for frame in parser.feed(chunk)):
            return
    raise AssertionError(f"the stream ended before seq {seq}")


@pytest.mark.parametrize("reader", ["asyncio", "threads"])
def test_subscribe_to_task_at_the_stream_limit_takes_one_slot_however_far_back_its_run_began(
    make_client: MakeClient, start_engine: StartEngine, reader: str
) -> None:
    """A caller with ``max_streams_per_caller`` less one streams open subscribes to a task
    whose run began more events ago than the replay looks back at first (``FIRST_WINDOW``;
    it widens its look, a wider engine stream each time): the subscription is the caller's
    last stream, allowed; one more is refused naming the setting."""
    engine = start_engine(AGENTIK_MAX_STREAMS_PER_CALLER="2")
    client = make_client(engine, AGENTIK_WEB_STREAM_READER=reader)
    params = {
        "message": user_message("[[chunks:4000]][[slow:0.005]]"),
        "configuration": {"returnImmediately": True},
    }
    task = rpc(client, ALICE, "SendMessage", params)["result"]["task"]  # no stream
    context = task["contextId"]
    held = client.get(f"/agentik/conversations/{context}/events", headers=ALICE, buffered=False)
    try:
        assert held.status_code == 200, held.get_data()
        _past_seq(held, 8 * FIRST_WINDOW)  # the replay must widen its look twice
        body = rpc_body("SubscribeToTask", {"id": task["id"]})
        subscribed = client.post("/", json=body, headers={**V10, **ALICE}, buffered=False)
        try:
            assert subscribed.status_code == 200, subscribed.get_data()
            assert subscribed.mimetype == "text/event-stream"
            frames = frames_of(iter(cast("Iterable[bytes]", subscribed.response)))
            first = next(frame for frame in frames if frame is not None)
            assert first["result"]["task"]["id"] == task["id"]
            refused = client.get(f"/agentik/conversations/{context}/events", headers=ALICE)
            assert refused.status_code == 429, refused.get_data()
            error = refused.get_json()["error"]
            assert error["code"] == "rate_limited"
            assert (
                "2 event streams open, the most [auth] max_streams_per_caller" in error["message"]
            )
            again = client.post("/", json=body, headers={**V10, **ALICE})
            assert_a2a_error(again, 429, "RATE_LIMITED")
        finally:
            subscribed.close()
    finally:
        client.post("/", json=rpc_body("CancelTask", {"id": task["id"]}), headers={**V10, **ALICE})
        held.close()


def test_a_principal_at_its_conversations_is_refused_a_new_one_on_every_surface(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(start_engine(AGENTIK_MAX_SESSIONS_PER_CALLER="1"))
    hers = new_conversation(client, ALICE)
    named = "you (alice) have 1 conversations stored, the most [auth] max_sessions_per_caller"

    made = client.post("/agentik/conversations", json={}, headers=ALICE)
    assert made.status_code == 409, made.get_data()
    assert made.get_json()["error"]["code"] == "quota_exceeded"
    assert made.get_json()["error"]["message"].startswith(named)
    assert "Retry-After" not in made.headers  # deleting helps, waiting does not
    agui = client.post("/agui", json=agui_input(uuid.uuid4().hex, "hi"), headers=ALICE)
    assert agui.status_code == 409 and agui.get_json()["error"]["code"] == "quota_exceeded"
    reply = rpc(client, ALICE, "SendMessage", {"message": user_message("hi")})
    assert reply["error"]["code"] == -32600 and reply["error"]["message"].startswith(named)
    assert reply["error"]["data"][0]["reason"] == "QUOTA_EXCEEDED"
    rest = client.post(
        "/a2a/message:send", json={"message": user_message("hi")}, headers={**V10, **ALICE}
    )
    assert rest.status_code == 409, rest.get_data()
    assert rest.get_json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    listed = client.get("/agentik/conversations", headers=ALICE).get_json()
    assert [c["id"] for c in listed["items"]] == [hers]  # nothing left behind

    assert "Echo: mine" in say(client, ALICE, hers, "mine")  # hers goes on
    new_conversation(client, BOB)  # bob has his own
    assert client.delete(f"/agentik/conversations/{hers}", headers=ALICE).status_code == 204
    new_conversation(client, ALICE)


# -- public routes, the card, CORS -------------------------------------------------


def test_health_card_and_openapi_need_no_token(client: FlaskClient) -> None:
    for path in ("/health", "/.well-known/agent-card.json", "/agentik/openapi.json"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.get_data())
        assert "WWW-Authenticate" not in response.headers


def test_with_tokens_the_card_declares_the_bearer_scheme(client: FlaskClient) -> None:
    card = client.get("/.well-known/agent-card.json").get_json()
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]


def test_without_tokens_the_card_declares_no_scheme(make_client: MakeClient) -> None:
    open_facade = make_client(AGENTIK_TOKENS="")  # the facade's settings decide the card
    card = open_facade.get("/.well-known/agent-card.json").get_json()
    assert "securitySchemes" not in card and "securityRequirements" not in card


def test_off_loopback_without_a_public_url_the_card_is_503_and_never_names_the_host(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(
        start_engine(AGENTIK_TOKENS=""),
        AGENTIK_TOKENS="",
        AGENTIK_HTTP_ADDR="0.0.0.0:8000",
        AGENTIK_ALLOW_ANONYMOUS="true",
    )
    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        response = client.get(path, headers={"Host": "evil.example:666"})
        assert response.status_code == 503, response.get_data()
        assert response.get_json()["error"]["code"] == "not_configured"
        assert "evil.example" not in response.get_data(as_text=True)


def test_with_a_public_url_the_card_names_it_whatever_the_host(
    make_client: MakeClient, start_engine: StartEngine
) -> None:
    client = make_client(
        start_engine(),
        AGENTIK_HTTP_ADDR="0.0.0.0:8000",
        AGENTIK_PUBLIC_URL="https://agent.example/",
    )
    response = client.get("/.well-known/agent-card.json", headers={"Host": "evil.example:666"})
    assert response.status_code == 200
    assert "evil.example" not in response.get_data(as_text=True)
    card = response.get_json()
    assert {i["url"] for i in card["supportedInterfaces"]} == {
        "https://agent.example/",
        "https://agent.example/a2a",
    }
    legacy = client.get(
        "/.well-known/agent-card.json",
        headers={"Host": "evil.example:666", "A2A-Version": "0.3"},
    ).get_json()
    assert legacy["url"] == "https://agent.example/"


def test_an_allowed_origins_preflight_allows_authorization_and_last_event_id(
    make_client: MakeClient,
) -> None:
    client = make_client(AGENTIK_CORS_ORIGINS="https://app.example")
    origin = {"Origin": "https://app.example"}
    for path, method in (
        ("/agentik/conversations/x/events", "GET"),
        ("/agentik/conversations", "POST"),
        ("/agui", "POST"),
        ("/", "POST"),
    ):
        response = client.options(
            path,
            headers={
                **origin,
                "Access-Control-Request-Method": method,
                "Access-Control-Request-Headers": "authorization, last-event-id",
            },
        )
        assert response.status_code == 204, path
        assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
        allowed = {
            h.strip().lower() for h in response.headers["Access-Control-Allow-Headers"].split(",")
        }
        assert {"authorization", "last-event-id"} <= allowed, path
    refused = client.get("/agentik/conversations", headers=origin)
    assert refused.status_code == 401
    assert refused.headers["Access-Control-Allow-Origin"] == "https://app.example"
    exposed = refused.headers["Access-Control-Expose-Headers"].lower()
    assert "www-authenticate" in exposed and "retry-after" in exposed


@pytest.mark.parametrize("method", ["message/send", "message/stream", "tasks/get"])
def test_a2a_0_3_methods_refuse_a_missing_token_with_http_401(
    client: FlaskClient, method: str
) -> None:
    params: dict[str, Any] = {"id": "t"}
    if method.startswith("message/"):
        message = {"kind": "message", "messageId": "m1", "role": "user"}
        params = {"message": {**message, "parts": [{"kind": "text", "text": "hi"}]}}
    response = client.post("/", json=rpc_body(method, params))
    assert response.headers["WWW-Authenticate"] == CHALLENGE
    assert_a2a_error(response, 401, "UNAUTHENTICATED")
