"""Human in the loop judged by ``@ag-ui/client``: its ``HttpAgent`` against the live facade
under gunicorn (engine process with the offline model, ``calculate`` gated, ``ask_user``
offered). Each scenario runs until the interrupt outcome, then runs again with ``resume``;
every run must pass the client's validation, end with a terminal event and cause no client
warning. Skipped without node and ``npm ci`` in tests/node, except where AGENTIK_REQUIRE_NODE
is set (CI), where that is a failure."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.node_tools import NODE_DIR, node_or_skip
from tests.web.agui.node_scenarios import run_scenario
from tests.web.e2e.conftest import Stack

SCRIPT = NODE_DIR / "agui_hitl.mjs"
HITL = {
    "AGENTIK_TOOLS_APPROVAL": "calculate",
    "AGENTIK_TOOLS_ASK_USER": "true",
    # No LLM endpoint: the engine answers with its deterministic offline model.
    "OPENAI_BASE_URL": "",
    "OPENAI_API_KEY": "",
}


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Skip before any test scripts the shared fake LLM: replies a skipped test enqueued
    # would be taken by the next test's run.
    node_or_skip("@ag-ui/client")
    running = Stack(llm, tmp_path_factory.mktemp("agui-hitl-stack"), **HITL)
    yield running
    running.stop()


def _scenario(stack: Stack, name: str) -> dict[str, Any]:
    """Run one scenario of agui_hitl.mjs; every run in it must pass the client."""
    return run_scenario(SCRIPT, stack, name, f"hitl-{uuid.uuid4().hex}")


def _interrupted(run: dict[str, Any], reason: str) -> dict[str, Any]:
    """The one interrupt a first run ended with, as the client handed it over."""
    assert run["finished"]["outcome"] == "interrupt"
    interrupt: dict[str, Any]
    (interrupt,) = run["finished"]["interrupts"]
    assert interrupt["reason"] == reason
    assert run["pendingInterrupts"] == [interrupt["id"]]
    assert run["toolResults"] == []
    (call,) = run["toolCalls"]
    assert call["id"] == interrupt["toolCallId"]
    return interrupt


def _resumed(run: dict[str, Any], interrupt: dict[str, Any]) -> str:
    """The result the resume run gave the interrupted call (emitted in this run, for a call
    the previous run opened and closed)."""
    assert run["finished"]["outcome"] == "success"
    assert run["pendingInterrupts"] == []
    assert run["toolCalls"] == []
    (result,) = run["toolResults"]
    assert result["toolCallId"] == interrupt["toolCallId"]
    content: str = result["content"]
    return content


def _roles(summary: dict[str, Any]) -> list[str]:
    return [m["role"] for m in summary["messages"]]


def test_the_official_client_stops_on_an_approval_and_resumes_with_the_tool_result_and_text(
    stack: Stack,
) -> None:
    summary = _scenario(stack, "approve")
    first, second = summary["runs"]

    interrupt = _interrupted(first, "tool_approval")
    assert interrupt["metadata"] == {
        "kind": "approval",
        "tool": "calculate",
        "arguments": {"expression": "2+2"},
    }
    assert summary["resume"] == [
        {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
    ]
    assert json.loads(_resumed(second, interrupt))["result"] == 4
    assert second["text"] == "2+2 = 4."
    assert _roles(summary) == ["user", "assistant", "tool", "assistant"]
    tool = summary["messages"][2]
    assert tool["toolCallId"] == interrupt["toolCallId"]


def test_the_official_client_resumes_with_edited_arguments(stack: Stack) -> None:
    first, second = _scenario(stack, "edit")["runs"]

    interrupt = _interrupted(first, "tool_approval")
    assert json.loads(_resumed(second, interrupt)) == {"expression": "6*7", "result": 42}


def test_the_official_client_declines_with_a_cancelled_resume(stack: Stack) -> None:
    first, second = _scenario(stack, "decline")["runs"]

    interrupt = _interrupted(first, "tool_approval")
    assert _resumed(second, interrupt).startswith("The user declined this call of calculate")
    assert "declined" in second["text"]


def test_the_official_client_answers_a_question_and_the_turn_goes_on(stack: Stack) -> None:
    summary = _scenario(stack, "answer")
    first, second = summary["runs"]

    interrupt = _interrupted(first, "question")
    assert interrupt["message"] == "Your favourite colour?"
    assert interrupt["metadata"]["question"] == "Your favourite colour?"
    assert _resumed(second, interrupt) == "teal"
    assert second["text"] == 'You answered: "teal". Thank you.'
    assert _roles(summary) == ["user", "assistant", "tool", "assistant"]


def test_an_unanswered_interrupt_is_refused_by_the_client_and_by_the_server(
    stack: Stack,
) -> None:
    summary = _scenario(stack, "unanswered")

    _interrupted(summary["runs"][0], "tool_approval")
    assert "pending interrupt" in summary["refusedByClient"]["error"]
    assert summary["refusedByClient"]["types"] == []
    refused = summary["refusedByServer"]["error"]
    assert refused.startswith("HTTP 409") and "input_required" in refused
