"""The offline model demos every kind of tool in real runs, no LLM: ``use TOOL {json}`` calls
a configured Python function and a real MCP server's tool; naming a tool calls it too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from agentik.config import McpSettings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import collect, engine_settings, kind, running_engine, text_of, user
from tests.tools.mcp.servers import WAIT, time_config

SAMPLES = "tests.tools.sample_tools"


def run(session_id: str, text: str) -> pb.RunRequest:
    return pb.RunRequest(session_id=session_id, create_session=True, messages=[user(text)])


def results(events: list[pb.Event]) -> list[pb.ToolCallResult]:
    return [e.tool_call_result for e in events if kind(e) == "tool_call_result"]


def python_tool_config(tmp_path: Path) -> str:
    path = tmp_path / "agentik.toml"
    path.write_text(f'[[tools.python]]\nfunction = "{SAMPLES}:forecast"\nname = "weather"\n')
    return str(path)


async def test_use_tool_json_calls_a_python_function_with_the_offline_model(
    tmp_path: Path,
) -> None:
    settings = engine_settings(AGENTIK_CONFIG=python_tool_config(tmp_path))
    async with running_engine(settings) as harness:
        assert harness.server.engine.model.name == "offline"
        events = await collect(
            harness.stub.Run(run("py", 'use weather {"city": "Lyon", "days": 2}'))
        )

    [result] = results(events)
    assert not result.is_error
    assert json.loads(result.content) == {"city": "Lyon", "celsius": 21.5, "sky": "sunny"}
    assert text_of(events).startswith("weather returned: {")
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


async def test_naming_a_python_tool_calls_it_with_arguments_from_the_message(
    tmp_path: Path,
) -> None:
    settings = engine_settings(AGENTIK_CONFIG=python_tool_config(tmp_path))
    async with running_engine(settings) as harness:
        events = await collect(harness.stub.Run(run("named", "the weather in city: Oslo")))

    [result] = results(events)
    assert json.loads(result.content)["city"] == "Oslo"


async def test_use_tool_json_calls_an_mcp_servers_tool_with_the_offline_model() -> None:
    settings = dataclasses.replace(engine_settings(), mcp=McpSettings(servers=(time_config(),)))
    async with running_engine(settings) as harness:
        await harness.server.mcp["time"].wait_ready(within=WAIT)
        events = await collect(
            harness.stub.Run(run("mcp", 'use time__get_current_time {"timezone": "Asia/Tokyo"}'))
        )

    [result] = results(events)
    assert not result.is_error
    assert json.loads(result.content)["timezone"] == "Asia/Tokyo"
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
