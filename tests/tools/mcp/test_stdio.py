"""MCP servers over stdio: mcp-server-time and the demo server, as real subprocesses."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest

from engine_service.core.events import Custom
from engine_service.core.registry import READY, ToolRegistry
from engine_service.tools.mcp.tool import DISCONNECTED, McpTool, McpToolSource, SourceState
from tests.tools.mcp.servers import (
    WAIT,
    Emitted,
    demo_stdio_config,
    running_source,
    stderr_of,
    time_config,
    tool_context,
)


def _tool(registry: ToolRegistry, name: str) -> McpTool:
    tool = registry.get(name)
    assert isinstance(tool, McpTool), f"{name} is not registered"
    return tool


async def test_the_time_servers_tools_are_registered_under_the_server_prefix() -> None:
    registry = ToolRegistry()
    async with running_source(time_config(), registry) as source:
        assert set(registry.names()) == {"time__get_current_time", "time__convert_time"}
        assert ("time__get_current_time", "mcp:time", READY) in registry.describe()
        tool = _tool(registry, "time__get_current_time")
        assert tool.parameters["type"] == "object"
        assert "timezone" in tool.parameters["properties"]
        assert tool.description
        assert source.describe().startswith("ready (2 tools")
    assert registry.names() == []


async def test_a_time_call_returns_the_servers_json_text() -> None:
    registry = ToolRegistry()
    async with running_source(time_config(), registry):
        tool = _tool(registry, "time__get_current_time")
        result = await tool.call({"timezone": "Europe/Berlin"}, tool_context())
    assert not result.is_error
    assert json.loads(result.content)["timezone"] == "Europe/Berlin"


async def test_a_tool_error_of_the_server_is_an_error_result_the_llm_reads() -> None:
    registry = ToolRegistry()
    async with running_source(time_config(), registry):
        tool = _tool(registry, "time__get_current_time")
        result = await tool.call({"timezone": "Nowhere/Nothing"}, tool_context())
    assert result.is_error
    assert result.content.startswith("error: ") and "Invalid timezone" in result.content


async def test_the_allow_list_offers_only_the_named_tools() -> None:
    registry = ToolRegistry()
    async with running_source(time_config(tools=("convert_time", "missing")), registry):
        assert registry.names() == ["time__convert_time"]
    assert registry.names() == []


async def test_a_stdio_servers_stderr_goes_to_its_logger_not_the_terminal(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    registry = ToolRegistry()
    caplog.set_level(logging.INFO, logger="engine_service.tools.mcp.demo.stderr")
    async with running_source(demo_stdio_config(), registry):
        result = await _tool(registry, "demo__shout").call(
            {"text": "a marker line"}, tool_context()
        )
    assert result.content == "shouted"
    records = [r for r in caplog.records if r.name == "engine_service.tools.mcp.demo.stderr"]
    assert "a marker line" in [r.getMessage() for r in records]
    assert "a marker line" not in capfd.readouterr().err


async def test_a_stdio_server_gets_only_the_configured_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AGENTIK_TEST_SECRET", "engine-only")
    config = demo_stdio_config(env={"GIVEN": "to-the-server"})
    registry = ToolRegistry()
    async with running_source(config, registry):
        env = _tool(registry, "demo__env")
        assert (await env.call({"name": "GIVEN"}, tool_context())).content == "to-the-server"
        unset = await env.call({"name": "AGENTIK_TEST_SECRET"}, tool_context())
        assert unset.content == "<unset>"
        # The engine's PATH, and this Python's bin directory if it is not on it (make run).
        here = os.path.dirname(sys.executable)
        path = os.environ["PATH"]
        expected = path if here in path.split(os.pathsep) else f"{path}{os.pathsep}{here}"
        assert (await env.call({"name": "PATH"}, tool_context())).content == expected


async def test_killing_the_server_fails_the_call_in_flight_and_a_later_call_succeeds() -> None:
    registry = ToolRegistry()
    async with running_source(demo_stdio_config(), registry) as source:
        first_pid = int((await _tool(registry, "demo__pid").call({}, tool_context())).content)
        emitted = Emitted()
        slow = _tool(registry, "demo__slow")
        call = asyncio.create_task(slow.call({"seconds": 60}, tool_context(emitted)))
        await emitted.first()
        os.kill(first_pid, signal.SIGKILL)
        async with asyncio.timeout(WAIT):
            result = await call
        assert result.is_error
        assert "disconnected during the call" in result.content

        await source.wait_until(
            lambda s: s.connections >= 2 and s.state is SourceState.READY, within=WAIT
        )
        second = await _tool(registry, "demo__pid").call({}, tool_context())
        assert not second.is_error
        assert int(second.content) != first_pid


async def test_while_the_server_is_away_its_tools_are_listed_as_disconnected() -> None:
    registry = ToolRegistry()
    async with running_source(demo_stdio_config(), registry) as source:
        pid = int((await _tool(registry, "demo__pid").call({}, tool_context())).content)
        os.kill(pid, signal.SIGKILL)
        await source.wait_until(lambda s: s.state is not SourceState.READY, within=WAIT)
        assert registry.specs() == []
        assert {status for _, _, status in registry.describe()} == {DISCONNECTED}
        result = await _tool(registry, "demo__pid").call({}, tool_context())
        assert result.is_error and "not connected" in result.content
        await source.wait_ready(within=WAIT)
        assert {status for _, _, status in registry.describe()} == {READY}


async def test_a_call_past_the_servers_call_timeout_is_an_error_and_the_server_cancels_it() -> None:
    registry = ToolRegistry()
    config = demo_stdio_config(call_timeout=0.5)
    with stderr_of("demo") as stderr:
        async with running_source(config, registry):
            tool = _tool(registry, "demo__slow")
            assert tool.timeout is not None and tool.timeout > 0.5
            async with asyncio.timeout(WAIT):
                result = await tool.call({"seconds": 30}, tool_context())
            assert result.is_error
            assert "timed out after 0.5 s" in result.content
            await stderr.wait_for("cancelled")


async def test_cancelling_the_calling_task_sends_the_server_a_cancellation() -> None:
    registry = ToolRegistry()
    with stderr_of("demo") as stderr:
        async with running_source(demo_stdio_config(), registry) as source:
            emitted = Emitted()
            slow = _tool(registry, "demo__slow")
            call = asyncio.create_task(slow.call({"seconds": 60}, tool_context(emitted)))
            progress = await emitted.first()
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            await stderr.wait_for("cancelled")
            after = await _tool(registry, "demo__slow").call({"seconds": 0.05}, tool_context())
            assert not after.is_error
            assert (source.state, source.connections) == (SourceState.READY, 1)
        assert isinstance(progress, Custom) and progress.name == "tool_progress"
        assert progress.value == {
            "tool_call_id": "call-1",
            "progress": 0.0,
            "total": progress.value["total"],
            "message": "step 0",
        }


async def test_a_server_that_cannot_start_is_reported_and_retried(tmp_path: Path) -> None:
    registry = ToolRegistry()
    config = demo_stdio_config(name="broken", command=str(tmp_path / "missing"))
    source = McpToolSource(config, registry, default_call_timeout=1.0)
    source.start()
    try:
        await source.wait_until(lambda s: s.attempts >= 2, within=WAIT)
        assert source.state is SourceState.UNAVAILABLE
        assert "cannot start" in source.describe()
        assert "No such file or directory" in source.describe()
        assert registry.names() == []
    finally:
        await source.stop()
    assert source.describe() == "stopped"


async def test_a_server_that_exits_at_once_is_reported_with_its_last_stderr_line() -> None:
    script = "import sys; print('missing API key', file=sys.stderr); sys.exit(3)"
    config = demo_stdio_config(name="crashy", args=("-c", script))
    source = McpToolSource(config, ToolRegistry(), default_call_timeout=1.0)
    source.start()
    try:
        await source.wait_until(lambda s: s.attempts >= 1, within=WAIT)
        assert "the server closed the connection" in source.reason
        assert "missing API key" in source.reason
    finally:
        await source.stop()
