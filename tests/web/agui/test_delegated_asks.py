"""A sub-agent's approval over AG-UI (issue 23): at ``POST /agui/lead``, ``lead`` delegates
to ``researcher``, whose ``calculate`` waits for a person. The lead's run ends with an
interrupt outcome carrying the researcher's request; the next run's ``resume`` on the
lead's thread answers it, and the researcher's call runs (or, declined, never does)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, cast

import pytest
from ag_ui.core import BaseEvent, EventType
from flask import Flask
from flask.testing import FlaskClient

from tests.delegating import delegating_settings
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.web.agui.agui_reader import AguiReader, assert_well_formed, of
from tests.web.conftest import BackgroundEngine


@pytest.fixture(scope="module")
def delegating(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, FakeOpenAI]]:
    with FakeOpenAI() as llm:
        settings = delegating_settings(tmp_path_factory.mktemp("agui-delegated"), llm.base_url)
        engine = BackgroundEngine(settings)
        yield engine.start(), llm
        engine.stop()


@pytest.fixture
def client(
    make_app: Callable[..., Flask], delegating: tuple[str, FakeOpenAI]
) -> tuple[FlaskClient, FakeOpenAI]:
    target, llm = delegating
    return make_app(target).test_client(), llm


def _run(client: FlaskClient, body: dict[str, Any]) -> list[BaseEvent]:
    response = client.post("/agui/lead", json=body, buffered=False)
    assert response.status_code == 200, response.get_data()
    events = AguiReader(cast("Iterable[bytes]", response.response)).read_to_end()
    assert_well_formed(events)
    return events


def _body(thread_id: str, text: str | None = None, **extra: Any) -> dict[str, Any]:
    messages = [{"id": uuid.uuid4().hex, "role": "user", "content": text}] if text else []
    return {"threadId": thread_id, "runId": uuid.uuid4().hex, "messages": messages, **extra}


def _outcome(events: list[BaseEvent]) -> dict[str, Any]:
    (finished,) = of(events, EventType.RUN_FINISHED)
    wire: dict[str, Any] = json.loads(finished.model_dump_json(by_alias=True, exclude_none=True))
    outcome: dict[str, Any] = wire["outcome"]
    return outcome


def _paused(client: FlaskClient, llm: FakeOpenAI, thread_id: str) -> dict[str, Any]:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "compute"})]),
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "6*7"})]),
    )
    outcome = _outcome(_run(client, _body(thread_id, "compute 6*7")))
    assert outcome["type"] == "interrupt", outcome
    (interrupt,) = outcome["interrupts"]
    return cast("dict[str, Any]", interrupt)


def _answer(events: list[BaseEvent]) -> dict[str, Any]:
    (result,) = of(events, EventType.TOOL_CALL_RESULT)
    return cast("dict[str, Any]", json.loads(result.content))


def test_a_sub_agents_approval_is_answered_with_the_next_runs_resume(
    client: tuple[FlaskClient, FakeOpenAI],
) -> None:
    flask_client, llm = client
    thread = f"lead-{uuid.uuid4().hex}"
    interrupt = _paused(flask_client, llm, thread)
    assert interrupt["reason"] == "tool_approval"
    assert interrupt["message"].startswith("Agent 'researcher' asks: Approve calling calculate")
    metadata = interrupt["metadata"]
    assert (metadata["tool"], metadata["arguments"]) == ("calculate", {"expression": "6*7"})
    assert metadata["delegation"]["agent"] == "researcher"
    entry = {"interruptId": interrupt["id"], "status": "resolved", "payload": {"approved": True}}
    events = _run(flask_client, _body(thread, resume=[entry]))
    assert _outcome(events)["type"] == "success"
    answer = _answer(events)
    assert answer["conversation_id"] == metadata["delegation"]["conversationId"]
    assert '"result": 42' in answer["answer"]


def test_a_resume_without_a_yes_never_runs_the_sub_agents_call(
    client: tuple[FlaskClient, FakeOpenAI],
) -> None:
    flask_client, llm = client
    thread = f"lead-{uuid.uuid4().hex}"
    interrupt = _paused(flask_client, llm, thread)
    unclear = {"interruptId": interrupt["id"], "status": "resolved", "payload": {}}
    refused = flask_client.post("/agui/lead", json=_body(thread, resume=[unclear]))
    assert refused.status_code == 400, refused.get_data()
    cancelled = {"interruptId": interrupt["id"], "status": "cancelled"}
    events = _run(flask_client, _body(thread, resume=[cancelled]))
    assert _outcome(events)["type"] == "success"
    answer = _answer(events)
    assert "declined" in answer["answer"] and '"result"' not in answer["answer"]
