"""``/mcp`` on the facade: the MCP tools over streamable HTTP, under gunicorn (two workers,
each request to either), driven by the ``mcp`` SDK's client, with tokens on the engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx2 as httpx
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import Stack

WAIT = 20.0
"""Upper bound of every wait here, in seconds."""

ALICE = (("authorization", "Bearer secret-a"),)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs: Path = tmp_path_factory.mktemp("mcp-http")
    running = Stack(llm, logs, AGENTIK_TOKENS="alice:secret-a,bob:secret-b")
    yield running
    running.stop()


@contextlib.asynccontextmanager
async def mcp_client(stack: Stack, token: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        transport = streamable_http_client(f"{stack.base_url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=WAIT) as client:
            yield client


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def test_the_tools_are_listed_over_http(stack: Stack) -> None:
    async with mcp_client(stack, "secret-a") as client:
        tools = await client.list_tools()
    assert {tool.name for tool in tools.tools} == {
        "send_message",
        "answer",
        "list_conversations",
        "read_conversation",
        "list_agents",
    }


async def test_a_conversation_is_held_over_http_and_kept_to_its_owner(
    stack: Stack, llm: FakeOpenAI
) -> None:
    async with mcp_client(stack, "secret-a") as client:
        first = await client.call_tool("send_message", {"text": "over http"})
        assert _text(first) == "Echo: over http", _text(first)
        conversation = first.structured_content["conversation_id"]
        second = await client.call_tool(
            "send_message", {"text": "and again", "conversation_id": conversation}
        )
        assert _text(second) == "Echo: and again"
        sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert sent == ["over http", "and again"]
        read = await client.call_tool("read_conversation", {"conversation_id": conversation})
        assert [m["text"] for m in read.structured_content["messages"]] == [
            "over http",
            "Echo: over http",
            "and again",
            "Echo: and again",
        ]
        listed = await client.call_tool("list_conversations", {"limit": 100})
        assert conversation in [c["id"] for c in listed.structured_content["conversations"]]
    async with mcp_client(stack, "secret-b") as bob:
        listed = await bob.call_tool("list_conversations", {"limit": 100})
        assert conversation not in [c["id"] for c in listed.structured_content["conversations"]]
        read = await bob.call_tool("read_conversation", {"conversation_id": conversation})
        assert read.is_error


async def test_progress_arrives_over_http(stack: Stack) -> None:
    seen: list[str | None] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    async with mcp_client(stack, "secret-a") as client:
        result = await client.call_tool(
            "send_message", {"text": "[[chunks:4]] go"}, progress_callback=progress
        )
    assert _text(result) == "w0 w1 w2 w3 "
    assert seen and "".join(message or "" for message in seen) == "w0 w1 w2 w3 "


async def test_cancelling_an_http_call_interrupts_the_run(stack: Stack) -> None:
    started = asyncio.Event()
    first: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with mcp_client(stack, "secret-a") as client:
        before = await client.call_tool("list_conversations", {"limit": 1000})
        known = {c["id"] for c in before.structured_content["conversations"]}
        call = asyncio.create_task(
            client.call_tool(
                "send_message",
                {"text": "[[chunks:2000]][[slow:0.01]] long"},
                progress_callback=progress,
            )
        )
        await asyncio.wait_for(started.wait(), WAIT)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        after = await client.call_tool("list_conversations", {"limit": 1000})
        first = [c["id"] for c in after.structured_content["conversations"] if c["id"] not in known]
    (session,) = first
    status = await asyncio.wait_for(_status_when_ended(stack, session), WAIT)
    assert status == pb.RUN_STATUS_INTERRUPTED


async def _status_when_ended(stack: Stack, session: str) -> int:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.grpc_port}") as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        request = pb.SubscribeRequest(session_id=session, until_idle=True)
        async for _ in stub.Subscribe(request, metadata=ALICE):
            pass
        runs = await stub.ListRuns(pb.ListRunsRequest(session_id=session), metadata=ALICE)
        return int(runs.runs[0].status)


@pytest.mark.parametrize("token", [None, "wrong"])
async def test_without_a_valid_token_the_mcp_client_is_refused_before_any_method(
    stack: Stack, token: str | None
) -> None:
    # The SDK's client has no word of its own for an HTTP 401 without OAuth: an MCPError.
    with pytest.RaisesGroup(MCPError, flatten_subgroups=True):
        async with mcp_client(stack, token) as client:
            await client.list_tools()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
LIST_TOOLS = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def _refusal(response: Any, status: int, code: str) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = response.json()["error"]
    assert error["code"] == code, error
    message: str = error["message"]
    return message


@pytest.mark.parametrize("body", [INITIALIZE, LIST_TOOLS])
@pytest.mark.parametrize(
    ("headers", "challenge"),
    [({}, 'Bearer realm="agentik"'), ({"Authorization": "Bearer nope"}, 'error="invalid_token"')],
)
def test_every_mcp_post_without_a_valid_token_is_a_json_401(
    stack: Stack, body: dict[str, Any], headers: dict[str, str], challenge: str
) -> None:
    with stack.client() as http:
        response = http.post("/mcp", json=body, headers={**ACCEPT, **headers})
    assert "token" in _refusal(response, 401, "unauthenticated")
    assert challenge in response.headers["www-authenticate"]


def test_an_unauthenticated_get_stream_is_refused_before_it_opens(stack: Stack) -> None:
    with stack.client() as http:
        response = http.get("/mcp", headers={"Accept": "text/event-stream"})
    _refusal(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_an_authenticated_get_gets_405_at_once_not_an_idle_stream(stack: Stack) -> None:
    headers = {"Accept": "text/event-stream", "Authorization": "Bearer secret-a"}
    with stack.client() as http:
        response = http.get("/mcp", headers=headers)
    assert "POST" in _refusal(response, 405, "method_not_allowed")
    assert response.headers["allow"] == "POST, DELETE"


def test_a_body_over_the_facade_limit_is_our_json_413(stack: Stack) -> None:
    padded = {**LIST_TOOLS, "params": {"_meta": {"pad": "x" * 100_000}}}  # limit: 65536
    with stack.client() as http:
        response = http.post(
            "/mcp", json=padded, headers={**ACCEPT, "Authorization": "Bearer secret-a"}
        )
    assert "65536" in _refusal(response, 413, "payload_too_large")


@pytest.mark.parametrize(
    ("content", "content_type", "status", "code"),
    [
        (b"{not json", "application/json", 400, "invalid_json"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": 5}', "application/json", 400, "invalid_argument"),
        (
            b'{"jsonrpc": "1.0", "id": 1, "method": "x"}',
            "application/json",
            400,
            "invalid_argument",
        ),
        (json.dumps(LIST_TOOLS).encode(), "text/plain", 415, "unsupported_media_type"),
    ],
)
def test_a_malformed_mcp_request_is_a_json_error_in_our_words(
    stack: Stack, content: bytes, content_type: str, status: int, code: str
) -> None:
    headers = {**ACCEPT, "Authorization": "Bearer secret-a", "Content-Type": content_type}
    with stack.client() as http:
        response = http.post("/mcp", content=content, headers=headers)
    message = _refusal(response, status, code)
    assert "pydantic" not in message and "validation error" not in message.lower()


def test_the_sdks_own_refusals_leave_in_our_json_shape(stack: Stack) -> None:
    headers = {"Accept": "application/json", "Authorization": "Bearer secret-a"}
    with stack.client() as http:
        response = http.post("/mcp", json=LIST_TOOLS, headers=headers)  # no text/event-stream
    assert "text/event-stream" in _refusal(response, 406, "not_acceptable")


async def test_tool_arguments_of_the_wrong_type_are_refused_in_our_words(stack: Stack) -> None:
    async with mcp_client(stack, "secret-a") as client:
        result = await client.call_tool("send_message", {"text": 5})
        missing = await client.call_tool("read_conversation", {})
    text = _text(result)
    assert result.is_error and "invalid arguments for send_message: text must be a string" in text
    assert "pydantic" not in text and "input_value" not in text and "type=" not in text
    assert missing.is_error and "conversation_id is required" in _text(missing)


async def test_an_absurd_offset_is_refused_with_a_clear_message(stack: Stack) -> None:
    async with mcp_client(stack, "secret-a") as client:
        result = await client.call_tool("list_conversations", {"offset": 10**15})
    assert result.is_error
    assert "offset must be between 0 and 2147483647" in _text(result), _text(result)


async def test_a_task_is_polled_across_the_workers_and_any_of_them_answers(stack: Stack) -> None:
    from tests.web.mcp.test_tasks import Tasks, get_task

    tasks = Tasks()
    headers = {"Authorization": "Bearer secret-a"}
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        transport = streamable_http_client(f"{stack.base_url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=WAIT, extensions=[tasks]) as client:
            result = await client.call_tool("send_message", {"text": "[[slow:0.05]] workers"})
            assert _text(result) == "Echo: workers"
            [handle] = tasks.handles
            # Each poll is a request of its own, to either worker: every one knows the task.
            polls = [await get_task(client.session, handle.task_id) for _ in range(6)]
    assert {task["status"] for task in polls} == {"completed"}
    assert {task["result"]["structuredContent"]["run_id"] for task in polls} == {handle.task_id}


def _list_tools_with_id(stack: Stack, written: str) -> Any:
    """``tools/list`` whose id is ``written``, as written (a float stays a float): the
    stack's answer (an ``httpx.Response``; this module's ``httpx`` is ``httpx2``)."""
    body = '{"jsonrpc": "2.0", "id": ' + written + ', "method": "tools/list", "params": {}}'
    headers = {**ACCEPT, "Authorization": "Bearer secret-a", "Content-Type": "application/json"}
    with stack.client() as http:
        return http.post("/mcp", content=body, headers=headers)


@pytest.mark.parametrize(
    "request_id",
    [-(2**63), 2**63 - 1, 2**63, -(2**63) - 1, 10**40, 0, "x", ""],
)
def test_an_id_that_is_a_string_or_an_integer_is_echoed_as_given(
    stack: Stack, request_id: int | str
) -> None:
    response = _list_tools_with_id(stack, json.dumps(request_id))
    assert response.status_code == 200, response.text
    (data,) = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert f'"id":{json.dumps(request_id)},' in data  # as written: never a float
    reply = json.loads(data.removeprefix("data: "))
    assert reply["id"] == request_id and "tools" in reply["result"]


@pytest.mark.parametrize(
    "written",
    ["1.5", "1.0", "-0.0", "1e3", "true", "false", "null", "[1]", '{"a": {"b": 1}}'],
)
def test_an_id_that_is_no_string_or_integer_is_refused_not_taken_for_a_notification(
    stack: Stack, written: str
) -> None:
    """The SDK took such a request for a notification and answered a bare 202: the client
    waited for an answer that never came."""
    response = _list_tools_with_id(stack, written)
    assert _refusal(response, 400, "invalid_argument") == "id must be a string or an integer"


@pytest.mark.parametrize("written", ["1e400", "1" + "0" * 5000])
def test_a_number_json_cannot_carry_as_an_id_is_refused_naming_it(
    stack: Stack, written: str
) -> None:
    response = _list_tools_with_id(stack, written)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "finite number" in message or "more digits than the server accepts" in message
