"""The a2a-sdk test agent (tests/fakes/a2a_sdk_agent.py), judged by a2a-sdk's own client."""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AbstractAsyncContextManager

import httpx
import pytest
from a2a.client import A2ACardResolver, Client
from a2a.client.errors import A2AClientError
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    Task,
    TaskState,
)

from tests.a2a_sdk_client import artifact_text as _answer
from tests.a2a_sdk_client import collect_events as _collect
from tests.a2a_sdk_client import one_task as _task
from tests.a2a_sdk_client import sdk_client
from tests.a2a_sdk_client import user_message as _message
from tests.fakes.a2a_sdk_agent_process import SdkAgent
from tests.fakes.a2a_sdk_fixtures import SDK_TOKEN as TOKEN

WAIT = 20.0


def _client(
    agent: SdkAgent, *, streaming: bool = True, headers: dict[str, str] | None = None
) -> AbstractAsyncContextManager[Client]:
    return sdk_client(agent.url, streaming=streaming, headers=headers)


async def _card(agent: SdkAgent) -> AgentCard:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        return await A2ACardResolver(http, agent.url).get_agent_card()


def _schemes(card: AgentCard) -> list[str]:
    return [name for requirement in card.security_requirements for name in requirement.schemes]


def _status_text(task: Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


async def test_the_card_names_the_agent_its_interface_and_skills(agent: SdkAgent) -> None:
    card = await _card(agent)
    assert card.name == "sdk-agent" and card.description
    [interface] = card.supported_interfaces
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
        agent.url,
        "JSONRPC",
        "1.0",
    )
    assert card.capabilities.streaming is True
    assert [s.id for s in card.skills] == ["echo", "slow"]
    for skill in card.skills:
        assert skill.name and skill.description and list(skill.examples)
    assert card.skills[0].description == (
        "Repeats what it is told, remembering earlier messages of the same context"
    )
    assert not card.security_requirements


async def test_streaming_echo_shows_progress_then_completes_with_the_artifact(
    agent: SdkAgent,
) -> None:
    async with _client(agent, streaming=True) as client:
        events = await _collect(client.send_message(_message("hello there")))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task", kinds
    task_id, context_id = events[0].task.id, events[0].task.context_id
    working = [
        e.status_update
        for e in events
        if e.HasField("status_update")
        and e.status_update.status.state == TaskState.TASK_STATE_WORKING
    ]
    assert [p.text for p in working[0].status.message.parts] == ["thinking about: hello there"]
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.parts] == [
        f"sdk-agent heard: hello there (message 1 of context {context_id})"
    ]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert kinds.index("status_update") < kinds.index("artifact_update")
    async with _client(agent, streaming=False) as client:
        stored = await client.get_task(GetTaskRequest(id=task_id))
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(stored).startswith("sdk-agent heard: hello there")


async def test_without_streaming_the_card_says_so_and_one_completed_task_comes_back(
    plain_agent: SdkAgent,
) -> None:
    assert (await _card(plain_agent)).capabilities.streaming is False
    async with _client(plain_agent, streaming=True) as client:
        task = await _task(client, _message("no stream please"))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(task) == (
        f"sdk-agent heard: no stream please (message 1 of context {task.context_id})"
    )


async def test_messages_of_one_context_are_counted_in_that_context(agent: SdkAgent) -> None:
    context_id = f"ctx-{uuid.uuid4().hex}"
    async with _client(agent, streaming=False) as client:
        first = await _task(client, _message("one", context_id=context_id))
        second = await _task(client, _message("two", context_id=context_id))
        other = await _task(client, _message("three"))
    assert first.context_id == second.context_id == context_id != other.context_id
    assert first.id != second.id
    assert _answer(first) == f"sdk-agent heard: one (message 1 of context {context_id})"
    assert _answer(second) == f"sdk-agent heard: two (message 2 of context {context_id})"
    assert "(message 1 of context" in _answer(other)
    assert agent.contexts()[context_id] == ["one", "two"]


async def test_cancel_task_stops_a_slow_task(agent: SdkAgent) -> None:
    async with _client(agent, streaming=True) as client:
        stream = client.send_message(_message("do something slow"))
        async with asyncio.timeout(WAIT):
            opened = await anext(stream)
            working = await anext(stream)
        task_id = opened.task.id
        assert working.status_update.status.state == TaskState.TASK_STATE_WORKING
        assert working.status_update.status.message.parts[0].text == "working slowly"
        canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
        rest = await _collect(stream)
        stored = await client.get_task(GetTaskRequest(id=task_id))
    assert canceled.id == task_id
    assert canceled.status.state == stored.status.state == TaskState.TASK_STATE_CANCELED
    states = [e.status_update.status.state for e in rest if e.HasField("status_update")]
    assert TaskState.TASK_STATE_COMPLETED not in states
    assert task_id in agent.cancelled()


async def test_fail_ends_the_task_failed_with_a_message(agent: SdkAgent) -> None:
    async with _client(agent, streaming=False) as client:
        task = await _task(client, _message("please fail"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert _status_text(task) == "sdk-agent could not do it"
    assert not task.artifacts


async def test_ask_waits_for_input_and_the_answer_completes_the_same_task(
    agent: SdkAgent,
) -> None:
    async with _client(agent, streaming=False) as client:
        paused = await _task(client, _message("ask me something"))
        assert paused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert paused.status.message.role == Role.ROLE_AGENT
        assert _status_text(paused) == "Which colour?"
        done = await _task(client, _message("teal", task=paused))
    assert done.id == paused.id and done.context_id == paused.context_id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert _answer(done) == "sdk-agent got the answer: teal"
    assert agent.contexts()[paused.context_id] == ["ask me something", "teal"]


async def test_ask_then_answer_over_streaming(agent: SdkAgent) -> None:
    async with _client(agent, streaming=True) as client:
        first = await _collect(client.send_message(_message("ask away")))
        assert first[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        second = await _collect(client.send_message(_message("red", task=first[0].task)))
    assert second[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    texts = [
        p.text
        for e in second
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    ]
    assert texts == ["sdk-agent got the answer: red"]


async def test_a_token_guards_a2a_calls_but_not_the_card(guarded_agent: SdkAgent) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card_response = await http.get(f"{guarded_agent.url}/.well-known/agent-card.json")
        raw = await http.post(guarded_agent.url, json={"jsonrpc": "2.0", "id": 1})
    assert card_response.status_code == 200
    assert raw.status_code == 401 and raw.headers["www-authenticate"] == "Bearer"
    assert _schemes(await _card(guarded_agent)) == ["bearer"]
    async with _client(guarded_agent, streaming=False) as client:
        with pytest.raises(A2AClientError, match="401"):
            await _task(client, _message("let me in"))
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with _client(guarded_agent, streaming=True, headers=bearer) as client:
        events = await _collect(client.send_message(_message("with the token")))
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert guarded_agent.requests() == [
        {"authorization": None, "path": "/"},  # the raw POST
        {"authorization": None, "path": "/"},  # the client without the header
        {"authorization": f"Bearer {TOKEN}", "path": "/"},
    ]
    assert ["with the token"] in guarded_agent.contexts().values()
    assert ["let me in"] not in guarded_agent.contexts().values()


async def test_the_agent_records_every_a2a_call(agent: SdkAgent) -> None:
    before = len(agent.requests())
    async with _client(agent, streaming=False) as client:
        await _task(client, _message("recorded"))
    after = agent.requests()
    assert after[before:] == [{"authorization": None, "path": "/"}]
