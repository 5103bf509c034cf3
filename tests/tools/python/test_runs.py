"""Python functions named in ``[[tools.python]]``, called by the LLM in real turns."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
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
from tests.engine.test_metrics import scrape
from tests.fakes.fake_openai import FakeOpenAI
from tests.tools import sample_tools

SAMPLES = "tests.tools.sample_tools"


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


async def test_a_python_tool_with_max_stranded_calls_running_is_refused_and_counted(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    table = f'function = "{SAMPLES}:wait_sync"\ntimeout = 0.2\nmax_stranded_calls = 1'
    settings = engine_settings(
        AGENTIK_CONFIG=config(tmp_path, table),
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="k",
        AGENTIK_METRICS_ADDR="127.0.0.1:0",
    )
    stranded = ("agentik_python_tool_stranded_calls", frozenset({("tool", "wait_sync")}))

    async def turn(session_id: str) -> pb.ToolCallResult:
        request = pb.RunRequest(
            session_id=session_id, create_session=True, messages=[user("[[tool:wait_sync {}]]")]
        )
        return result_of(await collect(harness.stub.Run(request)))

    async with running_engine(settings) as harness:
        assert (await scrape(harness))[stranded] == 0
        timed_out = await turn("first")
        assert (await scrape(harness))[stranded] == 1
        refused = await turn("second")

        sample_tools.release.set()  # the stranded thread returns: its slot is free again
        for thread in threading.enumerate():
            if thread.name == "python-tool-wait_sync":
                thread.join(WAIT)
        assert (await scrape(harness))[stranded] == 0
        again = await turn("third")

    assert timed_out.content == "error: tool 'wait_sync' timed out after 0.2 s"
    assert refused.is_error
    assert refused.content == (
        "error: tool 'wait_sync' not started: 1 earlier call is still running after a timeout "
        "or an interrupt ([[tools.python]] max_stranded_calls = 1); try again later"
    )
    assert (again.is_error, again.content) == (False, "released")


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
