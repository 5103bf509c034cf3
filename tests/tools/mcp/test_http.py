"""The demo MCP server over streamable HTTP and over SSE, in its own process on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from engine_service.core.events import Custom
from engine_service.core.models import ImagePart
from engine_service.core.registry import READY, ToolRegistry
from engine_service.tools.mcp.tool import DISCONNECTED, McpTool, SourceState
from tests.tools.mcp.servers import (
    WAIT,
    DemoHttpServer,
    Emitted,
    demo_http_server,
    running_source,
    tool_context,
)


@pytest.fixture(params=["http", "sse"])
async def demo(request: pytest.FixtureRequest) -> AsyncIterator[DemoHttpServer]:
    async with demo_http_server(request.param) as server:
        yield server


def _tool(registry: ToolRegistry, name: str) -> McpTool:
    tool = registry.get(name)
    assert isinstance(tool, McpTool), f"{name} is not registered"
    return tool


async def test_results_map_text_images_structured_content_and_errors(demo: DemoHttpServer) -> None:
    registry = ToolRegistry()
    async with running_source(demo.config(), registry) as source:
        assert "demo__slow" in registry.names() and "demo__image" in registry.names()
        assert source.protocol_version

        text = await _tool(registry, "demo__slow").call({"seconds": 0.05}, tool_context())
        assert (text.content, text.is_error, text.parts) == ("slept 0.05 s", False, [])

        image = await _tool(registry, "demo__image").call({}, tool_context())
        assert not image.is_error
        [part] = image.parts
        assert isinstance(part, ImagePart) and part.mime_type == "image/png"
        assert part.data.startswith(b"\x89PNG\r\n\x1a\n")
        assert "image/png" in image.content

        structured = await _tool(registry, "demo__structured").call({}, tool_context())
        assert json.loads(structured.content) == {"answer": 42, "unit": "none"}

        failed = await _tool(registry, "demo__fail").call({"message": "no luck"}, tool_context())
        assert failed.is_error
        assert failed.content.startswith("error: ") and failed.content.endswith("no luck")


async def test_progress_notifications_become_tool_progress_events(demo: DemoHttpServer) -> None:
    registry = ToolRegistry()
    emitted = Emitted()
    async with running_source(demo.config(), registry):
        slow = _tool(registry, "demo__slow")
        result = await slow.call({"seconds": 0.2}, tool_context(emitted, call_id="c7"))
    assert not result.is_error
    # Four notifications 50 ms apart, at most one event per 100 ms: the first goes out at
    # once, the last before the result, and those between may be replaced by later ones.
    steps = []
    for event in emitted.events:
        assert isinstance(event, Custom) and event.name == "tool_progress"
        step = int(event.value["progress"])
        assert event.value == {
            "tool_call_id": "c7",
            "progress": float(step),
            "total": 4.0,
            "message": f"step {step}",
        }
        steps.append(step)
    assert steps[0] == 0 and steps[-1] == 3
    assert steps == sorted(set(steps)) and len(steps) >= 2


async def test_a_changed_tool_list_is_picked_up_without_reconnecting(
    demo: DemoHttpServer,
) -> None:
    registry = ToolRegistry()
    async with running_source(demo.config(), registry) as source:
        grown = await _tool(registry, "demo__grow").call({"name": "added"}, tool_context())
        assert grown.content == "added added"
        await source.wait_until(lambda s: "demo__added" in registry.names(), within=WAIT)
        assert ("demo__added", "mcp:demo", READY) in registry.describe()
        added = await _tool(registry, "demo__added").call({}, tool_context())
        assert added.content == "added works"

        await _tool(registry, "demo__shrink").call({"name": "added"}, tool_context())
        await source.wait_until(lambda s: "demo__added" not in registry.names(), within=WAIT)
        assert "demo__added" not in registry
        assert source.connections == 1


async def test_a_timed_out_call_is_an_error_and_the_server_sees_the_cancellation(
    demo: DemoHttpServer,
) -> None:
    registry = ToolRegistry()
    async with running_source(demo.config(call_timeout=0.5), registry):
        async with asyncio.timeout(WAIT):
            result = await _tool(registry, "demo__slow").call({"seconds": 30}, tool_context())
        assert result.is_error and "timed out after 0.5 s" in result.content
        await demo.stderr.wait_for("cancelled")
        again = await _tool(registry, "demo__slow").call({"seconds": 0.05}, tool_context())
        assert not again.is_error


async def test_an_interrupted_call_is_cancelled_on_the_server(demo: DemoHttpServer) -> None:
    registry = ToolRegistry()
    async with running_source(demo.config(), registry):
        emitted = Emitted()
        slow = _tool(registry, "demo__slow")
        call = asyncio.create_task(slow.call({"seconds": 60}, tool_context(emitted)))
        await emitted.first()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await demo.stderr.wait_for("cancelled")


async def test_concurrent_calls_share_one_connection(demo: DemoHttpServer) -> None:
    registry = ToolRegistry()
    async with running_source(demo.config(), registry) as source:
        slow = _tool(registry, "demo__slow")
        calls = [
            slow.call({"seconds": 0.1 + i / 100}, tool_context(call_id=f"c{i}")) for i in range(8)
        ]
        async with asyncio.timeout(WAIT):
            results = await asyncio.gather(*calls)
        assert [r.content for r in results] == [f"slept {0.1 + i / 100:g} s" for i in range(8)]
        assert source.connections == 1


async def test_configured_headers_reach_the_server(demo: DemoHttpServer) -> None:
    registry = ToolRegistry()
    config = demo.config(headers={"X-Agentik-Test": "hello"})
    async with running_source(config, registry):
        result = await _tool(registry, "demo__header").call(
            {"name": "X-Agentik-Test"}, tool_context()
        )
    assert result.content == "hello"


async def test_a_dead_http_server_is_reconnected_when_it_comes_back(
    demo: DemoHttpServer,
) -> None:
    registry = ToolRegistry()
    async with running_source(demo.config(), registry) as source:
        await demo.kill()
        failed = await _tool(registry, "demo__slow").call({"seconds": 0.05}, tool_context())
        assert failed.is_error
        await source.wait_until(lambda s: s.state is not SourceState.READY, within=WAIT)
        assert {status for _, _, status in registry.describe()} == {DISCONNECTED}

        async with demo_http_server(demo.transport, port=demo.port):
            await source.wait_until(
                lambda s: s.state is SourceState.READY and s.connections == 2, within=WAIT
            )
            result = await _tool(registry, "demo__slow").call({"seconds": 0.05}, tool_context())
            assert not result.is_error
