"""a2a-sdk's own client, as the tests that judge an A2A server by it use it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse, Task

__all__ = ["WAIT", "artifact_text", "collect_events", "one_task", "sdk_client", "user_message"]

WAIT = 20.0
"""Upper bound of each call, in seconds."""


@asynccontextmanager
async def sdk_client(
    base_url: str, *, streaming: bool = True, headers: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """A client made from the card at ``base_url``, closed on exit."""
    async with httpx.AsyncClient(timeout=WAIT, headers=headers) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
        try:
            yield client
        finally:
            await client.close()


def user_message(
    *parts: Part | str, context_id: str = "", task: Task | None = None
) -> SendMessageRequest:
    """A user message of these parts (a string is a text part), in ``task`` if given."""
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[Part(text=part) if isinstance(part, str) else part for part in parts],
    )
    message.context_id = context_id
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    return SendMessageRequest(message=message)


async def collect_events(events: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    async with asyncio.timeout(WAIT):
        return [event async for event in events]


async def one_task(client: Client, request: SendMessageRequest) -> Task:
    """The task of a non-streaming send: the one event it yields."""
    events = await collect_events(client.send_message(request))
    assert [e.WhichOneof("payload") for e in events] == ["task"], events
    return events[0].task


def artifact_text(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)
