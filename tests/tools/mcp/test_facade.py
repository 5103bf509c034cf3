"""End to end: the user configures mcp-server-time, and a turn through the HTTP facade uses it."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import SseStream, Stack

CONNECTED = re.compile(r"MCP server 'time' connected .*: (\d+) tools")


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def time_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("mcp-stack")
    config = logs / "agentik.toml"
    config.write_text(
        "[[mcp.servers]]\n"
        'name = "time"\n'
        f"command = {json.dumps(sys.executable)}\n"
        'args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]\n'
    )
    running = Stack(llm, logs, AGENTIK_CONFIG=str(config))
    yield running
    running.stop()


def test_a_turn_through_the_facade_calls_an_mcp_tool_and_answers_with_its_result(
    time_stack: Stack, llm: FakeOpenAI
) -> None:
    tools = int(time_stack.engine.wait_for_log(CONNECTED))
    assert tools >= 1
    with time_stack.client() as http:
        conversation = http.post("/agentik/conversations", json={"title": "mcp"}).json()["id"]
        directive = '[[tool:time__get_current_time {"timezone": "Europe/Paris"}]]'
        sender = SseStream(
            http,
            "POST",
            f"/agentik/conversations/{conversation}/send",
            json={"text": f"what time is it in Paris? {directive}"},
        )
        events = sender.read_to_end()
        sender.close()

    offered = {t["function"]["name"] for t in llm.requests[-2]["tools"]}
    assert "time__get_current_time" in offered
    start = next(e.data for e in events if e.type == "tool_call_start")
    assert start is not None and start["name"] == "time__get_current_time"
    result = next(e.data for e in events if e.type == "tool_call_result")
    assert result is not None and not result.get("is_error")
    assert "Europe/Paris" in result["content"]
    answer = "".join(e.data["text"] for e in events if e.type == "append_text" and e.data)
    assert "Result: " in answer and "Europe/Paris" in answer.split("Result: ", 1)[1]
    assert events[-1].type == "end"
