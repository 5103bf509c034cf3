"""A call's progress notifications: one event per PROGRESS_EVERY at most, the latest one,
the last before the result, and no more than ``max_progress_events``."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from engine_service.core.events import Custom
from engine_service.core.registry import ToolRegistry
from engine_service.tools.mcp.progress import PROGRESS_EVERY
from engine_service.tools.mcp.tool import McpTool
from tests.tools.mcp.servers import WAIT, Emitted, demo_stdio_config, running_source, tool_context

FLOOD = 3_000


def _tool(registry: ToolRegistry, name: str) -> McpTool:
    tool = registry.get(name)
    assert isinstance(tool, McpTool), f"{name} is not registered"
    return tool


def _steps(emitted: Emitted) -> list[int]:
    steps = []
    for event in emitted.events:
        assert isinstance(event, Custom) and event.name == "tool_progress"
        progress = event.value["progress"]
        assert isinstance(progress, float)
        assert event.value == {
            "tool_call_id": "call-1",
            "progress": progress,
            "total": float(FLOOD),
            "message": f"step {int(progress)}",
        }
        steps.append(int(progress))
    return steps


async def test_a_flood_of_progress_is_coalesced_and_the_last_one_comes_before_the_result() -> None:
    registry = ToolRegistry()
    emitted = Emitted()
    async with running_source(demo_stdio_config(), registry):
        started = time.monotonic()
        async with asyncio.timeout(WAIT):
            result = await _tool(registry, "demo__flood").call({"n": FLOOD}, tool_context(emitted))
        took = time.monotonic() - started
    assert (result.is_error, result.content) == (False, f"sent {FLOOD}")
    steps = _steps(emitted)
    assert steps[0] == 0 and steps[-1] == FLOOD - 1
    assert steps == sorted(set(steps))
    assert len(steps) <= took / PROGRESS_EVERY + 2, f"{len(steps)} events in {took:.2f} s"


async def test_progress_past_max_progress_events_is_dropped_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry()
    emitted = Emitted()
    config = demo_stdio_config(max_progress_events=2)
    async with running_source(config, registry):
        async with asyncio.timeout(WAIT):
            result = await _tool(registry, "demo__flood").call({"n": FLOOD}, tool_context(emitted))
    assert not result.is_error
    assert len(_steps(emitted)) == 2
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(
        line.startswith("MCP tool 'flood' of server 'demo': ")
        and "progress notifications dropped past max_progress_events (2)" in line
        for line in logged
    ), logged


async def test_no_progress_event_follows_a_cancelled_call() -> None:
    registry = ToolRegistry()
    emitted = Emitted()
    async with running_source(demo_stdio_config(), registry):
        call = asyncio.create_task(
            _tool(registry, "demo__slow").call({"seconds": 60}, tool_context(emitted))
        )
        await emitted.first()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        count = len(emitted.events)
        # A later call that lasts longer than a throttle interval: a notification of the
        # cancelled call still waiting would have gone out meanwhile.
        later = await _tool(registry, "demo__slow").call({"seconds": 0.3}, tool_context())
        assert not later.is_error
        assert len(emitted.events) == count
