"""A2A push notifications with a2a-sdk's own client against the whole stack: the config
methods (owner-scoped, bounded, SSRF-guarded), and every update of a task delivered to a
real receiver with the config's token and authentication."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    StreamResponse,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf import json_format

from tests.a2a_sdk_client import WAIT, one_task, user_message
from tests.engine.auth_helpers import TOKENS, TOKENS_ENV
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.web.a2a.conftest import ConfiguredStack
from tests.web.e2e.conftest import Stack


@pytest.fixture(scope="module")
def push_stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = ConfiguredStack(
        llm,
        tmp_path_factory.mktemp("a2a-push"),
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1",
        AGENTIK_WEBHOOKS_BASE_DELAY="0.05",
        AGENTIK_WEBHOOKS_POLL_INTERVAL="0.05",
        AGENTIK_WEBHOOKS_MAX_PUSH_CONFIGS="2",
    )
    yield running
    running.stop()


@asynccontextmanager
async def client_of(
    stack: Stack,
    principal: str,
    *,
    streaming: bool = False,
    push: TaskPushNotificationConfig | None = None,
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {TOKENS[principal]}"}
    async with httpx.AsyncClient(timeout=WAIT, headers=headers) as http:
        card = await A2ACardResolver(http, stack.base_url).get_agent_card()
        config = ClientConfig(streaming=streaming, httpx_client=http, push_notification_config=push)
        client = ClientFactory(config).create(card)
        try:
            yield client
        finally:
            await client.close()


def config(task_id: str, url: str, config_id: str = "") -> TaskPushNotificationConfig:
    return TaskPushNotificationConfig(
        id=config_id,
        task_id=task_id,
        url=url,
        token="notify-token-1",
        authentication=AuthenticationInfo(scheme="Bearer", credentials="receiver-secret"),
    )


async def test_the_card_says_push_notifications(push_stack: Stack) -> None:
    async with httpx.AsyncClient(timeout=WAIT) as http:
        card = await A2ACardResolver(http, push_stack.base_url).get_agent_card()
    assert card.capabilities.push_notifications


async def test_the_sdk_sets_gets_lists_and_deletes_a_config_of_its_own_task_only(
    push_stack: Stack,
) -> None:
    async with client_of(push_stack, "alice") as alice, client_of(push_stack, "bob") as bob:
        task = await one_task(alice, user_message("hello"))
        made = await alice.create_task_push_notification_config(
            config(task.id, "https://hooks.example.com/a2a")
        )
        assert made.id and made.task_id == task.id
        assert (made.token, made.authentication.scheme) == ("notify-token-1", "Bearer")
        got = await alice.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
        )
        assert got == made
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert list(listed.configs) == [made]
        # A stranger's task is not found, whatever the method.
        with pytest.raises(TaskNotFoundError):
            await bob.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
            )
        with pytest.raises(TaskNotFoundError):
            await bob.create_task_push_notification_config(
                config(task.id, "https://hooks.example.com/bob")
            )
        with pytest.raises(TaskNotFoundError):
            await bob.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
        # Bounded per task ([webhooks] max_push_configs = 2 here).
        await alice.create_task_push_notification_config(
            config(task.id, "https://hooks.example.com/2", "second")
        )
        with pytest.raises(InvalidParamsError, match="the task has 2 push notification configs"):
            await alice.create_task_push_notification_config(
                config(task.id, "https://hooks.example.com/3", "third")
            )
        await alice.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
        )
        listed = await alice.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        assert [c.id for c in listed.configs] == ["second"]
        with pytest.raises(TaskNotFoundError):
            await alice.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
            )


async def test_a_url_the_guard_refuses_is_invalid_params_naming_why(push_stack: Stack) -> None:
    async with client_of(push_stack, "alice") as alice:
        task = await one_task(alice, user_message("hello"))
        with pytest.raises(InvalidParamsError, match="cloud metadata address"):
            await alice.create_task_push_notification_config(
                config(task.id, "http://169.254.169.254/latest")
            )
        # Even with [webhooks] allow_private (this stack): metadata in an IPv6 form, and
        # the deprecated IPv6 forms.
        for url, why in [
            ("https://[64:ff9b::a9fe:a9fe]/latest/", "cloud metadata address inside"),
            ("https://[2002:a9fe:a9fe::]/", "cloud metadata address inside"),
            ("http://[::7f00:1]/", "deprecated IPv4-compatible"),
            ("https://[fec0::1]/", "deprecated site-local"),
            ("https://0xa9fea9fe/", "cloud metadata address"),
        ]:
            with pytest.raises(InvalidParamsError, match=why):
                await alice.create_task_push_notification_config(config(task.id, url))


async def test_every_update_of_a_task_is_pushed_with_token_and_authentication(
    push_stack: Stack, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="A slow and careful answer.", delay=1.5))
    with Receiver() as hook:
        async with (
            client_of(push_stack, "alice", streaming=True) as streaming,
            client_of(push_stack, "alice") as alice,
        ):
            events = streaming.send_message(user_message("take your time"))
            async with asyncio.timeout(WAIT):
                first = await anext(aiter(events))
                task_id = first.task.id
                await alice.create_task_push_notification_config(config(task_id, hook.url))
                async for _ in events:
                    pass
            got = await asyncio.to_thread(hook.wait_for, 2, WAIT)
    updates = [json_format.Parse(r.body, StreamResponse()) for r in got]
    artifact = next(u.artifact_update for u in updates if u.HasField("artifact_update"))
    assert artifact.task_id == task_id and artifact.last_chunk
    assert artifact.artifact.parts[0].text == "A slow and careful answer."
    final = [u.status_update for u in updates if u.HasField("status_update")][-1]
    assert (final.task_id, final.status.state) == (task_id, TaskState.TASK_STATE_COMPLETED)
    for request in got:
        assert request.headers["x-a2a-notification-token"] == "notify-token-1"
        assert request.headers["authorization"] == "Bearer receiver-secret"
        assert request.headers["webhook-id"].startswith("push_")
    assert len({r.headers["webhook-id"] for r in got}) == len(got)


async def test_a_config_sent_with_the_message_gets_every_update_from_the_start(
    push_stack: Stack, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="Told from the start."))
    with Receiver() as hook:
        push = TaskPushNotificationConfig(url=hook.url, token="from-the-message")
        async with client_of(push_stack, "alice", push=push) as alice:
            task = await one_task(alice, user_message("hello"))
            got = await asyncio.to_thread(hook.wait_for, 3, WAIT)
            listed = await alice.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
    updates = [json_format.Parse(r.body, StreamResponse()) for r in got]
    kinds = sorted(u.WhichOneof("payload") for u in updates)
    assert kinds == ["artifact_update", "status_update", "status_update"]
    states = {u.status_update.status.state for u in updates if u.HasField("status_update")}
    assert states == {TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED}
    assert all(u.WhichOneof("payload") and _task_of(u) == task.id for u in updates)
    assert {r.headers["x-a2a-notification-token"] for r in got} == {"from-the-message"}
    assert [c.url for c in listed.configs] == [hook.url]


def _task_of(update: StreamResponse) -> str:
    if update.HasField("status_update"):
        return update.status_update.task_id
    return update.artifact_update.task_id
