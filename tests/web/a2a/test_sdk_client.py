"""The a2a-sdk's own client against the whole stack: engine process, gunicorn facade."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from tests.web.e2e.conftest import WAIT, Stack

Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
def connect(stack: Stack) -> Connect:
    """Clients made the way a peer makes them: resolve the card, then follow it."""

    @asynccontextmanager
    async def open_client(
        *, streaming: bool = True, card: AgentCard | None = None
    ) -> AsyncIterator[Client]:
        async with httpx.AsyncClient(timeout=WAIT) as http:
            if card is None:
                card = await A2ACardResolver(http, stack.base_url).get_agent_card()
            client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(
                card
            )
            try:
                yield client
            finally:
                await client.close()

    return open_client


def _request(text: str, context_id: str = "") -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
        context_id=context_id,
    )
    return SendMessageRequest(message=message)


async def _collect(events: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    async with asyncio.timeout(WAIT):
        return [event async for event in events]


def _kinds(events: list[StreamResponse]) -> list[str | None]:
    return [event.WhichOneof("payload") for event in events]


def _text(events: list[StreamResponse]) -> str:
    return "".join(
        part.text
        for event in events
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    )


async def test_the_sdk_resolves_the_card_with_the_configured_url(stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, stack.base_url).get_agent_card()
    public = f"http://localhost:{stack.http_port}/"
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (public, "JSONRPC", "1.0"),
        (public, "JSONRPC", "0.3"),
        (public + "a2a", "HTTP+JSON", "1.0"),
    ]
    assert card.capabilities.streaming and card.capabilities.push_notifications
    assert card.name == "agentik" and card.skills


async def test_send_message_answers_with_a_completed_task(connect: Connect) -> None:
    async with connect(streaming=False) as client:
        events = await _collect(client.send_message(_request("hello from a peer")))
    assert _kinds(events) == ["task"]
    task = events[0].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED and task.context_id
    assert task.artifacts[0].parts[0].text == "Echo: hello from a peer"


async def test_send_streaming_message_streams_task_working_artifacts_completed(
    connect: Connect,
) -> None:
    async with connect() as client:
        events = await _collect(client.send_message(_request("stream these words")))
    kinds = _kinds(events)
    assert kinds[:2] == ["task", "status_update"] and kinds[-1] == "status_update"
    assert set(kinds[2:-1]) == {"artifact_update"}
    assert events[1].status_update.status.state == TaskState.TASK_STATE_WORKING
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert _text(events) == "Echo: stream these words"


async def test_get_task_and_list_tasks_read_the_task_back(connect: Connect) -> None:
    async with connect(streaming=False) as client:
        sent = (await _collect(client.send_message(_request("keep this"))))[0].task
        got = await client.get_task(GetTaskRequest(id=sent.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=sent.context_id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.artifacts == sent.artifacts and got.history == sent.history
    assert [t.id for t in listed.tasks] == [sent.id] and listed.total_size == 1


@pytest.mark.parametrize("method", ["get_task", "cancel_task"])
async def test_a_task_id_outside_the_id_rule_is_invalid_params_for_the_sdk(
    connect: Connect, method: str
) -> None:
    huge = "x" * 60_000  # under the stack's body limit
    request = GetTaskRequest(id=huge) if method == "get_task" else CancelTaskRequest(id=huge)
    async with connect(streaming=False) as client:
        with pytest.raises(InvalidParamsError) as caught:
            await getattr(client, method)(request)
    assert "not a valid task id" in str(caught.value) and len(str(caught.value)) < 1000


async def test_the_sdk_gets_refusals_that_name_the_a2a_field_it_sent(connect: Connect) -> None:
    empty_image = _request("see")
    empty_image.message.parts.append(Part(raw=b"", media_type="image/png"))
    local_file = _request("see")
    local_file.message.parts.append(Part(url="file:///etc/passwd", media_type="image/png"))
    async with connect(streaming=False) as client:
        with pytest.raises(InvalidParamsError, match=r"message\.parts\[1\]\.raw: is empty"):
            await _collect(client.send_message(empty_image))
        with pytest.raises(InvalidParamsError, match=r"message\.parts\[1\]\.url: must be"):
            await _collect(client.send_message(local_file))
        with pytest.raises(InvalidParamsError, match="contextId: is not a valid context id"):
            await client.list_tasks(ListTasksRequest(context_id="bad id!"))


async def test_get_task_works_after_a_facade_restart(stack: Stack, connect: Connect) -> None:
    async with connect(streaming=False) as client:
        sent = (await _collect(client.send_message(_request("survive a restart"))))[0].task
    stack.web.stop()
    stack.start_web()
    stack.wait_healthy()
    async with connect(streaming=False) as client:
        got = await client.get_task(GetTaskRequest(id=sent.id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.artifacts[0].parts[0].text == "Echo: survive a restart"


async def test_cancel_task_stops_a_slow_run_and_the_stream_ends_canceled(
    connect: Connect,
) -> None:
    events: list[StreamResponse] = []
    async with connect() as client, asyncio.timeout(WAIT):
        async for event in client.send_message(_request("[[hang]] a very long answer")):
            events.append(event)
            if event.HasField("artifact_update") and len(events) == 3:
                canceled = await client.cancel_task(CancelTaskRequest(id=events[0].task.id))
                assert canceled.status.state == TaskState.TASK_STATE_CANCELED
                assert canceled.artifacts[0].parts[0].text == "Echo: "
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED


async def test_subscribe_to_task_follows_a_running_task_to_its_end(connect: Connect) -> None:
    async with connect() as sender, connect() as watcher, asyncio.timeout(WAIT):
        stream = sender.send_message(_request("[[slow:0.5]] watch me work"))
        first = await anext(stream)
        watched = await _collect(watcher.subscribe(SubscribeToTaskRequest(id=first.task.id)))
        sent = [first, *await _collect(stream)]
    assert watched[0].task.id == first.task.id
    assert watched[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert _text(watched) == _text(sent) == "Echo: watch me work"
    assert watched[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_two_turns_over_one_context_are_one_agentik_conversation(
    stack: Stack, connect: Connect
) -> None:
    async with connect(streaming=False) as client:
        first = (await _collect(client.send_message(_request("my name is Ada"))))[0].task
        second_request = _request("what is my name?", context_id=first.context_id)
        second = (await _collect(client.send_message(second_request)))[0].task
    assert second.context_id == first.context_id and second.id != first.id
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=WAIT) as http:
        response = await http.get(f"/agentik/conversations/{first.context_id}/messages")
    stored = response.json()["items"]
    assert [(m["role"], m["content"][0]["text"]) for m in stored] == [
        ("user", "my name is Ada"),
        ("assistant", "Echo: my name is Ada"),
        ("user", "what is my name?"),
        ("assistant", "Echo: what is my name?"),
    ]


async def test_the_sdk_0_3_client_gets_one_agent_message_from_message_send(
    stack: Stack, connect: Connect
) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, stack.base_url).get_agent_card()
    legacy = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(legacy)
    async with connect(streaming=False, card=card) as client:
        events = await _collect(client.send_message(_request("hello, old friend")))
    assert _kinds(events) == ["message"]
    answer = events[0].message
    assert answer.role == Role.ROLE_AGENT and answer.parts[0].text == "Echo: hello, old friend"


@pytest.mark.parametrize(
    ("card_path", "headers"),
    [
        ("/.well-known/agent-card.json", {"A2A-Version": "0.3"}),
        ("/.well-known/agent.json", {}),
    ],
    ids=["version-header", "legacy-path"],
)
async def test_the_sdk_resolves_the_0_3_card_a_0_3_peer_asks_for_and_speaks_0_3_by_it(
    stack: Stack, connect: Connect, card_path: str, headers: dict[str, str]
) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        response = await http.get(stack.base_url + card_path, headers=headers)
        assert response.json()["url"] == f"http://localhost:{stack.http_port}/"
        resolver = A2ACardResolver(http, stack.base_url, agent_card_path=card_path)
        card = await resolver.get_agent_card(http_kwargs={"headers": headers})
    legacy = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
    assert legacy, "the 0.3 card still lists the 0.3 interface"
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(legacy)
    async with connect(streaming=False, card=card) as client:
        events = await _collect(client.send_message(_request("hello again")))
    assert _kinds(events) == ["message"]
    assert events[0].message.parts[0].text == "Echo: hello again"
