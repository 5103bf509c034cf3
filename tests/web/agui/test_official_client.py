"""AG-UI conformance as ``@ag-ui/client`` judges it: its ``HttpAgent`` against the live facade
under gunicorn (engine process, fake LLM). The client's own pipeline validates each event and
its order and rejects the run on any breach; every stream must also end with a terminal event
and cause no client warning. Skipped without node and ``npm ci`` in tests/node, except where
AGENTIK_REQUIRE_NODE is set (CI), where that is a failure."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from ag_ui.core import EventType

from tests.fakes.fake_openai import FakeOpenAI
from tests.node_tools import NODE_DIR
from tests.web.agui.agui_reader import AguiReader, has
from tests.web.agui.node_scenarios import run_scenario
from tests.web.e2e.conftest import Stack, wait_for

SCRIPT = NODE_DIR / "agui_conformance.mjs"


def _scenario(stack: Stack, name: str, thread_id: str = "") -> dict[str, Any]:
    """Run one scenario of agui_conformance.mjs; every run in it must pass the client."""
    return run_scenario(SCRIPT, stack, name, thread_id)


def test_the_official_client_accepts_a_plain_text_run(stack: Stack) -> None:
    (run,) = _scenario(stack, "plain_text")["runs"]

    assert run["text"] == "Echo: hello from the official client"
    assert run["finished"] == {"outcome": "success", "pendingToolCallIds": []}


def test_the_official_client_accepts_the_runs_token_usage(stack: Stack) -> None:
    (run,) = _scenario(stack, "usage")["runs"]

    assert run["finished"]["outcome"] == "success"
    (usage,) = run["usage"]
    assert usage["cachedInputTokens"] == 2
    assert usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"] > 0


def test_the_official_client_accepts_a_backend_tool_round(stack: Stack) -> None:
    summary = _scenario(stack, "backend_tool")
    (run,) = summary["runs"]

    assert run["toolCalls"] == ["calculate"]
    assert json.loads(run["toolResults"][0])["result"] == 42
    assert [m["role"] for m in summary["messages"]] == ["user", "assistant", "tool", "assistant"]


def test_the_official_client_runs_a_frontend_tool_then_continues_with_its_result(
    stack: Stack,
) -> None:
    summary = _scenario(stack, "frontend_tool")
    first, second = summary["runs"]

    assert first["toolCalls"] == ["confirm_order"] and first["toolResults"] == []
    assert first["finished"]["outcome"] == "success"
    assert len(first["finished"]["pendingToolCallIds"]) == 1
    assert second["text"] == "Result: confirmed: tea"
    assert second["finished"]["pendingToolCallIds"] == []


def test_the_official_client_handles_frontend_and_backend_calls_in_one_turn(
    stack: Stack,
) -> None:
    first, second = _scenario(stack, "mixed_tools")["runs"]

    assert sorted(first["toolCalls"]) == ["calculate", "confirm_order"]
    assert len(first["toolResults"]) == 1 and len(first["finished"]["pendingToolCallIds"]) == 1
    assert second["text"] == 'Result: confirmed: cake; {"expression": "2+3", "result": 5}'


def test_the_official_client_applies_state_snapshots_and_deltas(stack: Stack) -> None:
    thread_id = f"node-{uuid.uuid4().hex}"
    summary = _scenario(stack, "state", thread_id)
    first, second = summary["runs"]

    assert "STATE_SNAPSHOT" in first["types"] and "STATE_DELTA" in second["types"]
    assert summary["afterFirst"] == {"count": 1, "items": []}
    assert summary["state"] == {"count": 2, "items": ["tea"]}
    newcomer = _scenario(stack, "state_for_a_new_client", thread_id)
    assert newcomer["runs"][0]["types"][:2] == ["RUN_STARTED", "STATE_SNAPSHOT"]
    assert newcomer["state"] == {"count": 3, "items": ["tea"]}


def test_the_official_client_streams_reasoning_and_sends_it_back_harmlessly(
    stack: Stack,
) -> None:
    summary = _scenario(stack, "reasoning")
    first, second = summary["runs"]

    assert first["reasoning"] == "Let me think about that."
    assert first["types"].index("REASONING_END") < first["types"].index("TEXT_MESSAGE_START")
    assert second["text"] == "Echo: and at night?"
    assert [m["role"] for m in summary["messages"]] == [
        "user",
        "reasoning",
        "assistant",
        "user",
        "assistant",
    ]


def test_the_official_client_sees_an_llm_failure_as_run_error_and_the_thread_goes_on(
    stack: Stack,
) -> None:
    failed, retried = _scenario(stack, "llm_failure")["runs"]

    assert failed["types"] == ["RUN_STARTED", "RUN_ERROR"]
    assert failed["runError"]["code"] == "llm_server_error"
    assert retried["text"] == "Echo: try again"


def test_the_official_client_sees_an_interrupt_as_a_cancelled_run(stack: Stack) -> None:
    summary = _scenario(stack, "interrupt")
    (run,) = summary["runs"]

    assert summary["interrupted"]["interrupted"] is True
    assert run["finished"] == {"outcome": "cancelled", "pendingToolCallIds": None}
    assert run["types"][-1] == "RUN_FINISHED"
    assert summary["messages"][-1]["content"] == "Echo: "


def test_a_multi_turn_chat_sending_only_new_messages_keeps_one_history_shared_with_agentik(
    stack: Stack, http: httpx.Client, llm: FakeOpenAI
) -> None:
    thread_id = f"node-{uuid.uuid4().hex}"
    summary = _scenario(stack, "multi_turn_new_messages_only", thread_id)

    (seen,) = [r for r in llm.requests if "third turn gamma" in json.dumps(r["messages"])]
    told = [m["content"] for m in seen["messages"] if m["role"] == "user"]
    assert told == ["first turn alpha", "second turn beta", "third turn gamma"]
    listed = http.get(f"/agentik/conversations/{thread_id}/messages").json()["items"]
    assert [m["role"] for m in listed] == ["user", "assistant"] * 3
    assert [m["id"] for m in listed] == [m["id"] for m in summary["messages"]]


def _leave_early(http: httpx.Client, text: str, **props: Any) -> list[dict[str, Any]]:
    """Start a run, go away after its first words, and return the thread once it is idle."""
    thread_id = f"gone-{uuid.uuid4().hex}"
    body = {
        "threadId": thread_id,
        "runId": f"r-{uuid.uuid4().hex}",
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "forwardedProps": props,
    }
    with http.stream("POST", "/agui", json=body) as response:
        assert response.status_code == 200
        AguiReader(response.iter_raw()).read_until(has(EventType.TEXT_MESSAGE_CONTENT))

    def idle() -> bool:
        return http.get(f"/agentik/conversations/{thread_id}").json()["active_run_id"] is None

    wait_for(idle, "the run to end without its client")
    items: list[dict[str, Any]] = http.get(f"/agentik/conversations/{thread_id}/messages").json()[
        "items"
    ]
    return items


def test_a_client_that_disconnects_does_not_stop_the_run(http: httpx.Client) -> None:
    *_, answer = _leave_early(http, "[[slow:0.1]] one two three four")

    assert answer["role"] == "assistant" and answer["status"] == "complete"
    assert answer["content"] == [{"type": "text", "text": "Echo: one two three four"}]


def test_a_client_may_ask_that_its_disconnect_stops_the_run(http: httpx.Client) -> None:
    options = {"agentik": {"cancelOnDisconnect": True}}
    *_, answer = _leave_early(http, "[[hang]] never ending", **options)

    assert answer["role"] == "assistant" and answer["status"] == "interrupted"
