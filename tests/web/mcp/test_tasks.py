"""MCP tasks (the ``io.modelcontextprotocol/tasks`` extension) on ``/mcp``: a client that
declares the extension gets a task for a turn and polls it; the task is the engine's run.
Driven by the ``mcp`` SDK's own client (its extension API: a result claim for
``resultType: "task"`` and requests sent through its session), against the in-process
facade under werkzeug's server and a real engine with the HTTP fake LLM."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, Literal

import httpx2 as httpx
import pytest
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, TypeAdapter
from werkzeug.serving import BaseWSGIServer, make_server

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import BackgroundEngine, engine_settings, web_settings
from web_facade import create_app
from web_facade.engine_client import EngineClient
from web_facade.mcp.tasks import POLL_INTERVAL_MS, TASKS_EXTENSION

WAIT = 20.0
ALICE = "secret-a"
BOB = "secret-b"


# -- the client side of the extension, built on the SDK's extension API -----------------


class TaskHandle(Result):
    """``CreateTaskResult``: a task in lieu of the tool's result."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskIdParams(RequestParams):
    task_id: str


class GetTask(Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class CancelTask(Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


class LooseParams(RequestParams):
    """Params sent as given (``taskId`` of any type, or none), for the refusals."""

    model_config = ConfigDict(extra="allow")


class LooseRequest(Request[LooseParams, str]):
    method: str
    params: LooseParams


ANY = TypeAdapter(dict[str, Any])


class Tasks(ClientExtension):
    """Declares the extension and finishes a task by polling ``tasks/get``."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.handles: list[TaskHandle] = []
        self.polls: list[dict[str, Any]] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve),)

    async def resolve(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        self.handles.append(handle)
        async with asyncio.timeout(WAIT):
            while True:
                task = await get_task(ctx.session, handle.task_id)
                self.polls.append(task)
                if task["status"] == "completed":
                    return CallToolResult.model_validate(task["result"])
                assert task["status"] == "working", task
                await asyncio.sleep(0.05)


async def get_task(session: Any, task_id: str) -> dict[str, Any]:
    return await send(session, GetTask(params=TaskIdParams(task_id=task_id)))


async def send(session: Any, request: Request[Any, Any]) -> dict[str, Any]:
    """A request of the extension through the SDK's session; its raw result."""
    result: dict[str, Any] = await session.send_request(request, ANY)
    return result


# -- the stack ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def base_url(llm: FakeOpenAI) -> Iterator[str]:
    settings = engine_settings(
        llm, AGENTIK_TOKENS=f"alice:{ALICE},bob:{BOB}", AGENTIK_TOOLS_APPROVAL="calculate"
    )
    engine = BackgroundEngine(settings)
    target = engine.start()
    client = EngineClient(target)
    app = create_app(web_settings(target), client)
    server: BaseWSGIServer = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(WAIT)
        client.close()
        engine.stop()


@contextlib.asynccontextmanager
async def mcp_client(
    base_url: str, token: str = ALICE, tasks: Tasks | None = None
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        transport = streamable_http_client(f"{base_url}/mcp", http_client=http)
        extensions = [tasks] if tasks is not None else []
        async with Client(transport, read_timeout_seconds=WAIT, extensions=extensions) as client:
            yield client


def _text(result: CallToolResult) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def _start(client: Client, text: str) -> TaskHandle:
    """A task handle, taken as is (``allow_claimed``) instead of resolved."""
    handle = await client.session.call_tool("send_message", {"text": text}, allow_claimed=True)
    assert isinstance(handle, TaskHandle), handle
    return handle


async def _until(client: Client, task_id: str, status: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT):
        while True:
            task = await get_task(client.session, task_id)
            if task["status"] == status:
                return task
            await asyncio.sleep(0.05)


# -- the tests ---------------------------------------------------------------------------


async def test_the_answers_publish_their_output_schema(base_url: str) -> None:
    async with mcp_client(base_url) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in ("send_message", "answer"):
        schema = tools[name].output_schema
        assert schema is not None
        assert set(schema["required"]) == {"conversation_id", "run_id", "status", "answer"}
        assert schema["properties"]["status"]["enum"] == [
            "completed",
            "failed",
            "cancelled",
            "input_required",
        ]
    # The other tools publish theirs too (the SDK's client checks each answer against it).
    required = {
        "list_agents": {"agents"},
        "list_conversations": {"total", "conversations"},
        "read_conversation": {"conversation_id", "messages", "has_more"},
    }
    for name, fields in required.items():
        schema = tools[name].output_schema
        assert schema is not None and set(schema["required"]) == fields, name


async def test_a_client_that_declares_tasks_gets_a_task_and_its_answer_by_polling(
    base_url: str,
) -> None:
    tasks = Tasks()
    async with mcp_client(base_url, tasks=tasks) as client:
        result = await client.call_tool("send_message", {"text": "[[slow:0.1]] in a task"})
    assert not result.is_error and _text(result) == "Echo: in a task"
    [handle] = tasks.handles
    assert handle.status == "working" and handle.poll_interval_ms == POLL_INTERVAL_MS
    answer = result.structured_content
    assert answer is not None and answer["run_id"] == handle.task_id
    assert answer["status"] == "completed" and answer["answer"] == "Echo: in a task"
    # Polled while the run went on, then its end.
    assert tasks.polls[0]["status"] == "working" and tasks.polls[-1]["status"] == "completed"
    assert tasks.polls[-1]["resultType"] == "complete"


async def test_a_conversation_continues_in_a_task_and_its_history_is_the_engines(
    base_url: str,
) -> None:
    tasks = Tasks()
    async with mcp_client(base_url, tasks=tasks) as client:
        first = await client.call_tool("send_message", {"text": "one"})
        assert first.structured_content is not None
        conversation = first.structured_content["conversation_id"]
        second = await client.call_tool(
            "send_message", {"text": "two", "conversation_id": conversation}
        )
        assert _text(second) == "Echo: two"
        read = await client.call_tool("read_conversation", {"conversation_id": conversation})
    assert read.structured_content is not None
    texts = [m["text"] for m in read.structured_content["messages"]]
    assert texts == ["one", "Echo: one", "two", "Echo: two"]


async def test_without_the_extension_the_call_answers_at_its_end(base_url: str) -> None:
    async with mcp_client(base_url) as client:
        result = await client.call_tool("send_message", {"text": "no task"})
        assert _text(result) == "Echo: no task"
        with pytest.raises(MCPError) as caught:
            await get_task(client.session, "anything")
    assert caught.value.error.code == -32021  # missing required client capability


async def test_a_task_runs_on_without_its_caller_and_is_cancelled_with_tasks_cancel(
    base_url: str, llm: FakeOpenAI
) -> None:
    async with mcp_client(base_url, tasks=Tasks()) as client:
        handle = await _start(client, "[[slow:0.2]] [[chunks:200]] long")
    # A new connection (a new client, after the first is gone) finds it still running.
    async with mcp_client(base_url, tasks=Tasks()) as client:
        task = await get_task(client.session, handle.task_id)
        assert task["status"] == "working" and "result" not in task
        ack = await send(client.session, CancelTask(params=TaskIdParams(task_id=handle.task_id)))
        assert ack == {"resultType": "complete"} or ack.get("resultType") == "complete"
        cancelled = await _until(client, handle.task_id, "cancelled")
    assert cancelled["statusMessage"] and "result" not in cancelled


async def test_another_callers_task_and_an_unknown_one_are_not_found(base_url: str) -> None:
    async with mcp_client(base_url, tasks=Tasks()) as client:
        handle = await _start(client, "mine")
        done = await _until(client, handle.task_id, "completed")
        assert done["result"]["structuredContent"]["answer"] == "Echo: mine"
    async with mcp_client(base_url, token=BOB, tasks=Tasks()) as client:
        for task_id in (handle.task_id, "no-such-task", "x" * 129):
            with pytest.raises(MCPError) as caught:
                await get_task(client.session, task_id)
            assert caught.value.error.code == -32602, task_id


@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel", "tasks/update"])
async def test_a_task_id_that_is_no_task_id_is_refused_naming_taskid_and_the_problem(
    base_url: str, method: str
) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"taskId": "t" * 129},
            "taskId is 129 characters long; the id of a task, a string of 1 to 128",
        ),
        ({"taskId": ""}, "taskId must not be empty"),
        (
            {"taskId": 5},
            "taskId must be a string (the id of a task, a string of 1 to 128 characters),"
            " got a number",
        ),
        ({"taskId": ["x"]}, "got an array"),
        ({}, "taskId is required"),
    ]
    async with mcp_client(base_url, tasks=Tasks()) as client:
        for params, words in cases:
            with pytest.raises(MCPError) as caught:
                await send(
                    client.session, LooseRequest(method=method, params=LooseParams(**params))
                )
            assert caught.value.error.code == -32602, params
            assert words in caught.value.error.message, (params, caught.value.error)
        if method == "tasks/update":
            handle = await _start(client, "mine")
            loose: dict[str, Any] = {"taskId": handle.task_id, "inputResponses": [1]}
            bad = LooseParams(**loose)
            with pytest.raises(MCPError) as caught:
                await send(client.session, LooseRequest(method=method, params=bad))
            assert "inputResponses must be an object, got an array" in caught.value.error.message


async def test_a_failed_turn_is_a_completed_task_whose_result_is_a_tool_error(
    base_url: str,
) -> None:
    tasks = Tasks()
    async with mcp_client(base_url, tasks=tasks) as client:
        result = await client.call_tool("send_message", {"text": "[[error:400]] nope"})
    assert result.is_error
    assert result.structured_content is not None
    assert result.structured_content["status"] == "failed"
    assert tasks.polls[-1]["status"] == "completed"


async def test_a_turn_the_engine_refuses_is_answered_at_once_without_a_task(
    base_url: str,
) -> None:
    tasks = Tasks()
    async with mcp_client(base_url, tasks=tasks) as client:
        result = await client.call_tool(
            "send_message", {"text": "hi", "conversation_id": "no-such-conversation"}
        )
    assert result.is_error and not tasks.handles


async def test_a_turn_that_waits_for_a_person_completes_its_task_and_answer_goes_on(
    base_url: str,
) -> None:
    tasks = Tasks()
    async with mcp_client(base_url, tasks=tasks) as client:
        paused = await client.call_tool(
            "send_message", {"text": '[[tool:calculate {"expression": "6*7"}]]'}
        )
        waits = paused.structured_content
        assert waits is not None and waits["status"] == "input_required", _text(paused)
        [interrupt] = waits["interrupts"]
        assert interrupt["kind"] == "approval" and interrupt["tool_call"]["name"] == "calculate"
        assert f"(interrupt_id {interrupt['id']})" in _text(paused)
        decision = {"interrupt_id": interrupt["id"], "approve": True}
        done = await client.call_tool(
            "answer", {"conversation_id": waits["conversation_id"], "decisions": [decision]}
        )
    assert done.structured_content is not None
    assert done.structured_content["status"] == "completed", _text(done)
    assert "42" in _text(done)
    assert len(tasks.handles) == 2  # both turns ran as tasks
