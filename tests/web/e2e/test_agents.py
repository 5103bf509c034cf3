"""Two agents on one stack (issue 23), through every HTTP surface: ``/agentik``, AG-UI
(``/agui/{agent}``, with the official ``@ag-ui/client``) and A2A (each agent's own card
and endpoint, with a2a-sdk's client). Each agent answers with its own model and prompt
and is offered only its own tools."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from selenium.webdriver import Chrome
from selenium.webdriver.support.select import Select

from tests.chat.conftest import run_chat
from tests.chat.test_session import Terminal
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.agui.node_scenarios import run_scenario
from tests.web.e2e.conftest import WAIT, SseStream, Stack, checked, types
from tests.web.e2e.test_chat_page import Page
from tests.web.e2e.test_chat_page import browser as browser

SCRIPT = Path(__file__).parents[2] / "node" / "agui_conformance.mjs"

CONFIG = """
[llm]
system_prompt = "You are the default."

[[agents]]
name = "support"
description = "Answers customers"
model = "small-model"
system_prompt = "You support customers."
tools = ["calculate"]
examples = ["How do I reset my password?"]

[[agents]]
name = "researcher"
description = "Finds things out"
model = "big-model"
system_prompt = "You research."
tools = ["current_time"]
skills = [{ id = "research", name = "Research", description = "Looks things up" }]
"""


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("agents")
    config = logs / "agentik.toml"
    config.write_text(CONFIG)
    running = Stack(llm, logs, AGENTIK_CONFIG=str(config))
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``agentik chat`` remembers its last conversation here, never in the user's home."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client


def _since(llm: FakeOpenAI, count: int) -> list[dict[str, Any]]:
    return llm.requests[count:]


def _offered(request: dict[str, Any]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in request.get("tools", []))


def test_agentik_lists_the_agents_and_each_conversation_answers_as_its_agent(
    http: httpx.Client, llm: FakeOpenAI
) -> None:
    listed = checked(http.get("/agentik/agents")).json()["items"]
    assert [(a["name"], a["default"]) for a in listed] == [
        ("agentik", True),
        ("support", False),
        ("researcher", False),
    ]
    assert listed[1]["tools"] == ["calculate"] and listed[1]["model"] == "openai:small-model"
    one = checked(http.get("/agentik/agents/researcher")).json()
    assert one["tools"] == ["current_time"]
    missing = checked(http.get("/agentik/agents/nobody"))
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "agent_not_found")

    before = len(llm.requests)
    for agent in ("support", "researcher"):
        made = checked(http.post("/agentik/conversations", json={"agent": agent}))
        assert made.status_code == 201 and made.json()["agent"] == agent
        path = f"/agentik/conversations/{made.json()['id']}/send"
        frames = SseStream(http, "POST", path, json={"text": "hi"}).read_to_end()
        assert types(frames)[-1] == "end"
        assert (
            checked(http.get(f"/agentik/conversations/{made.json()['id']}")).json()["agent"]
            == agent
        )
    first, second = _since(llm, before)
    assert (first["model"], first["messages"][0]["content"]) == (
        "small-model",
        "You support customers.",
    )
    assert _offered(first) == ["calculate"]
    assert (second["model"], second["messages"][0]["content"]) == ("big-model", "You research.")
    assert _offered(second) == ["current_time"]
    refused = checked(http.post("/agentik/conversations", json={"agent": "nobody"}))
    assert (refused.status_code, refused.json()["error"]["code"]) == (404, "agent_not_found")
    default = checked(http.post("/agentik/conversations", json={})).json()
    assert default["agent"] == "agentik"


def test_the_official_agui_client_runs_each_agent_at_its_own_path(
    stack: Stack, llm: FakeOpenAI
) -> None:
    before = len(llm.requests)
    run_scenario(SCRIPT, stack, "plain_text", path="/agui/researcher")
    run_scenario(SCRIPT, stack, "plain_text", path="/agui/support")
    first, second = _since(llm, before)
    assert (first["model"], _offered(first)) == ("big-model", ["current_time"])
    assert (second["model"], _offered(second)) == ("small-model", ["calculate"])


def test_agui_refuses_an_unknown_agent_and_a_thread_of_another_agent(
    http: httpx.Client,
) -> None:
    thread = f"t-{uuid.uuid4().hex}"
    body = {
        "threadId": thread,
        "runId": uuid.uuid4().hex,
        "messages": [{"id": uuid.uuid4().hex, "role": "user", "content": "hi"}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    missing = http.post("/agui/nobody", json=body)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "agent_not_found")
    streamed = http.post("/agui/support", json=body)
    assert streamed.status_code == 200 and "RUN_FINISHED" in streamed.text
    body["runId"] = uuid.uuid4().hex
    other = http.post("/agui/researcher", json=body)
    assert other.status_code == 400
    assert "belongs to agent 'support'" in other.json()["error"]["message"]


async def _a2a_send(
    base_url: str, agent: str, text: str, bindings: tuple[str, ...] = ()
) -> tuple[Any, Any]:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, f"{base_url}/a2a/{agent}/").get_agent_card()
        config = ClientConfig(
            streaming=False, httpx_client=http, supported_protocol_bindings=list(bindings)
        )
        client = ClientFactory(config).create(card)
        message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
        try:
            async with asyncio.timeout(WAIT):
                events = [e async for e in client.send_message(SendMessageRequest(message=message))]
        finally:
            await client.close()
    return card, events[-1].task


def test_a2a_serves_each_agent_its_own_card_and_endpoint(stack: Stack, llm: FakeOpenAI) -> None:
    before = len(llm.requests)
    card, task = asyncio.run(_a2a_send(stack.base_url, "researcher", "look this up"))
    assert card.name == "researcher" and card.description == "Finds things out"
    assert [s.id for s in card.skills] == ["research"]
    assert card.supported_interfaces[0].url.endswith("/a2a/researcher/")
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    support_card, _ = asyncio.run(_a2a_send(stack.base_url, "support", "help me"))
    assert list(support_card.skills[0].examples) == ["How do I reset my password?"]
    first, second = _since(llm, before)
    assert (first["model"], first["messages"][0]["content"]) == ("big-model", "You research.")
    assert (second["model"], _offered(second)) == ("small-model", ["calculate"])
    with httpx.Client(base_url=stack.base_url, timeout=WAIT) as http:
        root = http.get("/.well-known/agent-card.json").json()
        assert root["name"] == "agentik"  # the root card stays the default agent's
        missing = http.get("/a2a/nobody/.well-known/agent-card.json")
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "agent_not_found")


def test_a2a_serves_each_agent_over_http_json_at_its_own_path(
    stack: Stack, llm: FakeOpenAI
) -> None:
    before = len(llm.requests)
    card, task = asyncio.run(
        _a2a_send(stack.base_url, "researcher", "look this up", ("HTTP+JSON",))
    )
    rest = [i.url for i in card.supported_interfaces if i.protocol_binding == "HTTP+JSON"]
    assert len(rest) == 1 and rest[0].endswith("/a2a/researcher")
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [request] = _since(llm, before)
    assert (request["model"], request["messages"][0]["content"]) == ("big-model", "You research.")


def _tasks(http: httpx.Client, path: str) -> list[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 100}}
    answer = http.post(path, json=body, headers={"A2A-Version": "1.0"}).json()
    return list(answer["result"]["tasks"])


def test_each_agent_lists_its_own_tasks_and_conversations(stack: Stack) -> None:
    """A2A ``ListTasks`` at ``/a2a/{agent}/`` lists that agent's tasks only (the root
    endpoint every agent's); ``GET /agentik/conversations?agent=`` that agent's."""
    ids = {}
    for agent in ("researcher", "support"):
        _, task = asyncio.run(_a2a_send(stack.base_url, agent, f"a task for {agent}"))
        ids[agent] = task.context_id
    with httpx.Client(base_url=stack.base_url, timeout=WAIT) as http:
        for agent, other in (("researcher", "support"), ("support", "researcher")):
            contexts = {t["contextId"] for t in _tasks(http, f"/a2a/{agent}/")}
            assert ids[agent] in contexts and ids[other] not in contexts
            listed = checked(http.get("/agentik/conversations", params={"agent": agent}))
            items = listed.json()["items"]
            assert {c["agent"] for c in items} == {agent}
            assert ids[agent] in {c["id"] for c in items} and listed.json()["total"] == len(items)
        everyone = {t["contextId"] for t in _tasks(http, "/")}
        assert set(ids.values()) <= everyone
        default = checked(http.get("/agentik/conversations", params={"agent": "agentik"}))
        assert {c["agent"] for c in default.json()["items"]} <= {"agentik"}
        missing = checked(http.get("/agentik/conversations", params={"agent": "nobody"}))
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "agent_not_found")


def _rpc(http: httpx.Client, path: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = http.post(path, json=body, headers={"A2A-Version": "1.0"})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _user(text: str, **ids: str) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": message | ids}


def test_a2a_reaches_a_task_only_at_its_own_agent_s_endpoint_and_the_root(stack: Stack) -> None:
    """A task of ``researcher`` is TaskNotFound at ``/a2a/support/`` for every task method
    and the push config methods, over JSON-RPC and HTTP+JSON; a message on it or on its
    context is refused there. Its own endpoint and the root one reach it."""
    with httpx.Client(base_url=stack.base_url, timeout=WAIT) as http:
        made = _rpc(http, "/a2a/researcher/", "SendMessage", _user("a researcher task"))
        task = made["result"]["task"]
        task_id, context_id = task["id"], task["contextId"]
        push = {"taskId": task_id, "url": "https://example.com/hook"}
        refused = {
            "GetTask": {"id": task_id},
            "CancelTask": {"id": task_id},
            "SubscribeToTask": {"id": task_id},
            "CreateTaskPushNotificationConfig": push,
            "GetTaskPushNotificationConfig": {"taskId": task_id, "id": "c1"},
            "ListTaskPushNotificationConfigs": {"taskId": task_id},
            "DeleteTaskPushNotificationConfig": {"taskId": task_id, "id": "c1"},
            "SendMessage": _user("go on", taskId=task_id),
        }
        for method, params in refused.items():
            error = _rpc(http, "/a2a/support/", method, params)["error"]
            assert error["code"] == -32001, (method, error)  # TaskNotFound
            assert "researcher" not in error["message"]
        for method in ("tasks/get", "tasks/cancel"):  # A2A 0.3 (no A2A-Version header)
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task_id}}
            old = http.post("/a2a/support/", json=body).json()
            assert old["error"]["code"] == -32001, (method, old)
        other = _rpc(http, "/a2a/support/", "SendMessage", _user("go on", contextId=context_id))
        assert other["error"]["code"] == -32602  # InvalidParams, naming the field
        assert "message.contextId" in other["error"]["message"]
        assert "belongs to agent 'researcher'" in other["error"]["message"]
        for path in ("/a2a/researcher/", "/"):  # its own endpoint, and the root (every agent)
            found = _rpc(http, path, "GetTask", {"id": task_id})["result"]
            assert found["id"] == task_id
        rest = {"A2A-Version": "1.0"}
        for method, url in (
            ("GET", f"/a2a/support/tasks/{task_id}"),
            ("POST", f"/a2a/support/tasks/{task_id}:cancel"),
            ("POST", f"/a2a/support/tasks/{task_id}:subscribe"),
            ("GET", f"/a2a/support/tasks/{task_id}/pushNotificationConfigs"),
            ("GET", f"/a2a/support/tasks/{task_id}/pushNotificationConfigs/c1"),
            ("DELETE", f"/a2a/support/tasks/{task_id}/pushNotificationConfigs/c1"),
        ):
            answer = http.request(method, url, headers=rest, json={} if method == "POST" else None)
            assert answer.status_code == 404, (url, answer.text)
            assert "TASK_NOT_FOUND" in answer.text
        created = http.post(
            f"/a2a/support/tasks/{task_id}/pushNotificationConfigs", headers=rest, json=push
        )
        assert created.status_code == 404 and "TASK_NOT_FOUND" in created.text
        sent = http.post(
            "/a2a/support/message:send", headers=rest, json=_user("x", contextId=context_id)
        )
        assert sent.status_code == 400 and "message.contextId" in sent.text
        own = http.get(f"/a2a/researcher/tasks/{task_id}", headers=rest)
        assert own.status_code == 200 and own.json()["id"] == task_id


async def _mcp(base_url: str) -> tuple[Any, Any, Any, Any]:
    async with httpx2.AsyncClient(timeout=WAIT) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with McpClient(transport, read_timeout_seconds=WAIT) as client:
            listed = await client.call_tool("list_agents", {})
            sent = await client.call_tool("send_message", {"text": "hi", "agent": "researcher"})
            unknown = await client.call_tool("send_message", {"text": "hi", "agent": "nobody"})
            await client.call_tool("send_message", {"text": "hi", "agent": "support"})
            mine = await client.call_tool("list_conversations", {"agent": "researcher"})
    return listed, sent, unknown, mine


def test_mcp_lists_the_agents_and_sends_to_one(stack: Stack, llm: FakeOpenAI) -> None:
    before = len(llm.requests)
    listed, sent, unknown, mine = asyncio.run(_mcp(stack.base_url))
    agents = listed.structured_content["agents"]
    assert [a["name"] for a in agents] == ["agentik", "support", "researcher"]
    assert not sent.is_error
    request = _since(llm, before)[0]
    assert (request["model"], _offered(request)) == ("big-model", ["current_time"])
    assert unknown.is_error
    assert "'nobody'" in "".join(b.text for b in unknown.content if b.type == "text")
    conversations = mine.structured_content["conversations"]
    assert conversations and {c["agent"] for c in conversations} == {"researcher"}
    assert sent.structured_content["conversation_id"] in {c["id"] for c in conversations}


def test_agentik_chat_talks_to_the_agent_it_names(stack: Stack, llm: FakeOpenAI) -> None:
    before = len(llm.requests)
    done = run_chat("hi\n", "--url", stack.base_url, "--agent", "researcher")
    assert done.returncode == 0, done.stderr
    [request] = _since(llm, before)
    assert (request["model"], request["messages"][0]["content"]) == ("big-model", "You research.")
    unknown = run_chat("hi\n", "--url", stack.base_url, "--agent", "nobody")
    assert unknown.returncode != 0
    assert "no agent 'nobody'; its agents: agentik, support, researcher" in unknown.stderr


def test_agentik_chat_lists_and_picks_agents_with_slash_agents(
    stack: Stack, llm: FakeOpenAI
) -> None:
    terminal = Terminal(stack)
    try:
        terminal.say("/agents")
        terminal.expect("* agentik")
        # In columns: the names as wide as the longest (researcher).
        terminal.expect("  support     openai:small-model  Answers customers")
        terminal.expect("  researcher  openai:big-model    Finds things out")
        terminal.prompt()
        terminal.say("/agents support")
        terminal.expect("new conversations talk to support")
        terminal.prompt()
        before = len(llm.requests)
        terminal.say("hello support")
        terminal.expect("Echo: hello support")
        terminal.prompt()
        assert _since(llm, before)[0]["model"] == "small-model"
    finally:
        terminal.close()


def test_the_chat_page_picks_the_agent_of_a_new_conversation_and_shows_it(
    browser: Chrome, stack: Stack, llm: FakeOpenAI
) -> None:
    page = Page(browser, stack.base_url)
    page.open()
    page.click("#new-conversation")  # the page opens the latest conversation otherwise
    picker = page.one("#agent")
    page.wait(lambda: picker.is_displayed(), "the agent picker")
    options = Select(picker)
    assert [o.get_attribute("value") for o in options.options] == [
        "agentik",
        "support",
        "researcher",
    ]
    assert options.first_selected_option.get_attribute("value") == "agentik"
    options.select_by_value("researcher")
    before = len(llm.requests)
    page.send("hello from the page")
    page.wait_for_answer(r"^Echo: hello from the page")
    page.idle()
    assert _since(llm, before)[0]["model"] == "big-model"
    page.wait(lambda: page.one("#current-agent").text == "researcher", "the agent shown")
    page.wait(
        lambda: (
            page.one(f'#conversations li[data-id="{page.current_id()}"] .agent').text
            == "researcher"
        ),
        "the agent in the list",
    )
    page.assert_no_console_errors()
