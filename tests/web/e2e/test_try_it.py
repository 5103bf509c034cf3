"""The README's "try it" lines each work with `make run` alone: the offline model, no LLM,
no configuration. Each line is sent through ``/agentik`` as a user would type it."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import ROOT, WAIT, Stack

# The stack's fixtures: the fake LLM for the module (unused by these engines: offline).
from tests.web.e2e.conftest import llm as llm

pytestmark = [pytest.mark.processes]

README = (ROOT / "README.md").read_text()


def try_it_lines() -> list[tuple[str, str]]:
    """``(message, expectation)`` for each line of the README's try-it block."""
    block = README.split("<!-- try-it", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = []
    for line in block.splitlines():
        message, _, expectation = line.partition("  #")
        lines.append((message.strip(), expectation.strip()))
    return lines


def test_the_readme_has_try_it_lines() -> None:
    assert len(try_it_lines()) >= 4


@pytest.fixture(scope="module")
def offline(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """`make run`'s engine: no LLM configured, so the offline model."""
    running = Stack(llm, tmp_path_factory.mktemp("try-it"), OPENAI_BASE_URL="", OPENAI_API_KEY="")
    yield running
    running.stop()


def send(stack: Stack, text: str) -> tuple[list[dict[str, Any]], float]:
    """The events of one turn, and how long it took to stream."""
    with stack.client() as http:
        conversation_id = http.post("/agentik/conversations", json={}).json()["id"]
        started = time.monotonic()
        events: list[dict[str, Any]] = []
        body = {"content": [{"type": "text", "text": text}]}
        with http.stream(
            "POST", f"/agentik/conversations/{conversation_id}/send", json=body
        ) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[len("data: ") :]))
        return events, time.monotonic() - started


@pytest.mark.parametrize(("message", "expectation"), try_it_lines())
def test_each_try_it_line_does_what_the_readme_says(
    offline: Stack, message: str, expectation: str
) -> None:
    events, took = send(offline, message)

    assert events[-1]["type"] == "end" and events[-1]["outcome"] == "success", events[-1]
    called = [e["name"] for e in events if e["type"] == "tool_call_start"]
    results = [e for e in events if e["type"] == "tool_call_result"]
    text = "".join(e["text"] for e in events if e["type"] == "append_text")
    if calls := re.match(r"calls (\w+)", expectation):
        assert called == [calls.group(1)], (message, text)
        assert results and not any(r["is_error"] for r in results), results
        assert text, "the result is answered in a sentence"
    else:
        assert expectation.startswith("streams for about 6 s"), expectation
        assert called == [], called
        assert text.endswith("nineteen, twenty.")
        assert 3.0 <= took < WAIT
