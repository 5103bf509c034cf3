"""``agentik mcp`` as a real subprocess, driven by the ``mcp`` SDK's client over stdio,
against a real engine on a free port (its LLM the HTTP fake of OpenAI)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any, TextIO

import pytest
from mcp import Client, MCPError, StdioServerParameters, stdio_client

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import Harness, engine_settings, running_engine
from tests.fakes.fake_openai import FakeOpenAI
from web_facade.mcp.server import UNAUTHORIZED

WAIT = 20.0
"""Upper bound of every wait here, in seconds (a subprocess starts in each test)."""


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _settings(llm: FakeOpenAI, **env: str) -> Any:
    return engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        **env,
    )


@contextlib.asynccontextmanager
async def mcp_client(
    target: str, token: str | None = None, extensions: list[Any] | None = None
) -> AsyncIterator[Client]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "OTEL_"))}
    if token is not None:
        env["AGENTIK_TOKEN"] = token
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentik.cli", "mcp", "--target", target],
        env=env,
    )
    errlog: TextIO
    with tempfile.TemporaryFile("w+") as errlog:
        try:
            async with Client(
                stdio_client(params, errlog=errlog),
                read_timeout_seconds=WAIT,
                extensions=extensions or [],
            ) as client:
                yield client
        except BaseException:
            errlog.seek(0)
            print(errlog.read(), file=sys.stderr)  # the server's log, for the failure report
            raise


def _text(result: Any) -> str:
    return "".join(block.text for block in result.content if block.type == "text")


async def test_the_tools_are_listed(llm: FakeOpenAI) -> None:
    async with running_engine(_settings(llm)) as harness, mcp_client(harness.target) as client:
        tools = await asyncio.wait_for(client.list_tools(), WAIT)
    names = {tool.name for tool in tools.tools}
    assert names == {
        "send_message",
        "answer",
        "list_conversations",
        "read_conversation",
        "list_agents",
    }
    send = next(tool for tool in tools.tools if tool.name == "send_message")
    assert send.input_schema["required"] == ["text"]
    answer = next(tool for tool in tools.tools if tool.name == "answer")
    assert answer.input_schema["required"] == ["conversation_id", "decisions"]


async def test_a_conversation_is_held_listed_and_read(llm: FakeOpenAI) -> None:
    async with running_engine(_settings(llm)) as harness, mcp_client(harness.target) as client:
        first = await client.call_tool("send_message", {"text": "hello there"})
        assert not first.is_error, _text(first)
        assert _text(first) == "Echo: hello there"
        conversation = first.structured_content["conversation_id"]
        second = await client.call_tool(
            "send_message", {"text": "again", "conversation_id": conversation}
        )
        assert _text(second) == "Echo: again"
        assert second.structured_content["conversation_id"] == conversation
        # The second turn saw the first: the LLM got the whole history.
        sent = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert sent == ["hello there", "again"]

        listed = await client.call_tool("list_conversations", {})
        conversations = listed.structured_content["conversations"]
        assert [c["id"] for c in conversations] == [conversation]
        assert conversations[0]["message_count"] == 4
        read = await client.call_tool("read_conversation", {"conversation_id": conversation})
        messages = read.structured_content["messages"]
        assert [(m["role"], m["text"]) for m in messages] == [
            ("user", "hello there"),
            ("assistant", "Echo: hello there"),
            ("user", "again"),
            ("assistant", "Echo: again"),
        ]
        missing = await client.call_tool("read_conversation", {"conversation_id": "nope"})
        assert missing.is_error
        assert _text(missing).endswith("NOT_FOUND: conversation 'nope' not found"), _text(missing)


async def test_a_client_that_declares_tasks_gets_its_turn_as_a_task_over_stdio(
    llm: FakeOpenAI,
) -> None:
    from tests.web.mcp.test_tasks import Tasks

    tasks = Tasks()
    async with (
        running_engine(_settings(llm)) as harness,
        mcp_client(harness.target, extensions=[tasks]) as client,
    ):
        result = await client.call_tool("send_message", {"text": "[[slow:0.05]] as a task"})
    assert _text(result) == "Echo: as a task"
    [handle] = tasks.handles
    assert result.structured_content is not None
    assert result.structured_content["run_id"] == handle.task_id
    assert tasks.polls[-1]["status"] == "completed"


async def test_progress_notifications_carry_the_streamed_text(llm: FakeOpenAI) -> None:
    seen: list[tuple[float, str | None]] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    async with running_engine(_settings(llm)) as harness, mcp_client(harness.target) as client:
        result = await client.call_tool(
            "send_message", {"text": "[[chunks:5]] go"}, progress_callback=progress
        )
    assert _text(result) == "w0 w1 w2 w3 w4 "
    # One notification per text delta (tokens read together are one delta), each with
    # its text and the characters streamed so far.
    messages = [message or "" for _, message in seen]
    assert "".join(messages) == "w0 w1 w2 w3 w4 "
    sofar = [sum(len(m) for m in messages[: n + 1]) for n in range(len(messages))]
    assert [value for value, _ in seen] == sofar


async def test_cancelling_the_call_interrupts_the_run(llm: FakeOpenAI) -> None:
    started = asyncio.Event()

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with running_engine(_settings(llm)) as harness, mcp_client(harness.target) as client:
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
        run = await asyncio.wait_for(_stopped_run(harness), WAIT)
        assert run.status == pb.RUN_STATUS_INTERRUPTED
        # The connection still serves calls after the cancellation.
        listed = await client.call_tool("list_conversations", {})
        assert listed.structured_content["conversations"][0]["running"] is False
    assert llm.connection_closed.is_set()


async def _stopped_run(harness: Harness) -> pb.RunInfo:
    """The only run, once it has ended (followed through Subscribe, no polling)."""
    runs = await harness.stub.ListRuns(pb.ListRunsRequest())
    (run,) = runs.runs
    async for _ in harness.stub.Subscribe(
        pb.SubscribeRequest(session_id=run.session_id, until_idle=True)
    ):
        pass
    info: pb.RunInfo = await harness.stub.GetRun(pb.GetRunRequest(run_id=run.id))
    return info


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (None, "set AGENTIK_TOKEN"),
        ("wrong", "the token in AGENTIK_TOKEN was refused"),
        # What gRPC metadata cannot carry goes as an empty bearer, as from the facade.
        ("t\u00f6k\u00e9n", "the token in AGENTIK_TOKEN was refused"),
        ("x" * 9000, "the token in AGENTIK_TOKEN was refused"),
    ],
    ids=["missing", "wrong", "not-ascii", "too-long"],
)
async def test_a_missing_or_wrong_token_is_a_clear_mcp_error(
    llm: FakeOpenAI, token: str | None, says: str
) -> None:
    settings = _settings(llm, AGENTIK_TOKENS="alice:secret-a")
    async with running_engine(settings) as harness, mcp_client(harness.target, token) as client:
        for name, args in [
            ("send_message", {"text": "hi"}),
            ("list_conversations", {}),
            ("read_conversation", {"conversation_id": "x"}),
        ]:
            with pytest.raises(MCPError) as caught:
                await client.call_tool(name, args)
            assert caught.value.code == UNAUTHORIZED
            assert says in caught.value.message


async def test_each_token_sees_its_own_conversations(llm: FakeOpenAI) -> None:
    settings = _settings(llm, AGENTIK_TOKENS="alice:secret-a,bob:secret-b")
    async with running_engine(settings) as harness:
        async with mcp_client(harness.target, "secret-a") as alice:
            sent = await alice.call_tool("send_message", {"text": "mine"})
            assert not sent.is_error, _text(sent)
            conversation = sent.structured_content["conversation_id"]
        async with mcp_client(harness.target, "secret-b") as bob:
            listed = await bob.call_tool("list_conversations", {})
            assert listed.structured_content["conversations"] == []
            read = await bob.call_tool("read_conversation", {"conversation_id": conversation})
            assert read.is_error


async def test_an_engine_that_is_down_is_a_tool_error_naming_it() -> None:
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{probe.getsockname()[1]}"
    async with mcp_client(target) as client:
        result = await client.call_tool("list_conversations", {})
    assert result.is_error
    assert f"the agentik engine at {target} is unavailable" in _text(result)


async def test_a_turn_that_waits_for_a_person_says_so(llm: FakeOpenAI) -> None:
    settings = _settings(llm, AGENTIK_TOOLS_APPROVAL="calculate")
    async with running_engine(settings) as harness, mcp_client(harness.target) as client:
        result = await client.call_tool(
            "send_message", {"text": '[[tool:calculate {"expression": "6*7"}]]'}
        )
    assert not result.is_error
    assert result.structured_content["status"] == "input_required"
    assert "The agent waits for a person: " in _text(result)
    assert "calculate" in result.structured_content["detail"]


async def test_an_approval_is_given_through_the_answer_tool(llm: FakeOpenAI) -> None:
    settings = _settings(llm, AGENTIK_TOOLS_APPROVAL="calculate")
    async with running_engine(settings) as harness, mcp_client(harness.target) as client:
        paused = await client.call_tool(
            "send_message", {"text": '[[tool:calculate {"expression": "6*7"}]]'}
        )
        conversation = paused.structured_content["conversation_id"]
        [interrupt] = paused.structured_content["interrupts"]
        assert interrupt["kind"] == "approval"
        assert interrupt["tool_call"]["name"] == "calculate"
        assert interrupt["tool_call"]["arguments"] == {"expression": "6*7"}
        assert f"(interrupt_id {interrupt['id']})" in _text(paused)

        misspelled = await client.call_tool(
            "answer",
            {
                "conversation_id": conversation,
                "decisions": [{"interrupt_id": interrupt["id"], "aprove": True}],
            },
        )
        assert misspelled.is_error
        assert "decisions[0] has an unknown key 'aprove'" in _text(misspelled)
        # The engine's refusal too names the tool's own field, not the engine's resume[0].
        unknown = await client.call_tool(
            "answer",
            {
                "conversation_id": conversation,
                "decisions": [{"interrupt_id": "abc", "approve": True}],
            },
        )
        assert unknown.is_error
        assert _text(unknown).endswith(
            "INVALID_ARGUMENT: decisions[0].interrupt_id 'abc' is not pending in this conversation"
        ), _text(unknown)

        done = await client.call_tool(
            "answer",
            {
                "conversation_id": conversation,
                "decisions": [
                    {
                        "interrupt_id": interrupt["id"],
                        "approve": True,
                        "arguments": {"expression": "6*8"},
                    }
                ],
            },
        )
        assert not done.is_error, _text(done)
        assert done.structured_content["status"] == "completed"
        assert done.structured_content["answer"] == 'Result: {"expression": "6*8", "result": 48}'

        nothing = await client.call_tool(
            "answer",
            {
                "conversation_id": conversation,
                "decisions": [{"interrupt_id": "x", "approve": False}],
            },
        )
        assert nothing.is_error
        assert "decisions[0].interrupt_id 'x' is not pending" in _text(nothing)
        assert "waits for no answer" in _text(nothing)


async def test_a_question_is_answered_through_the_answer_tool(llm: FakeOpenAI) -> None:
    settings = _settings(llm, AGENTIK_TOOLS_ASK_USER="true")
    async with running_engine(settings) as harness, mcp_client(harness.target) as client:
        asked = await client.call_tool(
            "send_message", {"text": '[[tool:ask_user {"question": "Which colour?"}]]'}
        )
        assert asked.structured_content["status"] == "input_required"
        [interrupt] = asked.structured_content["interrupts"]
        assert interrupt["kind"] == "question" and interrupt["question"] == "Which colour?"
        answered = await client.call_tool(
            "answer",
            {
                "conversation_id": asked.structured_content["conversation_id"],
                "decisions": [{"interrupt_id": interrupt["id"], "answer": "blue"}],
            },
        )
    assert answered.structured_content["status"] == "completed", _text(answered)
    assert "blue" in answered.structured_content["answer"]
