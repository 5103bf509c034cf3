"""AG-UI's 2026 additions as ``@ag-ui/client`` judges them, against the live stack (engine
process, gunicorn, fake LLM) with three agents: the default one (takes images), ``lead``
(delegates to ``reader``) and ``reader`` (a text-only model). Capabilities discovery,
ACTIVITY events for a delegated agent's progress, token usage on RUN_FINISHED and
RUN_ERROR, and an image part. Skipped without node and ``npm ci`` in tests/node, except
where AGENTIK_REQUIRE_NODE is set (CI)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.node_tools import NODE_DIR, node_or_skip
from tests.web.agui.node_scenarios import run_scenario
from tests.web.e2e.conftest import Stack

SCRIPT = NODE_DIR / "agui_2026.mjs"

CONFIG = """
[[agents]]
name = "lead"
description = "Hands questions to the reader"
tools = ["agent:reader", "calculate"]
input_modalities = ["text", "image", "document"]

[[agents]]
name = "reader"
description = "Reads"
model = "text-model"
input_modalities = ["text"]
tools = ["calculate"]
"""


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Skip before any test scripts the shared fake LLM: replies a skipped test enqueued
    # would be taken by the next test's run.
    node_or_skip("@ag-ui/client")
    logs = tmp_path_factory.mktemp("agui-2026")
    config = logs / "agentik.toml"
    config.write_text(CONFIG)
    running = Stack(llm, logs, AGENTIK_CONFIG=str(config))
    yield running
    running.stop()


def _scenario(stack: Stack, name: str) -> dict[str, Any]:
    return run_scenario(SCRIPT, stack, name)


def test_the_client_discovers_each_agents_capabilities(stack: Stack) -> None:
    summary = _scenario(stack, "capabilities")
    agents = summary["agents"]

    assert agents["/agui"]["identity"]["name"] == "agentik"
    assert agents["/agui/lead"]["identity"]["description"] == "Hands questions to the reader"
    lead_tools = [tool["name"] for tool in agents["/agui/lead"]["tools"]["items"]]
    assert sorted(lead_tools) == ["agent__reader", "calculate"]
    assert agents["/agui"]["multimodal"]["input"]["image"] is True
    assert agents["/agui"]["multimodal"]["input"]["pdf"] is False
    assert agents["/agui/lead"]["multimodal"]["input"]["pdf"] is True
    assert agents["/agui/reader"]["multimodal"]["input"]["image"] is False
    assert agents["/agui/reader"]["identity"]["metadata"]["model"] == "openai:text-model"
    assert summary["missing"].startswith("HTTP 404")


def test_a_delegated_agents_progress_reaches_the_client_as_one_activity_message(
    stack: Stack, llm: FakeOpenAI
) -> None:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__reader", {"message": "look it up"})]),
        FakeReply(
            text="Looking it up.", tool_calls=[FakeToolCall("calculate", {"expression": "1+1"})]
        ),
        FakeReply(text="It is 2."),
        FakeReply(text="The reader says 2."),
    )
    summary = _scenario(stack, "activity")
    (run,) = summary["runs"]

    # One report per message of the reader's and per tool it calls: a snapshot, then deltas.
    kinds = [event["type"] for event in run["activities"]]
    assert kinds == ["ACTIVITY_SNAPSHOT", "ACTIVITY_DELTA", "ACTIVITY_DELTA"]
    snapshot, calling, last = run["activities"]
    assert {e["activityType"] for e in run["activities"]} == {"tool_progress"}
    assert snapshot["content"]["message"] == "Looking it up."
    assert snapshot["content"]["agent"] == "reader"
    assert {"op": "replace", "path": "/message", "value": "calling calculate"} in calling["patch"]
    assert {"op": "replace", "path": "/message", "value": "It is 2."} in last["patch"]
    assert "CUSTOM" not in run["types"]
    # The client applied the snapshot and the delta to one activity message of its own.
    (activity,) = summary["activityMessages"]
    assert activity["id"] == snapshot["messageId"]
    assert activity["content"]["message"] == "It is 2."
    assert activity["content"]["progress"] == 3
    assert run["text"] == "The reader says 2."


def test_usage_reaches_the_client_on_run_error_too(stack: Stack, llm: FakeOpenAI) -> None:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "2*3"})], usage=(40, 5)),
        FakeReply(status=500, error_message="the model fell over"),
    )
    (run,) = _scenario(stack, "usage_on_error")["runs"]

    assert run["types"][-1] == "RUN_ERROR"
    (usage,) = run["runError"]["usage"]
    assert (usage["inputTokens"], usage["outputTokens"], usage["totalTokens"]) == (40, 5, 45)


def test_an_image_part_reaches_the_model_and_a_text_only_agent_refuses_it(
    stack: Stack, llm: FakeOpenAI
) -> None:
    summary = _scenario(stack, "image")
    (run,) = summary["runs"]

    assert run["types"][-1] == "RUN_FINISHED"
    assert run["finishedUsage"][0]["inputTokens"] > 0
    seen = [r for r in llm.requests if "what is in this picture" in json.dumps(r["messages"])]
    (user,) = [m for m in seen[0]["messages"] if m["role"] == "user"]
    (image,) = [p for p in user["content"] if p["type"] == "image_url"]
    assert image["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    assert len(seen) == 1  # the text-only agent never called its model
    refused = summary["refused"]
    assert refused["error"].startswith("HTTP 400")
    assert "is an image part" in refused["error"] and "agent 'reader'" in refused["error"]


def test_a_document_part_reaches_a_model_that_reads_documents_and_comes_back(
    stack: Stack, llm: FakeOpenAI
) -> None:
    summary = _scenario(stack, "document")
    (run,) = summary["runs"]

    assert run["types"][-1] == "RUN_FINISHED"
    (request,) = [r for r in llm.requests if "summarise this report" in json.dumps(r["messages"])]
    (user,) = [m for m in request["messages"] if m["role"] == "user"]
    (part,) = [p for p in user["content"] if p["type"] == "file"]
    assert part["file"]["filename"] == "report.pdf"
    assert part["file"]["file_data"].startswith("data:application/pdf;base64,JVBERi0xLjQ")
    # the client's history after the snapshot holds the document as sent
    sent = summary["messages"][0]
    assert sent[1]["type"] == "document" and sent[1]["metadata"] == {"filename": "report.pdf"}
