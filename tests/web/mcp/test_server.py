"""``/mcp`` and the engine behind it: the facade's one engine client carries every call,
an engine that is down is a 503 that names no address, and a run the engine refuses
leaves no empty conversation. The facade is the in-process app under werkzeug's server,
driven by the ``mcp`` SDK's client."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import httpx2 as httpx
import pytest
from flask.testing import FlaskClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver.exceptions import ToolError
from werkzeug.serving import BaseWSGIServer, make_server

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import BackgroundEngine, engine_settings, web_settings
from tests.web.e2e.conftest import free_port
from web_facade import create_app
from web_facade.engine_client import EngineClient
from web_facade.mcp.server import EngineAccess

WAIT = 20.0
"""Upper bound of every wait here, in seconds."""


class CountingEngineClient(EngineClient):
    """The facade's engine client, counting how often its stub is taken."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.taken = 0

    @property
    def engine(self) -> pb_grpc.AgentEngineStub:
        self.taken += 1
        return super().engine


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def engine_target(llm: FakeOpenAI) -> Iterator[str]:
    settings = engine_settings(
        llm, AGENTIK_TOKENS="alice:secret-a", AGENTIK_MAX_RUNS_PER_CALLER="1"
    )
    engine = BackgroundEngine(settings)
    yield engine.start()
    engine.stop()


@pytest.fixture(scope="module")
def facade(engine_target: str) -> Iterator[tuple[str, CountingEngineClient]]:
    """The facade on a free port: its base URL and its engine client."""
    client = CountingEngineClient(engine_target)
    app = create_app(web_settings(engine_target), client)
    server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", client
    finally:
        server.shutdown()
        thread.join(WAIT)
        client.close()


@contextlib.asynccontextmanager
async def mcp_client(base_url: str) -> AsyncIterator[Client]:
    headers = {"Authorization": "Bearer secret-a"}
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=WAIT) as client:
            yield client


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def test_every_engine_call_goes_through_the_facades_one_client(
    facade: tuple[str, CountingEngineClient],
) -> None:
    base_url, client = facade
    async with mcp_client(base_url) as mcp:
        before = client.taken
        result = await mcp.call_tool("send_message", {"text": "through the facade"})
        # Authenticate, Run and the title's RenameSession: all on the facade's client.
        assert client.taken - before >= 3
        assert _text(result) == "Echo: through the facade"
        listed = await mcp.call_tool("list_conversations", {})
    (conversation,) = [
        c
        for c in listed.structured_content["conversations"]
        if c["id"] == result.structured_content["conversation_id"]
    ]
    assert conversation["title"] == "through the facade"


async def test_a_run_refused_by_a_per_caller_limit_leaves_no_empty_conversation(
    facade: tuple[str, CountingEngineClient],
) -> None:
    base_url, _ = facade
    started = asyncio.Event()

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with mcp_client(base_url) as mcp:
        before = (await mcp.call_tool("list_conversations", {})).structured_content["total"]
        slow = asyncio.create_task(
            mcp.call_tool(
                "send_message",
                {"text": "[[chunks:2000]][[slow:0.01]] long"},
                progress_callback=progress,
            )
        )
        try:
            await asyncio.wait_for(started.wait(), WAIT)
            refused = await mcp.call_tool("send_message", {"text": "one too many"})
            assert refused.is_error and "runs in flight" in _text(refused), _text(refused)
            after = await mcp.call_tool("list_conversations", {})
            assert after.structured_content["total"] == before + 1  # the slow one only
        finally:
            slow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await slow


def test_an_engine_that_is_down_is_a_503_that_names_no_address() -> None:
    port = free_port()  # nothing listens there
    client = EngineClient(f"127.0.0.1:{port}")
    app = create_app(web_settings(f"127.0.0.1:{port}"), client)
    app.testing = True
    http: FlaskClient = app.test_client()
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "list_conversations", "arguments": {}},
    }
    try:
        response = http.post(
            "/mcp", json=call, headers={"Accept": "application/json, text/event-stream"}
        )
    finally:
        client.close()
    assert response.status_code == 503, response.get_data(as_text=True)
    assert response.headers["Retry-After"]
    error = response.get_json()["error"]
    assert error == {"code": "engine_unavailable", "message": "the engine is unreachable"}
    text = response.get_data(as_text=True)
    assert "127.0.0.1" not in text and str(port) not in text and "ipv4" not in text


def test_a_tool_call_the_engine_fails_is_worded_by_the_facades_table() -> None:
    port = free_port()  # nothing listens there
    client = EngineClient(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.RpcError) as caught:
            client.engine.ListSessions(pb.ListSessionsRequest(), timeout=WAIT)
    finally:
        client.close()
    access = EngineAccess(client, from_request=True)
    no_context: Any = None  # only a refused token reads the request
    error = access.failure(caught.value, no_context)
    assert isinstance(error, ToolError)
    assert str(error) == "UNAVAILABLE: the engine is unreachable"
    assert str(port) not in str(error)
