"""Authentication through the real stack: the engine process with tokens, gunicorn, and the
clients peers use (a2a-sdk's, @ag-ui/client's); and ``agentik web`` refusing to listen
beyond loopback without authentication."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, ClientFactory
from a2a.client.auth.credentials import CredentialService
from a2a.client.auth.interceptor import AuthInterceptor
from a2a.client.errors import A2AClientError
from a2a.client.interceptors import ClientCallInterceptor
from a2a.types import (
    AgentCard,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from a2a.utils.errors import TaskNotFoundError

from agentik.parent_watch import env_for_child
from tests.fakes.fake_openai import FakeOpenAI
from tests.node_tools import NODE_DIR, node_or_skip
from tests.web.e2e.conftest import ROOT, WAIT, SseStream, Stack, free_port

pytestmark = [pytest.mark.processes]

TOKENS = "alice:tokenA,bob:tokenB,ops:tokenO"
ALICE = {"Authorization": "Bearer tokenA"}
BOB = {"Authorization": "Bearer tokenB"}
CHALLENGE = 'Bearer realm="agentik"'


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The whole stack, engine and facade both configured with the tokens."""
    running = Stack(
        llm, tmp_path_factory.mktemp("auth-stack"), AGENTIK_TOKENS=TOKENS, AGENTIK_ADMINS="ops"
    )
    yield running
    running.stop()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def _agui_input(thread_id: str, text: str) -> dict[str, Any]:
    return {
        "threadId": thread_id,
        "runId": uuid.uuid4().hex,
        "state": {},
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def _messages(http: httpx.Client, who: dict[str, str], conversation_id: str) -> list[Any]:
    response = http.get(f"/agentik/conversations/{conversation_id}/messages", headers=who)
    assert response.status_code == 200, response.text
    items: list[Any] = response.json()["items"]
    return items


# -- 401 through gunicorn ----------------------------------------------------------


def test_without_a_token_every_facade_answers_401_through_gunicorn(http: httpx.Client) -> None:
    refused = http.get("/agentik/conversations")
    assert refused.status_code == 401 and refused.headers["WWW-Authenticate"] == CHALLENGE
    assert refused.json()["error"]["code"] == "unauthenticated"

    run = http.post("/agui", json=_agui_input(f"t-{uuid.uuid4().hex}", "hi"))
    assert run.status_code == 401 and run.headers["WWW-Authenticate"] == CHALLENGE
    assert run.json()["error"]["code"] == "unauthenticated"

    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    rpc = http.post("/", json=body, headers={"A2A-Version": "1.0"})
    assert rpc.status_code == 401 and rpc.headers["WWW-Authenticate"] == CHALLENGE
    assert rpc.json()["error"]["code"] == -32600
    assert rpc.json()["error"]["data"][0]["reason"] == "UNAUTHENTICATED"

    wrong = http.get("/agentik/conversations", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"] == f'{CHALLENGE}, error="invalid_token"'

    for public in ("/health", "/.well-known/agent-card.json", "/agentik/openapi.json"):
        assert http.get(public).status_code == 200, public


# -- isolation ---------------------------------------------------------------------


def test_alice_and_bob_are_isolated_on_agentik(http: httpx.Client) -> None:
    created = http.post("/agentik/conversations", json={"title": "alice's"}, headers=ALICE)
    assert created.status_code == 201
    alices = created.json()["id"]
    stream = SseStream(
        http, "POST", f"/agentik/conversations/{alices}/send", json={"text": "hi"}, headers=ALICE
    )
    try:
        assert [f.type for f in stream.read_to_end()][-1] == "end"
    finally:
        stream.close()

    assert http.get(f"/agentik/conversations/{alices}", headers=BOB).status_code == 404
    assert http.get(f"/agentik/conversations/{alices}/messages", headers=BOB).status_code == 404
    sent = http.post(
        f"/agentik/conversations/{alices}/send", json={"text": "bob here"}, headers=BOB
    )
    assert sent.status_code == 404 and sent.json()["error"]["code"] == "not_found"
    assert http.delete(f"/agentik/conversations/{alices}", headers=BOB).status_code == 404
    bobs_list = http.get("/agentik/conversations?limit=200", headers=BOB).json()
    assert alices not in {c["id"] for c in bobs_list["items"]}
    assert [m["role"] for m in _messages(http, ALICE, alices)] == ["user", "assistant"]


def test_alice_and_bob_are_isolated_on_agui(http: httpx.Client) -> None:
    thread_id = f"t-{uuid.uuid4().hex}"
    with http.stream("POST", "/agui", json=_agui_input(thread_id, "alice's"), headers=ALICE) as r:
        assert r.status_code == 200
        assert "Echo: alice's" in r.read().decode()
    before = _messages(http, ALICE, thread_id)

    refused = http.post("/agui", json=_agui_input(thread_id, "bob's"), headers=BOB)
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "not_found"
    assert "alice" not in refused.text
    assert _messages(http, ALICE, thread_id) == before
    assert http.get(f"/agentik/conversations/{thread_id}", headers=BOB).status_code == 404


# -- a2a-sdk's client --------------------------------------------------------------


class _Token(CredentialService):
    """The one bearer token a peer was given, for the scheme the card declares."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.asked: list[str] = []

    async def get_credentials(
        self, security_scheme_name: str, context: ClientCallContext | None
    ) -> str | None:
        self.asked.append(security_scheme_name)
        return self.token


def _request(text: str) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=message)


async def _send(
    card: AgentCard, http: httpx.AsyncClient, token: _Token | None, text: str
) -> list[StreamResponse]:
    interceptors: list[ClientCallInterceptor] = [AuthInterceptor(token)] if token else []
    client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
        card, interceptors=interceptors
    )
    try:
        async with asyncio.timeout(WAIT):
            return [event async for event in client.send_message(_request(text))]
    finally:
        await client.close()


async def test_the_a2a_sdk_client_sends_with_the_bearer_scheme_the_card_declares(
    stack: Stack,
) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, stack.base_url).get_agent_card()
        assert card.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
        alice = _Token("tokenA")
        events = await _send(card, http, alice, "hello with a token")
        assert alice.asked == ["bearer"]
        (event,) = events
        assert event.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert event.task.artifacts[0].parts[0].text == "Echo: hello with a token"

        # bob's client cannot read alice's task
        bob = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
            card, interceptors=[AuthInterceptor(_Token("tokenB"))]
        )
        try:
            with pytest.raises(TaskNotFoundError):
                await bob.get_task(GetTaskRequest(id=event.task.id))
        finally:
            await bob.close()


async def test_the_a2a_sdk_client_without_a_token_gets_an_http_401(stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, stack.base_url).get_agent_card()
        with pytest.raises(A2AClientError) as refused:
            await _send(card, http, None, "hello without a token")
    cause = refused.value.__cause__
    assert isinstance(cause, httpx.HTTPStatusError), repr(refused.value)
    assert cause.response.status_code == 401
    assert cause.response.headers["WWW-Authenticate"] == CHALLENGE


# -- @ag-ui/client via node --------------------------------------------------------


def _agui_node(stack: Stack, thread_id: str, token: str, text: str) -> dict[str, Any]:
    node = node_or_skip("@ag-ui/client")
    done = subprocess.run(
        [node, str(NODE_DIR / "agui_auth.mjs"), stack.base_url, thread_id, token, text],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


def test_the_official_agui_client_runs_with_a_token_and_is_refused_without(stack: Stack) -> None:
    thread_id = f"node-{uuid.uuid4().hex}"
    ran = _agui_node(stack, thread_id, "tokenA", "hello from node")
    assert ran["error"] is None, ran["error"]
    assert ran["text"] == "Echo: hello from node"
    assert ran["types"][-1] == "RUN_FINISHED" and ran["warnings"] == []

    refused = _agui_node(stack, thread_id, "", "no token")
    assert refused["error"]["status"] == 401, refused
    assert refused["error"]["payload"]["error"]["code"] == "unauthenticated"
    assert refused["types"] == []

    other = _agui_node(stack, thread_id, "tokenB", "bob's try")
    assert other["error"]["status"] == 404, other
    assert other["types"] == []


# -- refusing open exposure --------------------------------------------------------


def _open_env(tmp_path: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTIK_") or k == "AGENTIK_REQUIRE_NODE"
    }
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "AGENTIK_HTTP_ADDR": f"0.0.0.0:{free_port()}",
            "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
            "AGENTIK_STORE": f"sqlite:///{tmp_path / 'agentik.db'}",
        }
    )
    return env


def test_agentik_web_beyond_loopback_without_tokens_exits_2_naming_the_settings(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "web"],
        env=env_for_child(_open_env(tmp_path)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "AGENTIK_TOKENS" in done.stderr and "AGENTIK_ALLOW_ANONYMOUS" in done.stderr
    assert "Listening at" not in done.stderr
