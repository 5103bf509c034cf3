"""MCP tools in whole runs: a real engine over gRPC, a fake LLM, real MCP servers."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from agentik.cli import main
from agentik.config import McpServerConfig, McpSettings, Settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.tools.mcp.servers import WAIT, demo_stdio_config, stderr_of, time_config


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _settings(llm: FakeOpenAI, *servers: McpServerConfig) -> Settings:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k", AGENTIK_LLM_MAX_RETRIES="0"
    )
    return dataclasses.replace(settings, mcp=McpSettings(servers=servers))


def _run(thread_id: str, text: str) -> pb.RunRequest:
    return pb.RunRequest(session_id=thread_id, create_session=True, messages=[user(text)])


def _result(events: list[pb.Event]) -> pb.ToolCallResult:
    return next(e.tool_call_result for e in events if kind(e) == "tool_call_result")


async def test_the_llm_calls_an_mcp_tool_and_answers_with_its_result(llm: FakeOpenAI) -> None:
    call = FakeToolCall("time__get_current_time", {"timezone": "Asia/Tokyo"}, id="t1")
    llm.enqueue(FakeReply(tool_calls=[call]))
    async with running_engine(_settings(llm, time_config())) as harness:
        await harness.server.mcp["time"].wait_ready(within=WAIT)
        events = await collect(harness.stub.Run(_run("mcp-time", "What time is it in Tokyo?")))

    assert kinds(events)[-1] == "run_finished"
    result = _result(events)
    assert result.tool_call_id == "t1" and not result.is_error
    assert json.loads(result.content)["timezone"] == "Asia/Tokyo"
    assert text_of(events) == f"Result: {result.content}"
    offered = {tool["function"]["name"]: tool["function"] for tool in llm.requests[0]["tools"]}
    assert "timezone" in offered["time__get_current_time"]["parameters"]["properties"]
    assert "time__convert_time" in offered and "current_time" in offered


async def test_interrupting_a_run_cancels_its_mcp_call_on_the_server(llm: FakeOpenAI) -> None:
    call = FakeToolCall("demo__slow", {"seconds": 60}, id="slow1")
    llm.enqueue(FakeReply(tool_calls=[call]))
    with stderr_of("demo") as stderr:
        async with running_engine(_settings(llm, demo_stdio_config())) as harness:
            await harness.server.mcp["demo"].wait_ready(within=WAIT)
            run = harness.stub.Run(_run("mcp-interrupt", "slowly"))
            seen = [await next_event(run)]
            while kind(seen[-1]) != "custom":
                seen.append(await next_event(run))
            reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="mcp-interrupt"))
            events = seen + await collect(run)
            await stderr.wait_for("cancelled")
            assert harness.server.mcp["demo"].connections == 1

    assert reply.interrupted
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert _result(events).is_error
    progress = seen[-1].custom
    assert progress.name == "tool_progress"
    value = json_format.MessageToDict(progress.value)
    assert value["tool_call_id"] == "slow1"
    assert value["progress"] == 0 and value["message"] == "step 0" and value["total"] > 0


async def test_an_mcp_call_past_its_timeout_is_an_error_result_not_a_failed_run(
    llm: FakeOpenAI,
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("demo__slow", {"seconds": 30}, id="s")]))
    server = demo_stdio_config(call_timeout=0.5)
    async with running_engine(_settings(llm, server)) as harness:
        await harness.server.mcp["demo"].wait_ready(within=WAIT)
        events = await collect(harness.stub.Run(_run("mcp-timeout", "slowly")))

    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    result = _result(events)
    assert result.is_error and "timed out after 0.5 s" in result.content
    assert text_of(events).startswith("Result: error:")


async def test_an_engine_whose_mcp_server_fails_to_start_still_serves_runs(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    broken = demo_stdio_config(name="broken", command=str(tmp_path / "no-such-server"))
    async with running_engine(_settings(llm, broken)) as harness:
        source = harness.server.mcp["broken"]
        await source.wait_until(lambda s: s.attempts >= 1, within=WAIT)
        events = await collect(harness.stub.Run(_run("mcp-broken", "hello")))

        assert text_of(events) == "Echo: hello"
        assert "cannot start" in source.describe()
        offered = [tool["function"]["name"] for tool in llm.requests[0]["tools"]]
        assert not [name for name in offered if name.startswith("broken__")]


def test_agentik_tools_lists_mcp_tools_and_says_why_a_server_is_absent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    time = time_config()
    config = tmp_path / "agentik.toml"
    config.write_text(
        "[[mcp.servers]]\n"
        'name = "time"\n'
        f"command = {json.dumps(time.command)}\n"
        f"args = {json.dumps(list(time.args))}\n"
        "\n"
        "[[mcp.servers]]\n"
        'name = "broken"\n'
        f"command = {json.dumps(str(tmp_path / 'no-such-server'))}\n",
        encoding="utf-8",
    )
    assert main(["--config", str(config), "tools"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines]
    assert ["time__get_current_time", "mcp:time", "ready", "-"] in rows
    assert ["current_time", "native", "ready", "-"] in rows
    broken = next(line for line in lines if line.startswith("broken "))
    assert "unavailable: cannot start" in broken and "No such file or directory" in broken
    assert any(line.startswith("time ") and "ready (2 tools" in line for line in lines)


async def test_an_mcp_image_reaches_the_client_as_an_image_part(llm: FakeOpenAI) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("demo__image", {}, id="img")]))
    async with running_engine(_settings(llm, demo_stdio_config())) as harness:
        await harness.server.mcp["demo"].wait_ready(within=WAIT)
        events = await collect(harness.stub.Run(_run("mcp-image", "a picture please")))
        stored = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="mcp-image"))

    result = _result(events)
    assert not result.is_error and "image/png" in result.content
    [part] = result.parts
    assert part.image.mime_type == "image/png"
    assert part.image.data.startswith(b"\x89PNG\r\n\x1a\n")
    tool_message = next(m for m in stored.messages if m.role == pb.ROLE_TOOL)
    assert [p.WhichOneof("part") for p in tool_message.content] == ["text", "image"]
