"""a2a-sdk's own JSON-RPC server with an agent executor that streams the fake LLM's answer.

Served by uvicorn from ``bench.peer_bench`` in ``.bench-venvs/a2a``:
``uvicorn bench.peers.a2a_app:app``. ``OPENAI_BASE_URL`` points at the fake, ``A2A_URL`` is
the URL the card announces. ``SendStreamingMessage`` at ``POST /``: the submitted task, a
``working`` status, one appended artifact chunk per text delta, then ``completed``;
``GET /health`` answers 200.
"""

from __future__ import annotations

import os
import uuid

from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Part
from a2a.utils.constants import PROTOCOL_VERSION_1_0
from openai import AsyncOpenAI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

llm = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="bench")


class LlmExecutor(AgentExecutor):
    """One chat completion per message, its text deltas streamed as one artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id, context.context_id
        if message is None or not task_id or not context_id:
            raise ValueError("the agent needs a message with a task and a context")
        if context.current_task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        artifact_id = str(uuid.uuid4())
        first = True
        stream = await llm.chat.completions.create(
            model="bench",
            stream=True,
            messages=[{"role": "user", "content": context.get_user_input()}],
        )
        async for chunk in stream:
            delta = chunk.choices[0].delta.content if chunk.choices else None
            if delta:
                await updater.add_artifact(
                    [Part(text=delta)], artifact_id=artifact_id, name="answer", append=not first
                )
                first = False
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError("the bench never cancels")


url = os.environ.get("A2A_URL", "http://127.0.0.1/")
card = AgentCard(
    name="bench-agent",
    description="Answers from the fake LLM.",
    version="1.0.0",
    supported_interfaces=[
        AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0)
    ],
    capabilities=AgentCapabilities(streaming=True, push_notifications=False),
    default_input_modes=["text/plain"],
    default_output_modes=["text/plain"],
    skills=[AgentSkill(id="answer", name="Answer", description="Answers.", tags=["bench"])],
)
handler = DefaultRequestHandler(
    agent_executor=LlmExecutor(), task_store=InMemoryTaskStore(), agent_card=card
)


async def health(request: Request) -> Response:
    return PlainTextResponse("ok")


app = Starlette(
    routes=[
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        Route("/health", health),
    ]
)
