"""``max_tools`` and ``max_tool_bytes``: how much of a server's tool list is offered."""

from __future__ import annotations

import logging

import pytest

from engine_service.core.registry import ToolRegistry
from tests.tools.mcp.servers import demo_stdio_config, running_source


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_server_listing_more_than_max_tools_has_only_its_first_ones_offered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry()
    args = (*demo_stdio_config().args, "--extra-tools", "300")
    async with running_source(demo_stdio_config(args=args, max_tools=20), registry):
        names = registry.names()
    assert len(names) == 20
    assert any(
        "MCP server 'demo' offers more than 20 tools (max_tools): only its first 20" in line
        for line in _errors(caplog)
    ), _errors(caplog)


async def test_the_allow_list_picks_tools_beyond_max_tools(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry()
    args = (*demo_stdio_config().args, "--extra-tools", "300")
    config = demo_stdio_config(args=args, max_tools=2, tools=("extra_299", "extra_150"))
    async with running_source(config, registry):
        assert sorted(registry.names()) == ["demo__extra_150", "demo__extra_299"]
    assert _errors(caplog) == []


async def test_a_tool_over_max_tool_bytes_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    registry = ToolRegistry()
    args = (*demo_stdio_config().args, "--wordy", "5000")
    async with running_source(demo_stdio_config(args=args, max_tool_bytes=4096), registry):
        names = registry.names()
    assert "demo__pid" in names and "demo__wordy" not in names
    assert any(
        line.startswith("MCP tool 'wordy' of server 'demo' is not offered")
        and "over max_tool_bytes (4096)" in line
        for line in _errors(caplog)
    ), _errors(caplog)
