"""Python functions named in ``[[tools.python]]``, called by the LLM in real turns."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.agentik.test_cli import ROOT, engine_env
from tests.engine.harness import (
    WAIT,
    collect,
    engine_settings,
    kind,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI
from tests.tools import sample_tools

SAMPLES = "tests.tools.sample_tools"


@pytest.fixture(autouse=True)
def fresh_events() -> Iterator[None]:
    for event in (sample_tools.started, sample_tools.release, sample_tools.cancelled):
        event.clear()
    yield
    sample_tools.release.set()  # a thread still blocked in wait_sync ends now


def config(tmp_path: Path, *tables: str) -> str:
    path = tmp_path / "agentik.toml"
    path.write_text("\n".join(f"[[tools.python]]\n{table}\n" for table in tables))
    return str(path)


def result_of(events: list[pb.Event]) -> pb.ToolCallResult:
    return next(e.tool_call_result for e in events if kind(e) == "tool_call_result")


async def test_the_llm_calls_a_configured_python_function_and_answers_with_its_result(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = config(tmp_path, f'function = "{SAMPLES}:forecast"\nname = "weather"')
    settings = engine_settings(
        AGENTIK_CONFIG=path, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k"
    )
    async with running_engine(settings) as harness:
        events = await collect(
            harness.stub.Run(
                pb.RunRequest(
                    session_id="py",
                    create_session=True,
                    messages=[user('weather? [[tool:weather {"city": "Lyon", "days": 2}]]')],
                )
            )
        )

    offered = [tool["function"] for tool in llm.requests[0]["tools"]]
    weather = next(tool for tool in offered if tool["name"] == "weather")
    assert weather["description"] == "Tomorrow's weather in a city."
    assert weather["parameters"]["required"] == ["city"]
    result = result_of(events)
    assert not result.is_error
    assert json.loads(result.content) == {"city": "Lyon", "celsius": 21.5, "sky": "sunny"}
    assert '"city":"Lyon"' in text_of(events)
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


async def test_bad_arguments_and_exceptions_reach_the_llm_as_tool_errors(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = config(tmp_path, f'function = "{SAMPLES}:divide"')
    settings = engine_settings(
        AGENTIK_CONFIG=path, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k"
    )
    async with running_engine(settings) as harness:
        by_zero = await collect(
            harness.stub.Run(
                pb.RunRequest(
                    session_id="zero",
                    create_session=True,
                    messages=[user('[[tool:divide {"a": 1, "b": 0}]]')],
                )
            )
        )
        wrong = await collect(
            harness.stub.Run(
                pb.RunRequest(
                    session_id="wrong",
                    create_session=True,
                    messages=[user('[[tool:divide {"a": "one"}]]')],
                )
            )
        )

    result = result_of(by_zero)
    assert result.is_error
    assert result.content == "error: ZeroDivisionError: float division by zero"
    result = result_of(wrong)
    assert result.is_error
    assert "argument 'a'" in result.content and "argument 'b'" in result.content
    assert llm.requests[-1]["messages"][-1]["content"] == result.content


@pytest.mark.parametrize("function", ["wait_sync", "wait_async"])
async def test_a_python_tool_past_its_timeout_is_a_tool_error(
    llm: FakeOpenAI, tmp_path: Path, function: str
) -> None:
    path = config(tmp_path, f'function = "{SAMPLES}:{function}"\ntimeout = 0.2')
    settings = engine_settings(
        AGENTIK_CONFIG=path, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k"
    )
    async with running_engine(settings) as harness:
        events = await collect(
            harness.stub.Run(
                pb.RunRequest(
                    session_id="slow",
                    create_session=True,
                    messages=[user(f"[[tool:{function} {{}}]]")],
                )
            )
        )

    result = result_of(events)
    assert result.is_error
    assert result.content == f"error: tool {function!r} timed out after 0.2 s"
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    if function == "wait_async":
        assert sample_tools.cancelled.is_set()


async def test_an_interrupt_cancels_a_running_async_python_tool(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = config(tmp_path, f'function = "{SAMPLES}:wait_async"')
    settings = engine_settings(
        AGENTIK_CONFIG=path, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k"
    )
    async with running_engine(settings) as harness:
        call = harness.stub.Run(
            pb.RunRequest(
                session_id="int", create_session=True, messages=[user("[[tool:wait_async {}]]")]
            )
        )
        async with asyncio.timeout(WAIT):
            await asyncio.to_thread(sample_tools.started.wait, WAIT)
            reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="int"))
            await asyncio.to_thread(sample_tools.cancelled.wait, WAIT)
        events = await collect(call)

    assert reply.interrupted
    assert sample_tools.cancelled.is_set()
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert result_of(events).is_error


def test_agentik_tools_lists_python_tools_with_source_python(tmp_path: Path) -> None:
    path = config(tmp_path, f'function = "{SAMPLES}:shout"\nname = "loud"')
    result = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "--config", path, "tools"],
        cwd=ROOT,
        env=engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^loud\s+python\s+ready\s+-$", result.stdout, re.MULTILINE), result.stdout


@pytest.mark.parametrize("command", ["engine", "tools"])
def test_a_python_tool_that_does_not_load_stops_the_command_naming_the_entry(
    tmp_path: Path, command: str
) -> None:
    path = config(tmp_path, f'function = "{SAMPLES}:shout"', f'function = "{SAMPLES}:untyped"')
    result = subprocess.run(
        [sys.executable, "-m", "agentik.cli", "--config", path, command],
        cwd=ROOT,
        env=engine_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert result.returncode == 2
    assert (
        f"agentik: configuration error: [[tools.python]] entry 2 ({SAMPLES}:untyped): "
        "parameter 'x' has no type annotation"
    ) in result.stderr
