"""Human in the loop on /agentik over the whole stack: engine process (offline model,
``calculate`` needs approval, ``ask_user`` offered), gunicorn, a streaming HTTP client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import SseStream, Stack, checked, types
from tests.web.sse_frames import Frame


@pytest.fixture(scope="module")
def hitl_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path_factory.mktemp("hitl"),
        OPENAI_BASE_URL="",  # the offline model
        OPENAI_API_KEY="",
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_TOOLS_ASK_USER="true",
    )
    yield running
    running.stop()


@pytest.fixture
def http(hitl_stack: Stack) -> Iterator[httpx.Client]:
    with hitl_stack.client() as client:
        yield client


def _stream(http: httpx.Client, method: str, path: str, **kwargs: Any) -> list[Frame]:
    stream = SseStream(http, method, path, **kwargs)
    try:
        return stream.read_to_end()
    finally:
        stream.close()


def _text(events: list[Frame]) -> str:
    return "".join(f.data["text"] for f in events if f.type == "append_text")  # type: ignore[index]


def test_an_approval_pauses_the_turn_and_resume_carries_it_out_over_http(
    http: httpx.Client,
) -> None:
    conversation_id = checked(http.post("/agentik/conversations", json={})).json()["id"]
    base = f"/agentik/conversations/{conversation_id}"
    paused = _stream(http, "POST", f"{base}/send", json={"text": "calculate 2+2"})
    assert types(paused)[-2:] == ["input_required", "end"]
    assert paused[-1].data["outcome"] == "input_required"  # type: ignore[index]
    [interrupt] = paused[-2].data["interrupts"]  # type: ignore[index]
    assert interrupt["tool_call"]["arguments"] == {"expression": "2+2"}

    waiting = checked(http.get(base)).json()
    assert waiting["pending_interrupts"] == [interrupt]
    refused = checked(http.post(f"{base}/send", json={"text": "hello?"}))
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "input_required"
    replayed = _stream(http, "GET", f"{base}/events?after=0&until_idle=true")
    assert [(f.id, f.data) for f in replayed] == [(f.id, f.data) for f in paused]

    decision = {
        "interrupt_id": interrupt["id"],
        "approve": True,
        "arguments": {"expression": "6*7"},
    }
    resumed = _stream(http, "POST", f"{base}/resume", json={"decisions": [decision]})
    [result] = [f.data for f in resumed if f.type == "tool_call_result"]
    assert json.loads(result["content"])["result"] == 42  # type: ignore[index]
    assert _text(resumed) == "6*7 = 42."
    assert resumed[-1].data["outcome"] == "success"  # type: ignore[index]
    assert checked(http.get(base)).json()["pending_interrupts"] == []


def test_a_question_is_answered_over_http(http: httpx.Client) -> None:
    conversation_id = checked(http.post("/agentik/conversations", json={})).json()["id"]
    base = f"/agentik/conversations/{conversation_id}"
    paused = _stream(http, "POST", f"{base}/send", json={"text": "ask me your favourite colour"})
    [interrupt] = paused[-2].data["interrupts"]  # type: ignore[index]
    assert (interrupt["kind"], interrupt["question"]) == ("question", "Your favourite colour?")
    answer = {"interrupt_id": interrupt["id"], "answer": "teal"}
    resumed = _stream(http, "POST", f"{base}/resume", json={"decisions": [answer]})
    assert _text(resumed) == 'You answered: "teal". Thank you.'
