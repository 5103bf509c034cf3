"""``/mcp`` on the facade: the MCP tools over streamable HTTP, under gunicorn (two workers,
each request to either), driven by the ``mcp`` SDK's client, with tokens on the engine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx2 as httpx
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import Stack
from web_facade.mcp.server import UNAUTHORIZED

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
    assert seen == ["w0 ", "w1 ", "w2 ", "w3 "]


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


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (None, "set the Authorization header"),
        ("wrong", "the token in the Authorization header was refused"),
    ],
)
async def test_a_missing_or_wrong_token_is_a_clear_mcp_error_over_http(
    stack: Stack, token: str | None, says: str
) -> None:
    async with mcp_client(stack, token) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("list_conversations", {})
    assert caught.value.code == UNAUTHORIZED and says in caught.value.message
