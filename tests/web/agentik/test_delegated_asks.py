"""A sub-agent's approval over /agentik (issue 23): ``lead`` delegates to ``researcher``,
whose ``calculate`` waits for a person. The lead's conversation streams
``input_required`` naming the researcher's call, ``/resume`` on the lead's conversation
answers it, and the researcher's call runs then; a declined one never runs. Every
response is held against the OpenAPI document (``ApiClient``, ``StreamReader``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.delegating import delegating_settings
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.web.agentik.streams import StreamReader, types
from tests.web.conftest import ApiClient, BackgroundEngine, web_settings
from tests.web.sse_frames import Frame
from web_facade import create_app
from web_facade.engine_client import EngineClient


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, FakeOpenAI]]:
    with FakeOpenAI() as llm:
        settings = delegating_settings(tmp_path_factory.mktemp("delegated"), llm.base_url)
        engine = BackgroundEngine(settings)
        target = engine.start()
        client = EngineClient(target)
        made = create_app(web_settings(target), client)
        made.testing = True
        yield made, llm
        client.close()
        engine.stop()


def _turn(api: ApiClient, conversation_id: str, verb: str, body: dict[str, Any]) -> list[Frame]:
    response = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/{verb}", json=body, buffered=False
    )
    reader = StreamReader(response)
    try:
        return reader.read_to_end()
    finally:
        reader.close()


def _paused(api: ApiClient, llm: FakeOpenAI) -> tuple[str, dict[str, Any]]:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "compute"})]),
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "6*7"})]),
    )
    made = api.call("POST", "/agentik/conversations", json={"agent": "lead"})
    assert made.status_code == 201
    conversation_id: str = made.get_json()["id"]
    events = _turn(api, conversation_id, "send", {"text": "compute 6*7"})
    assert types(events)[-2:] == ["input_required", "end"]
    [interrupt] = events[-2].data["interrupts"]  # type: ignore[index]
    return conversation_id, interrupt


def _results(events: list[Frame]) -> list[dict[str, Any]]:
    return [f.data for f in events if f.type == "tool_call_result"]  # type: ignore[misc]


def test_a_sub_agents_approval_is_asked_and_answered_on_the_parents_conversation(
    app: tuple[Flask, FakeOpenAI],
) -> None:
    flask_app, llm = app
    api = ApiClient(flask_app.test_client())
    conversation_id, interrupt = _paused(api, llm)
    assert interrupt["kind"] == "approval"
    assert interrupt["message"].startswith("Agent 'researcher' asks: Approve calling calculate")
    call = interrupt["tool_call"]
    assert (call["name"], call["arguments"]) == ("calculate", {"expression": "6*7"})
    delegated = interrupt["delegated"]
    assert delegated["agent"] == "researcher"
    got = api.call("GET", f"/agentik/conversations/{conversation_id}").get_json()
    assert got["pending_interrupts"] == [interrupt]

    decision = {"interrupt_id": interrupt["id"], "approve": True}
    events = _turn(api, conversation_id, "resume", {"decisions": [decision]})
    assert types(events)[-1] == "end" and "input_required" not in types(events)
    [result] = _results(events)
    answer = json.loads(result["content"])
    assert answer["conversation_id"] == delegated["conversation_id"]
    assert '"result": 42' in answer["answer"]  # the researcher's call ran, approved
    child = api.call("GET", f"/agentik/conversations/{delegated['conversation_id']}/messages")
    ran = [m for m in child.get_json()["items"] if m["role"] == "tool"]
    assert len(ran) == 1


def test_a_declined_sub_agent_call_never_runs(app: tuple[Flask, FakeOpenAI]) -> None:
    flask_app, llm = app
    api = ApiClient(flask_app.test_client())
    conversation_id, interrupt = _paused(api, llm)
    misspelt = {"interrupt_id": interrupt["id"], "aprove": True}
    refused = api.call(
        "POST", f"/agentik/conversations/{conversation_id}/resume", json={"decisions": [misspelt]}
    )
    assert refused.status_code == 400
    decision = {"interrupt_id": interrupt["id"], "approve": False, "reason": "not now"}
    events = _turn(api, conversation_id, "resume", {"decisions": [decision]})
    [result] = _results(events)
    answer = json.loads(result["content"])
    assert "not now" in answer["answer"] and '"result"' not in answer["answer"]
    child = api.call(
        "GET", f"/agentik/conversations/{interrupt['delegated']['conversation_id']}/messages"
    )
    [told] = [m for m in child.get_json()["items"] if m["role"] == "tool"]
    assert "declined" in json.dumps(told)


def test_edited_arguments_go_down_to_the_sub_agents_call(app: tuple[Flask, FakeOpenAI]) -> None:
    flask_app, llm = app
    api = ApiClient(flask_app.test_client())
    conversation_id, interrupt = _paused(api, llm)
    edited = {"expression": "2*3"}
    decision = {"interrupt_id": interrupt["id"], "approve": True, "arguments": edited}
    events = _turn(api, conversation_id, "resume", {"decisions": [decision]})
    [result] = _results(events)
    answer = json.loads(result["content"])["answer"]
    assert '"result": 6' in answer and '"expression": "2*3"' in answer
