"""A real A2A 1.0 agent built with a2a-sdk's own server stack, for tests of our A2A client.

Run ``python -m tests.fakes.a2a_sdk_agent --port 0 [--no-streaming] [--token TOKEN]``: it
serves JSON-RPC on 127.0.0.1 and prints ``ready http://127.0.0.1:PORT`` once it accepts
connections. The card ("sdk-agent") stays public; with ``--token`` every A2A call needs
``Authorization: Bearer TOKEN`` (else HTTP 401).

What the agent does with the text of a user message:

- default: a ``working`` update "thinking about: <text>", then COMPLETED with the artifact
  ``sdk-agent heard: <text> (message N of context <context_id>)``, N counting the messages
  of that context;
- contains "slow": a ``working`` update "working slowly", then waits for CancelTask (which
  cancels it and records its id), completing on its own after 60 s;
- contains "fail": FAILED with the status message "sdk-agent could not do it";
- contains "ask": INPUT_REQUIRED with "Which colour?"; the next message on that task
  completes it with the artifact ``sdk-agent got the answer: <text>``.

Test endpoints outside A2A: ``GET /test/cancelled`` (cancelled task ids),
``GET /test/contexts`` ({context_id: [texts in order]}) and ``GET /test/requests``
([{"authorization", "path"}] for every A2A call).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    Part,
    SecurityRequirement,
    SecurityScheme,
    StringList,
    TaskState,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["AgentState", "SdkAgentExecutor", "build_app", "build_card", "main"]

SLOW_SECONDS = 60.0
"""How long a "slow" task waits for its cancellation."""

_TEST_PREFIX = "/test/"


@dataclass
class AgentState:
    """What the fake saw, served by the ``/test/*`` endpoints."""

    cancelled: list[str] = field(default_factory=list)
    contexts: dict[str, list[str]] = field(default_factory=dict)
    requests: list[dict[str, str | None]] = field(default_factory=list)
    stops: dict[str, asyncio.Event] = field(default_factory=dict)
    """One event per running "slow" task, set when it is cancelled."""


class SdkAgentExecutor(AgentExecutor):
    """The agent's behaviour (see the module docstring)."""

    def __init__(self, state: AgentState) -> None:
        self._state = state

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id, context.context_id
        if message is None or not task_id or not context_id:
            raise ValueError("sdk-agent needs a message with a task and a context")
        text = context.get_user_input()
        texts = self._state.contexts.setdefault(context_id, [])
        texts.append(text)
        updater = TaskUpdater(event_queue, task_id, context_id)
        task = context.current_task
        if task is None:
            await event_queue.enqueue_event(new_task_from_user_message(message))
        elif task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([Part(text=f"sdk-agent got the answer: {text}")])
            await updater.complete()
            return

        def say(words: str) -> list[Part]:
            return [Part(text=words)]

        if "slow" in text:
            await updater.start_work(updater.new_agent_message(say("working slowly")))
            if not await self._wait_until_cancelled(task_id):
                await updater.add_artifact(say("sdk-agent finished slowly"), name="answer")
                await updater.complete()
        elif "fail" in text:
            await updater.start_work(updater.new_agent_message(say(f"thinking about: {text}")))
            await updater.failed(updater.new_agent_message(say("sdk-agent could not do it")))
        elif "ask" in text:
            await updater.requires_input(updater.new_agent_message(say("Which colour?")))
        else:
            await updater.start_work(updater.new_agent_message(say(f"thinking about: {text}")))
            heard = f"sdk-agent heard: {text} (message {len(texts)} of context {context_id})"
            await updater.add_artifact(say(heard), name="answer")
            await updater.complete()

    async def _wait_until_cancelled(self, task_id: str) -> bool:
        """Wait up to SLOW_SECONDS for ``cancel`` (the SDK also cancels this coroutine).

        True when cancelled: ``cancel`` then owns the task's terminal state.
        """
        stop = self._state.stops.setdefault(task_id, asyncio.Event())
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SLOW_SECONDS):
                    await stop.wait()
            return stop.is_set()
        finally:
            self._state.stops.pop(task_id, None)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if not task_id or not context_id:
            raise ValueError("sdk-agent cancels a task with an id and a context")
        self._state.cancelled.append(task_id)
        stop = self._state.stops.get(task_id)
        if stop is not None:
            stop.set()
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.cancel(updater.new_agent_message([Part(text="sdk-agent cancelled it")]))


def build_card(url: str, *, streaming: bool = True, bearer: bool = False) -> AgentCard:
    """The agent card: a JSON-RPC interface at ``url``, two skills, bearer auth if asked."""
    card = AgentCard(
        name="sdk-agent",
        description="A test agent served by a2a-sdk: echoes, works slowly, fails or asks.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0
            )
        ],
        capabilities=AgentCapabilities(streaming=streaming, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="echo",
                name="Echo",
                description="Repeats what it is told, remembering earlier messages of the same "
                "context",
                tags=["echo", "test"],
                examples=["hello there", "say it again"],
            ),
            AgentSkill(
                id="slow",
                name="Slow work",
                description="Works for up to a minute on anything that says 'slow', until the "
                "task is cancelled",
                tags=["slow", "cancel", "test"],
                examples=["do something slow"],
            ),
        ],
    )
    if bearer:
        card.security_schemes["bearer"].CopyFrom(
            SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="Bearer"))
        )
        card.security_requirements.append(
            SecurityRequirement(schemes={"bearer": StringList(list=[])})
        )
    return card


class _GuardA2A:
    """Records every A2A call (not the card, not ``/test/*``) and checks its bearer token."""

    def __init__(self, app: ASGIApp, state: AgentState, token: str | None) -> None:
        self._app = app
        self._state = state
        self._expected = None if token is None else f"Bearer {token}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] != "http" or path == AGENT_CARD_WELL_KNOWN_PATH:
            await self._app(scope, receive, send)
            return
        if path.startswith(_TEST_PREFIX):
            await self._app(scope, receive, send)
            return
        authorization = Request(scope).headers.get("authorization")
        self._state.requests.append({"authorization": authorization, "path": path})
        if self._expected is not None and authorization != self._expected:
            refusal = JSONResponse(
                {"error": "unauthorized"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await refusal(scope, receive, send)
            return
        await self._app(scope, receive, send)


def build_app(
    url: str, state: AgentState, *, streaming: bool = True, token: str | None = None
) -> ASGIApp:
    """The whole ASGI app: the SDK's card and JSON-RPC routes plus the test endpoints."""
    card = build_card(url, streaming=streaming, bearer=token is not None)
    handler = DefaultRequestHandler(
        agent_executor=SdkAgentExecutor(state), task_store=InMemoryTaskStore(), agent_card=card
    )

    async def cancelled(_: Request) -> JSONResponse:
        return JSONResponse(state.cancelled)

    async def contexts(_: Request) -> JSONResponse:
        return JSONResponse(state.contexts)

    async def requests(_: Request) -> JSONResponse:
        return JSONResponse(state.requests)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await handler.aclose()

    routes = [
        *create_agent_card_routes(card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
        Route(f"{_TEST_PREFIX}cancelled", cancelled, methods=["GET"]),
        Route(f"{_TEST_PREFIX}contexts", contexts, methods=["GET"]),
        Route(f"{_TEST_PREFIX}requests", requests, methods=["GET"]),
    ]
    return _GuardA2A(Starlette(routes=routes, lifespan=lifespan), state, token)


class _AnnouncingServer(uvicorn.Server):
    """Prints ``ready URL`` once uvicorn has started listening."""

    def __init__(self, config: uvicorn.Config, url: str) -> None:
        super().__init__(config)
        self._url = url

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            print(f"ready {self._url}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="An A2A 1.0 test agent built with a2a-sdk.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--no-streaming", action="store_true", help="card says no streaming")
    parser.add_argument("--token", default=None, help="require Authorization: Bearer TOKEN")
    options = parser.parse_args(argv)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", options.port))
    listener.listen(128)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    app = build_app(url, AgentState(), streaming=not options.no_streaming, token=options.token)
    try:
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=2
        )
        asyncio.run(_AnnouncingServer(config, url).serve(sockets=[listener]))
    finally:
        listener.close()


if __name__ == "__main__":
    main()
