"""a2a-sdk's own client over the HTTP+JSON binding (its REST transport, picked from the
card), against the whole stack: engine process with the fake LLM, gunicorn facade, bearer
tokens. The same tasks as JSON-RPC: send, stream, get, list, cancel, resubscribe, an
approval, push configs, each caller's own tasks only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Part,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf import json_format, struct_pb2

from tests.a2a_sdk_client import WAIT, artifact_text, collect_events, one_task, user_message
from tests.engine.auth_helpers import TOKENS, TOKENS_ENV
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.web.a2a.conftest import ConfiguredStack
from tests.web.e2e.conftest import Stack

COMPLETED = TaskState.TASK_STATE_COMPLETED
V10 = {"A2A-Version": "1.0"}


@pytest.fixture(scope="module")
def rest_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = ConfiguredStack(
        llm,
        tmp_path_factory.mktemp("a2a-rest"),
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1",
        AGENTIK_MAX_BODY_BYTES="65536",
    )
    yield running
    running.stop()


@asynccontextmanager
async def rest_client(
    stack: Stack, principal: str = "alice", *, streaming: bool = False
) -> AsyncIterator[Client]:
    """A client made from the card that may speak HTTP+JSON only."""
    headers = {"Authorization": f"Bearer {TOKENS[principal]}"}
    async with httpx.AsyncClient(timeout=WAIT, headers=headers) as http:
        card = await A2ACardResolver(http, stack.base_url).get_agent_card()
        config = ClientConfig(
            streaming=streaming, httpx_client=http, supported_protocol_bindings=["HTTP+JSON"]
        )
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()


def _kinds(events: list[StreamResponse]) -> list[str | None]:
    return [event.WhichOneof("payload") for event in events]


def _streamed_text(events: list[StreamResponse]) -> str:
    return "".join(
        part.text
        for event in events
        if event.HasField("artifact_update")
        for part in event.artifact_update.artifact.parts
    )


async def test_the_card_lists_the_http_json_interface_under_a2a(rest_stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, rest_stack.base_url).get_agent_card()
    rest = [i for i in card.supported_interfaces if i.protocol_binding == "HTTP+JSON"]
    assert [(i.url, i.protocol_version) for i in rest] == [
        (f"http://localhost:{rest_stack.http_port}/a2a", "1.0")
    ]


async def test_send_get_and_list_over_rest(rest_stack: Stack) -> None:
    async with rest_client(rest_stack) as client:
        sent = await one_task(client, user_message("hello over rest"))
        got = await client.get_task(GetTaskRequest(id=sent.id, history_length=1))
        listed = await client.list_tasks(ListTasksRequest(context_id=sent.context_id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        with pytest.raises(InvalidParamsError, match="not a valid task id"):
            await client.get_task(GetTaskRequest(id="x" * 300))
    assert sent.status.state == COMPLETED and artifact_text(sent) == "Echo: hello over rest"
    assert got.artifacts == sent.artifacts and len(got.history) == 1
    assert [t.id for t in listed.tasks] == [sent.id] and listed.total_size == 1


async def test_stream_over_rest_is_task_working_artifacts_completed(rest_stack: Stack) -> None:
    async with rest_client(rest_stack, streaming=True) as client:
        events = await collect_events(client.send_message(user_message("stream these words")))
    kinds = _kinds(events)
    assert kinds[:2] == ["task", "status_update"] and kinds[-1] == "status_update"
    assert set(kinds[2:-1]) == {"artifact_update"}
    assert events[-1].status_update.status.state == COMPLETED
    assert _streamed_text(events) == "Echo: stream these words"


async def test_cancel_over_rest_stops_a_running_task(rest_stack: Stack) -> None:
    events: list[StreamResponse] = []
    async with (
        rest_client(rest_stack, streaming=True) as client,
        asyncio.timeout(WAIT),
    ):
        async for event in client.send_message(user_message("[[hang]] a very long answer")):
            events.append(event)
            if event.HasField("artifact_update") and len(events) == 3:
                canceled = await client.cancel_task(CancelTaskRequest(id=events[0].task.id))
                assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED


async def test_resubscribe_over_rest_follows_a_running_task_to_its_end(rest_stack: Stack) -> None:
    async with (
        rest_client(rest_stack, streaming=True) as sender,
        rest_client(rest_stack, streaming=True) as watcher,
        asyncio.timeout(WAIT),
    ):
        stream = sender.send_message(user_message("[[slow:0.5]] watch me work"))
        first = await anext(stream)
        watched = await collect_events(watcher.subscribe(SubscribeToTaskRequest(id=first.task.id)))
        sent = [first, *await collect_events(stream)]
    assert watched[0].task.id == first.task.id
    assert _streamed_text(watched) == _streamed_text(sent) == "Echo: watch me work"
    assert watched[-1].status_update.status.state == COMPLETED


async def test_an_approval_over_rest_completes_the_same_task(
    rest_stack: Stack, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "6*7"})]))
    llm.enqueue(FakeReply(text="It is 42."))
    approved = struct_pb2.Value()
    json_format.ParseDict({"approved": True}, approved)
    async with (
        rest_client(rest_stack) as client,
        rest_client(rest_stack, streaming=True) as watcher,
    ):
        paused = await one_task(client, user_message("what is 6*7?"))
        assert paused.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert paused.status.message.parts[0].text.startswith("Approve calling calculate")
        # A task that waits for input: subscribing gives the task alone.
        waiting = await collect_events(watcher.subscribe(SubscribeToTaskRequest(id=paused.id)))
        done = await one_task(client, user_message(Part(data=approved), task=paused))
        got = await client.get_task(GetTaskRequest(id=paused.id))
    assert _kinds(waiting) == ["task"] and waiting[0].task.id == paused.id
    assert done.id == paused.id and done.status.state == COMPLETED
    assert artifact_text(done) == "It is 42."
    assert got.status.state == COMPLETED and got.history == done.history


async def test_a_streamed_task_stops_at_input_required_and_the_streamed_reply_completes(
    rest_stack: Stack, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "2+2"})]))
    llm.enqueue(FakeReply(text="It is 4."))
    async with rest_client(rest_stack, streaming=True) as client:
        first = await collect_events(client.send_message(user_message("what is 2+2?")))
        task = first[0].task
        second = await collect_events(client.send_message(user_message("yes", task=task)))
    assert first[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert second[0].task.id == task.id
    assert second[-1].status_update.status.state == COMPLETED
    assert _streamed_text(second) == "It is 4."


async def test_another_token_finds_none_of_the_tasks_or_their_push_configs(
    rest_stack: Stack,
) -> None:
    async with (
        rest_client(rest_stack, "alice") as alice,
        rest_client(rest_stack, "bob") as bob,
        rest_client(rest_stack, "bob", streaming=True) as bob_streaming,
    ):
        task = await one_task(alice, user_message("mine only"))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await collect_events(bob_streaming.subscribe(SubscribeToTaskRequest(id=task.id)))
        with pytest.raises(TaskNotFoundError):
            await one_task(bob, user_message("answer for alice", task=task))
        with pytest.raises(TaskNotFoundError):
            await bob.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
        listed = await bob.list_tasks(ListTasksRequest(context_id=task.context_id))
    assert task.id not in [t.id for t in listed.tasks]


async def test_push_configs_over_rest_are_created_read_listed_and_deleted(
    rest_stack: Stack,
) -> None:
    async with rest_client(rest_stack) as alice:
        task = await one_task(alice, user_message("push me"))
        made = await alice.create_task_push_notification_config(
            TaskPushNotificationConfig(
                task_id=task.id, url="https://hooks.example.com/rest", token="rest-token"
            )
        )
        got = await alice.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
        )
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        await alice.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
        )
        with pytest.raises(TaskNotFoundError):
            await alice.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
            )
        with pytest.raises(InvalidParamsError, match="cloud metadata address"):
            await alice.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task.id, url="http://169.254.169.254/latest")
            )
    assert made.id and made.task_id == task.id and made.token == "rest-token"
    assert got == made and list(listed.configs) == [made]


async def test_bad_input_over_gunicorn_is_a_clear_4xx(rest_stack: Stack) -> None:
    auth = {"Authorization": f"Bearer {TOKENS['alice']}", **V10}
    async with httpx.AsyncClient(base_url=rest_stack.base_url, timeout=WAIT) as http:
        no_token = await http.get("/a2a/tasks", headers=V10)
        bad_json = await http.post(
            "/a2a/message:send",
            content=b"{nope",
            headers={**auth, "Content-Type": "application/a2a+json"},
        )
        too_big = await http.post(
            "/a2a/message:send",
            json={"message": {"parts": [{"text": "x" * 70_000}]}},
            headers=auth,
        )
        unknown = await http.post("/a2a/tasks/no-such-task:cancel", headers=auth)
    assert no_token.status_code == 401 and "Bearer" in no_token.headers["WWW-Authenticate"]
    assert no_token.json()["error"]["status"] == "UNAUTHENTICATED"
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["details"][0]["reason"] == "PARSE_ERROR"
    assert too_big.status_code == 413 and "65536 bytes" in too_big.json()["error"]["message"]
    assert unknown.status_code == 404
    assert unknown.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"
