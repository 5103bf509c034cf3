"""``max_message_bytes``: one message from an MCP server, over stdio and over HTTP."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import pytest

from engine_service.core.registry import ToolRegistry
from engine_service.tools.mcp.stdio import LineTooLong, StdoutLines
from engine_service.tools.mcp.tool import McpTool, SourceState
from tests.tools.mcp.servers import (
    WAIT,
    DemoHttpServer,
    demo_http_server,
    demo_stdio_config,
    raw_stdio_config,
    running_source,
    tool_context,
)

LIMIT = 256 * 1024


def _tool(registry: ToolRegistry, name: str) -> McpTool:
    tool = registry.get(name)
    assert isinstance(tool, McpTool), f"{name} is not registered"
    return tool


class LoopLag:
    """The longest the event loop went without running a 10 ms ticker, while running."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def test_lines_are_split_across_chunks_and_a_long_one_is_refused() -> None:
    lines = StdoutLines(limit=10)
    assert lines.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert lines.feed(b":2}\n\n") == [b'{"b":2}', b""]
    assert lines.feed(b"0123456789") == []
    with pytest.raises(LineTooLong, match=r"over 10 bytes \(max_message_bytes\)"):
        lines.feed(b"x")
    with pytest.raises(LineTooLong):
        StdoutLines(limit=10).feed(b"0123456789ab\n")


async def test_a_stdio_line_over_the_limit_drops_the_connection_and_the_server_is_respawned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry()
    config = raw_stdio_config(max_message_bytes=LIMIT)
    async with running_source(config, registry) as source:
        first_pid = (await _tool(registry, "raw__pid").call({}, tool_context())).content
        async with asyncio.timeout(WAIT):
            result = await _tool(registry, "raw__bigline").call({"size": 4 * LIMIT}, tool_context())
        assert result.is_error
        assert result.content == (
            "error: MCP server 'raw' disconnected during the call (the server sent a "
            f"message over {LIMIT} bytes (max_message_bytes)); reconnecting"
        )
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any(
            "MCP server 'raw'" in line and f"over {LIMIT} bytes (max_message_bytes)" in line
            for line in logged
        ), logged

        await source.wait_until(
            lambda s: s.connections >= 2 and s.state is SourceState.READY, within=WAIT
        )
        second_pid = await _tool(registry, "raw__pid").call({}, tool_context())
        assert not second_pid.is_error and second_pid.content != first_pid


async def test_a_well_formed_answer_over_the_limit_is_refused_one_under_it_is_read() -> None:
    # The SDK's server sends the text twice (content and structured content).
    registry = ToolRegistry()
    config = demo_stdio_config(max_message_bytes=LIMIT)
    async with running_source(config, registry) as source:
        under = await _tool(registry, "demo__big").call({"size": LIMIT // 4}, tool_context())
        assert not under.is_error and under.content == "y" * (LIMIT // 4)
        over = await _tool(registry, "demo__big").call({"size": LIMIT}, tool_context())
        assert over.is_error and f"over {LIMIT} bytes (max_message_bytes)" in over.content
        await source.wait_until(
            lambda s: s.connections >= 2 and s.state is SourceState.READY, within=WAIT
        )


async def test_reading_a_long_stdio_line_keeps_the_engine_responsive() -> None:
    """The SDK's reader took 1.7 s of the loop for a 16 MiB line (quadratic copying)."""
    registry = ToolRegistry()
    size = 24 * 1024 * 1024
    async with running_source(raw_stdio_config(), registry):
        with LoopLag() as lag:
            cpu = time.process_time()
            async with asyncio.timeout(WAIT):
                result = await _tool(registry, "raw__bigline").call({"size": size}, tool_context())
            cpu = time.process_time() - cpu
    assert result.is_error and "over 16777216 bytes (max_message_bytes)" in result.content
    assert cpu < 1.0, f"{cpu:.2f} s of CPU to read {size} bytes"
    # A loose bound on a shared box: the quadratic reader stalled it 7.6 s for 32 MiB.
    assert lag.longest < 2.0, f"the loop stalled {lag.longest:.2f} s"


@pytest.fixture(params=["json", "events"])
async def http_demo(request: pytest.FixtureRequest) -> AsyncIterator[DemoHttpServer]:
    options = ["--json"] if request.param == "json" else []
    async with demo_http_server("http", 0, *options) as server:
        yield server


async def test_an_http_answer_over_the_limit_is_an_error_result(
    http_demo: DemoHttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A JSON body over the limit fails its call only; an event over it (the SDK's
    ``max_sse_event_size``) ends the call's stream, and the source reconnects."""
    registry = ToolRegistry()
    async with running_source(http_demo.config(max_message_bytes=LIMIT), registry) as source:
        under = await _tool(registry, "demo__big").call({"size": LIMIT // 4}, tool_context())
        assert not under.is_error and len(under.content) == LIMIT // 4
        async with asyncio.timeout(WAIT):
            over = await _tool(registry, "demo__big").call({"size": 2 * LIMIT}, tool_context())
        assert over.is_error
        if "--json" in http_demo.options:
            assert over.content == (
                f"error: MCP server 'demo' sent an answer over {LIMIT} bytes (max_message_bytes)"
            )
        else:
            assert over.content == (
                "error: MCP server 'demo' disconnected during the call (the server sent an "
                f"event over {LIMIT} bytes (max_message_bytes)); reconnecting"
            )
            await source.wait_until(lambda s: s.connections >= 2, within=WAIT)
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert any(f"over {LIMIT} bytes (max_message_bytes)" in line for line in logged)
        await source.wait_ready(within=WAIT)
        after = await _tool(registry, "demo__big").call({"size": 10}, tool_context())
        assert (after.is_error, after.content) == (False, "y" * 10)
