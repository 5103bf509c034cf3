"""Multi-turn tasks judged by the a2a-sdk's own client, against the whole stack (engine
process with the offline model and approvals on, gunicorn facade)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager

import pytest
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Part,
    Role,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf import json_format, struct_pb2

from tests.a2a_sdk_client import artifact_text as _answer
from tests.a2a_sdk_client import collect_events as _collect
from tests.a2a_sdk_client import one_task as _task
from tests.a2a_sdk_client import sdk_client
from tests.a2a_sdk_client import user_message as _message
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import ConfiguredStack
from tests.web.e2e.conftest import Stack

INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # No LLM endpoint: the engine answers with the offline model.
    running = ConfiguredStack(
        llm,
        tmp_path_factory.mktemp("a2a-hitl-stack"),
        OPENAI_BASE_URL="",
        OPENAI_API_KEY="",
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_TOOLS_ASK_USER="true",
    )
    yield running
    running.stop()


def _client(stack: Stack, *, streaming: bool) -> AbstractAsyncContextManager[Client]:
    return sdk_client(stack.base_url, streaming=streaming)


def _data(value: dict[str, object]) -> Part:
    data = struct_pb2.Value()
    json_format.ParseDict(value, data)
    return Part(data=data)


def _interrupts(task: Task) -> list[dict[str, object]]:
    data = json_format.MessageToDict(task.status.message.parts[1].data)
    interrupts: list[dict[str, object]] = data["interrupts"]
    return interrupts


async def test_an_approval_as_data_completes_the_same_task_with_both_turns(stack: Stack) -> None:
    async with _client(stack, streaming=False) as client:
        paused = await _task(client, _message(Part(text="calculate 2+2")))
        assert paused.status.state == INPUT_REQUIRED
        assert paused.status.message.role == Role.ROLE_AGENT
        assert paused.status.message.parts[0].text.startswith("Approve calling calculate")
        [interrupt] = _interrupts(paused)
        assert interrupt["kind"] == "approval" and interrupt["tool"] == "calculate"
        done = await _task(client, _message(_data({"approved": True}), task=paused))
        got = await client.get_task(GetTaskRequest(id=paused.id))
    assert done.id == paused.id and done.status.state == COMPLETED
    assert _answer(done) == "2+2 = 4."
    assert got.status.state == COMPLETED and got.history == done.history
    roles_texts = [(m.role, m.parts[0].text) for m in got.history]
    assert roles_texts[0] == (Role.ROLE_USER, "calculate 2+2")
    assert roles_texts[-1] == (Role.ROLE_AGENT, "2+2 = 4.")


async def test_no_in_text_completes_the_task_with_the_decline(stack: Stack) -> None:
    async with _client(stack, streaming=False) as client:
        paused = await _task(client, _message(Part(text="calculate 2+2")))
        done = await _task(client, _message(Part(text="no"), task=paused))
    assert done.id == paused.id and done.status.state == COMPLETED
    assert _answer(done).startswith("The user declined this call of calculate")


async def test_a_question_answered_in_text_completes_the_task(stack: Stack) -> None:
    async with _client(stack, streaming=False) as client:
        paused = await _task(client, _message(Part(text="ask me your favourite colour")))
        assert _interrupts(paused)[0]["question"] == "Your favourite colour?"
        done = await _task(client, _message(Part(text="teal"), task=paused))
    assert _answer(done) == 'You answered: "teal". Thank you.'


async def test_streaming_stops_at_input_required_and_the_streamed_reply_completes(
    stack: Stack,
) -> None:
    async with _client(stack, streaming=True) as client:
        first = await _collect(client.send_message(_message(Part(text="calculate 2+2"))))
        last = first[-1].status_update
        assert last.status.state == INPUT_REQUIRED
        assert last.status.message.parts[0].text.startswith("Approve calling calculate")
        task = first[0].task
        second = await _collect(client.send_message(_message(Part(text="yes"), task=task)))
    assert second[0].task.id == task.id
    assert second[1].status_update.status.state == TaskState.TASK_STATE_WORKING
    assert second[-1].status_update.status.state == COMPLETED
    text = "".join(
        p.text
        for e in second
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )
    assert text == "2+2 = 4."


async def test_cancel_task_on_a_task_waiting_for_input_cancels_it(stack: Stack) -> None:
    async with _client(stack, streaming=False) as client:
        paused = await _task(client, _message(Part(text="calculate 2+2")))
        canceled = await client.cancel_task(CancelTaskRequest(id=paused.id))
        got = await client.get_task(GetTaskRequest(id=paused.id))
    assert canceled.status.state == got.status.state == TaskState.TASK_STATE_CANCELED


async def test_subscribe_to_task_answers_a_waiting_task_then_follows_the_reply(
    stack: Stack,
) -> None:
    async with _client(stack, streaming=True) as client:
        paused = (await _collect(client.send_message(_message(Part(text="calculate 2+2")))))[0]
        watched = await _collect(client.subscribe(SubscribeToTaskRequest(id=paused.task.id)))
        assert [e.WhichOneof("payload") for e in watched] == ["task"]
        assert watched[0].task.status.state == INPUT_REQUIRED
        reply = client.send_message(_message(Part(text="yes"), task=paused.task))
        opened = await anext(reply)
        assert opened.task.id == paused.task.id
        rest = await _collect(reply)
    assert rest[-1].status_update.status.state == COMPLETED
