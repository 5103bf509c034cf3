"""Other A2A agents as tools: each ``[[a2a.agents]]`` entry is one tool the LLM may call.

An :class:`A2aAgentSource` owns one remote agent. Its tool is registered at once (status
``connecting``, not offered to the LLM); in the background the source reads the agent's
card (retrying with backoff while the agent is away, as for MCP servers), makes the tool's
description from the card's skills, and marks it ready.

A call sends the LLM's ``message`` with a2a-sdk's client, streaming when the card says the
agent streams. While the remote works, its status messages become ``CUSTOM`` events named
``tool_progress``. The answer is the text of the task's artifacts (else of its last status
message). Every conversation of ours talks to the agent in one remote context of its own,
named from :attr:`ToolContext.session_key`, so a follow-up reaches the same remote session
(on any replica, after restarts) and a conversation never shares a context with another.
A remote task that asks for input is answered by the next call in that conversation.

The call is bounded by the agent's ``call_timeout``. When it passes, or when our run is
interrupted, the remote task is cancelled (in the background on interrupt, so the stream
ends at once; if the task id has not arrived yet, the stream is read a little longer to
learn it). Remote failures, refusals and unreachable agents are error results the LLM
reads; they name the agent, never its address (tool results reach clients), and the log
has the details.

Every answer is read through ``bounded.bounded_client``: a JSON body, or one event of a
stream, over the agent's ``max_response_bytes`` ends the call like a timeout (the remote
task cancelled) before the engine holds more of it.

The configured ``headers`` go with every request; a card naming an endpoint on another
origin than the card's is not called with them (``endpoint`` in the config says where to
call instead).

The card is read and made into a client by :mod:`.card`; a call's answer is gathered by
:mod:`.answer`'s ``RemoteCall``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from a2a.client import A2AClientError, Client
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
    TaskState,
)
from a2a.utils.errors import A2AError

from agentik.config import A2aAgentConfig
from engine_service.core.models import JSON
from engine_service.core.registry import READY, ToolRegistry
from engine_service.core.tool import Tool, ToolContext, ToolResult
from engine_service.tools.a2a.answer import (
    DONE,
    MAX_PROGRESS_CHARS,
    MAX_RESULT_CHARS,
    PAUSED,
    PROGRESS_EVERY,
    RemoteCall,
    clip,
    too_large,
    why_call_failed,
)
from engine_service.tools.a2a.bounded import ResponseTooLarge, bounded_client
from engine_service.tools.a2a.card import describe, make_client, read_card, why_card_failed

__all__ = [
    "MAX_PROGRESS_CHARS",
    "MAX_RESULT_CHARS",
    "PROGRESS_EVERY",
    "A2aAgentSource",
    "A2aAgentTool",
    "AgentState",
    "context_id_for",
]

log = logging.getLogger(__name__)

CONNECTING = "connecting"
"""The registry status of an agent whose card is not read yet (not offered to the LLM)."""
UNAVAILABLE = "unavailable"
FIRST_RETRY = 0.5
MAX_RETRY = 30.0
CARD_REFRESH = 300.0
"""Seconds between two readings of a ready agent's card."""
CANCEL_WAIT = 2.0
"""Seconds spent cancelling a remote task (and learning its id, when interrupted early)."""
FIRST_POLL = 0.05
MAX_POLL = 1.0
"""Seconds between GetTask calls for a task the remote left running without streaming:
from the first to the longest wait, doubling."""
MAX_REMEMBERED = 10_000
"""Contexts whose waiting (or cut) remote task the engine keeps in memory."""
A2A_SOURCE = "a2a:"
"""The registry source of a remote A2A agent's tool: ``a2a:NAME``."""
_PARAMETERS: dict[str, JSON] = {
    "type": "object",
    "properties": {
        "message": {
            "type": "string",
            "description": "What to ask or tell the agent, in full sentences. It remembers "
            "the earlier messages of this conversation.",
        }
    },
    "required": ["message"],
    "additionalProperties": False,
}


class AgentState(enum.StrEnum):
    STARTING = "starting"
    CONNECTING = CONNECTING
    READY = READY
    UNAVAILABLE = UNAVAILABLE
    """The card could not be read; another attempt is scheduled (``reason`` says why)."""
    STOPPED = "stopped"


def context_id_for(agent: str, session_key: str) -> str:
    """The remote context id of our conversation ``session_key`` with ``agent``."""
    digest = hashlib.sha256(f"{agent}\0{session_key}".encode()).hexdigest()
    return f"agentik-{digest[:32]}"


class A2aAgentTool(Tool):
    """A remote A2A agent, as the registry and the LLM see it."""

    def __init__(self, source: A2aAgentSource) -> None:
        self._source = source
        self.name = source.config.name
        self.source = A2A_SOURCE + source.config.name
        self.timeout = source.call_timeout + CANCEL_WAIT + 1.0
        self.description = source.config.description or f"The remote agent {self.name!r}."
        self.parameters = _PARAMETERS

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip():
            return _error("the argument 'message' must be a non-empty string")
        return await self._source.call(message, context)


class A2aAgentSource:
    """One configured remote agent: its card, its client, and its tool in the registry."""

    def __init__(
        self, config: A2aAgentConfig, registry: ToolRegistry, *, default_call_timeout: float
    ) -> None:
        self.config = config
        self.registry = registry
        self.call_timeout = config.call_timeout or default_call_timeout
        self.log = logging.getLogger(f"{__package__}.{config.name}")
        self.state = AgentState.STARTING
        self.reason = ""
        self.attempts = 0
        """How many card reads have ended, in success or failure."""
        self.card: AgentCard | None = None
        self.tool = A2aAgentTool(self)
        registry.register(self.tool, source=A2A_SOURCE + config.name, status=CONNECTING)
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._waiting: dict[str, str] = {}
        """Remote context id → the id of its task that waits for input."""
        self._cut: dict[str, str] = {}
        """Remote context id → the id of its task whose call was cut before it ended."""
        self._cancelling: set[asyncio.Task[bool]] = set()

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Read the card in the background; returns at once."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"a2a agent {self.config.name}"
            )

    async def stop(self) -> None:
        """Stop reading the card, finish remote cancellations, close the connections."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._cancelling:
            await asyncio.wait(self._cancelling, timeout=CANCEL_WAIT + 1.0)
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()
        http, self._http = self._http, None
        if http is not None:
            await http.aclose()
        if self.registry.get(self.tool.name) is self.tool:
            self.registry.unregister(self.tool.name)
        self._set_state(AgentState.STOPPED, "")

    async def wait_until(self, predicate: Callable[[A2aAgentSource], bool], within: float) -> None:
        """Wait until ``predicate(self)`` holds; TimeoutError after ``within`` seconds."""
        async with asyncio.timeout(within):
            while not predicate(self):
                await self._changed.wait()

    async def wait_ready(self, within: float) -> None:
        await self.wait_until(lambda s: s.state is AgentState.READY, within)

    def describe(self) -> str:
        """A one-line status for listings."""
        card = self.card
        if self.state is AgentState.READY and card is not None:
            streaming = "streaming" if card.capabilities.streaming else "no streaming"
            skills = len(card.skills)
            return f"ready ({card.name!r}, {skills} skill{'s' * (skills != 1)}, {streaming})"
        return f"{self.state}: {self.reason}" if self.reason else str(self.state)

    def _set_state(self, state: AgentState, reason: str) -> None:
        self.state, self.reason = state, reason
        if self.registry.get(self.tool.name) is self.tool:
            self.registry.set_status(self.tool.name, READY if state is AgentState.READY else state)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- the card -------------------------------------------------------------------

    async def _run(self) -> None:
        self.log.info("A2A agent %r: card at %s", self.config.name, self.config.target)
        self._http = bounded_client(
            self.config.max_response_bytes,
            headers=self.config.headers,
            timeout=httpx.Timeout(self.call_timeout, connect=self.config.connect_timeout),
            follow_redirects=False,
            event_hooks=_trace_hooks(),
        )
        failures = 0
        while True:
            self._set_state(AgentState.CONNECTING, self.reason)
            try:
                async with asyncio.timeout(self.config.connect_timeout):
                    card = await read_card(self._http, self.config)
                self._client = make_client(card, self._http, self.config)
            except Exception as exc:
                reason = why_card_failed(exc, self.config)
            else:
                self.card = card
                self.tool.description = self.config.description or describe(card)
                self.attempts += 1
                self.log.info(
                    "A2A agent %r ready: %r, %d skills, %s",
                    self.config.name,
                    card.name,
                    len(card.skills),
                    "streaming" if card.capabilities.streaming else "no streaming",
                )
                self._set_state(AgentState.READY, "")
                await self._refresh_card(self._http)
                return
            self.attempts += 1
            delay = min(MAX_RETRY, FIRST_RETRY * 2**failures) * random.uniform(0.9, 1.1)
            failures += 1
            level = logging.DEBUG if reason == self.reason else logging.WARNING
            self.log.log(
                level,
                "A2A agent %r unavailable: %s; retrying in %.1f s",
                self.config.name,
                reason,
                delay,
            )
            self._set_state(AgentState.UNAVAILABLE, reason)
            await asyncio.sleep(delay)

    async def _refresh_card(self, http: httpx.AsyncClient) -> None:
        """Read the card again every ``CARD_REFRESH`` seconds: the tool follows the agent's
        skills and interfaces. A card that cannot be read keeps the last one (calls say
        whether the agent answers)."""
        while True:
            await asyncio.sleep(CARD_REFRESH)
            try:
                async with asyncio.timeout(self.config.connect_timeout):
                    card = await read_card(http, self.config)
                if card == self.card:
                    continue
                client = make_client(card, http, self.config)
            except Exception as exc:
                self.log.info(
                    "A2A agent %r: its card could not be read again (%s); keeping the last one",
                    self.config.name,
                    why_card_failed(exc, self.config),
                )
                continue
            # Calls in flight keep the client they started with (they share ``http``).
            self.card, self._client = card, client
            self.tool.description = self.config.description or describe(card)
            self.log.info(
                "A2A agent %r changed its card: %r, %d skills",
                self.config.name,
                card.name,
                len(card.skills),
            )

    # -- calls ----------------------------------------------------------------------

    async def call(self, text: str, context: ToolContext) -> ToolResult:
        """Send ``text`` in this conversation's remote context; failures become errors."""
        client = self._client
        name = self.config.name
        if client is None:
            # Not offered to the LLM, but a call from the history may still name it. The
            # reason stays in the log: it names the card's address, which clients must not see.
            self.log.warning("A2A agent %r called while not available: %s", name, self.describe())
            return _error(f"the agent {name!r} is not available: its card could not be read yet")
        context_id = context_id_for(name, context.session_key or context.session_id)
        message = Message(
            # The same for every attempt of this call: the agent can tell a repeat.
            message_id=context.idempotency_key,
            role=Role.ROLE_USER,
            parts=[Part(text=text)],
            context_id=context_id,
        )
        waiting = self._waiting.pop(context_id, "")
        if waiting:
            message.task_id = waiting
        left = self._cut.pop(context_id, "")
        if left:
            await self._cancel_left(client, left)
        deadline = asyncio.get_running_loop().time() + self.call_timeout
        return await self._exchange(
            client, message, context, deadline, look_for_waiting=not waiting
        )

    async def _exchange(
        self,
        client: Client,
        message: Message,
        context: ToolContext,
        deadline: float,
        *,
        look_for_waiting: bool,
    ) -> ToolResult:
        """Send ``message`` and wait for the answer until ``deadline`` (the loop's clock:
        the call's whole budget, a retry included); cancellable."""
        name, context_id = self.config.name, message.context_id
        call = RemoteCall(name, context)
        reader = asyncio.get_running_loop().create_task(
            self._read(client, SendMessageRequest(message=message), call),
            name=f"a2a call {name} {context.tool_call_id}",
        )
        try:
            async with asyncio.timeout_at(deadline):
                await asyncio.shield(reader)
        except TimeoutError:
            call.abandoned = True
            cancelled = await self._cancel_remote(client, call, reader)
            what = "its task was cancelled" if cancelled else "its task could not be cancelled"
            return self._failed(
                f"the agent {name!r} did not finish within {self.call_timeout:g} s; {what}"
            )
        except ResponseTooLarge as exc:
            # What was read is dropped; the task goes on there unless cancelled, as on a timeout.
            call.abandoned = True
            cancelled = await self._cancel_remote(client, call, reader)
            what = "its task was cancelled" if cancelled else "its task could not be cancelled"
            return self._failed(f"{too_large(name, exc)}; {what}")
        except asyncio.CancelledError:
            # Our run was interrupted: the stream ends now, the remote task is cancelled
            # in the background.
            call.abandoned = True
            cancel = asyncio.get_running_loop().create_task(
                self._cancel_remote(client, call, reader)
            )
            self._cancelling.add(cancel)
            cancel.add_done_callback(self._cancelling.discard)
            raise
        except (A2AError, httpx.HTTPError) as exc:
            refused = isinstance(exc, A2AError) and not isinstance(exc, A2AClientError)
            if refused and look_for_waiting and not call.task_id:
                # Refused before any task began: maybe the context waits for an answer on a
                # task this process does not know of (asked on another replica, or before a
                # restart). Such a task is answered, not left waiting.
                waiting = await self._find_waiting(client, context_id)
                if waiting:
                    message.task_id, message.message_id = waiting, uuid.uuid4().hex
                    return await self._exchange(
                        client, message, context, deadline, look_for_waiting=False
                    )
            if call.running:
                # Cut mid-task (the agent or the network went away): the task may still run
                # there, and would keep this context busy; the next call cancels it first.
                _remember(self._cut, context_id, call.task_id)
            return self._failed(why_call_failed(exc, name), detail=exc)
        except Exception as exc:  # an answer the SDK could not read
            return self._failed(f"the agent {name!r} sent an answer that could not be read", exc)
        return self._result(call, context_id)

    async def _find_waiting(self, client: Client, context_id: str) -> str:
        """The id of a task of ``context_id`` that waits for input, or ""."""
        request = ListTasksRequest(context_id=context_id, page_size=20, history_length=0)
        try:
            async with asyncio.timeout(CANCEL_WAIT):
                page = await client.list_tasks(request)
        except (TimeoutError, A2AError, httpx.HTTPError) as exc:
            self.log.info(
                "A2A agent %r: cannot list the tasks of a context: %r", self.config.name, exc
            )
            return ""
        for task in page.tasks:
            if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                self.log.info(
                    "A2A agent %r: the message answers its waiting task %s",
                    self.config.name,
                    task.id,
                )
                return task.id
        return ""

    async def _read(self, client: Client, request: SendMessageRequest, call: RemoteCall) -> None:
        events: AsyncIterator[StreamResponse] = client.send_message(request)
        async for event in events:
            call.take(event)
        wait = FIRST_POLL
        while call.running:
            # A remote that answered without streaming and left the task running.
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_POLL)
            call.take_task(await client.get_task(GetTaskRequest(id=call.task_id)))

    async def _cancel_remote(
        self, client: Client, call: RemoteCall, reader: asyncio.Task[None]
    ) -> bool:
        """Cancel the remote task of ``call`` (learning its id first if need be), then
        stop reading its stream; whether the task is cancelled (or had ended)."""
        cancelled = False
        try:
            async with asyncio.timeout(CANCEL_WAIT):
                if not reader.done():
                    known = asyncio.ensure_future(call.known.wait())
                    try:
                        await asyncio.wait([reader, known], return_when=asyncio.FIRST_COMPLETED)
                    finally:
                        known.cancel()
                if call.task_id and call.state not in DONE:
                    await client.cancel_task(CancelTaskRequest(id=call.task_id))
                    cancelled = True
                    self.log.info(
                        "A2A agent %r: cancelled its task %s", self.config.name, call.task_id
                    )
                elif call.task_id:
                    cancelled = True  # it ended meanwhile
                else:
                    self.log.warning(
                        "A2A agent %r: the call was stopped before the agent named its task; "
                        "it could not be cancelled",
                        self.config.name,
                    )
        except (TimeoutError, A2AError, httpx.HTTPError) as exc:
            self.log.warning(
                "A2A agent %r: cancelling its task %s failed: %s",
                self.config.name,
                call.task_id or "(unknown)",
                why_call_failed(exc, self.config.name),
            )
        finally:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader
        return cancelled

    async def _cancel_left(self, client: Client, task_id: str) -> None:
        """Cancel a task a cut call left behind (it may have ended meanwhile)."""
        try:
            async with asyncio.timeout(CANCEL_WAIT):
                await client.cancel_task(CancelTaskRequest(id=task_id))
            self.log.info(
                "A2A agent %r: cancelled its task %s left by a cut call", self.config.name, task_id
            )
        except (TimeoutError, A2AError, httpx.HTTPError) as exc:
            self.log.info(
                "A2A agent %r: the task %s left by a cut call was not cancelled: %s",
                self.config.name,
                task_id,
                why_call_failed(exc, self.config.name),
            )

    def _result(self, call: RemoteCall, context_id: str) -> ToolResult:
        name = self.config.name
        state = call.state
        said = clip(call.answer, call.dropped)
        if state in PAUSED and call.task_id:
            _remember(self._waiting, context_id, call.task_id)
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            asks = said or "(no question given)"
            return ToolResult(
                f"The agent {name!r} needs more input before it can finish: {asks}\n"
                f"Call {name} again with the answer to go on with the same task."
            )
        if state == TaskState.TASK_STATE_AUTH_REQUIRED:
            return self._failed(f"the agent {name!r} asks for authentication: {said}".rstrip())
        if state == TaskState.TASK_STATE_FAILED:
            return _error(f"the agent {name!r} failed: {said or 'it gave no reason'}")
        if state == TaskState.TASK_STATE_REJECTED:
            return _error(f"the agent {name!r} refused the request: {said or 'no reason given'}")
        if state == TaskState.TASK_STATE_CANCELED:
            return _error(f"the task of the agent {name!r} was cancelled")
        if not call.task_id and not call.reply:
            return self._failed(f"the agent {name!r} answered nothing")
        return ToolResult(said or f"(the agent {name!r} finished without an answer)")

    def _failed(self, message: str, detail: BaseException | None = None) -> ToolResult:
        """A call the agent did not answer: logged (with the details), and the result."""
        if detail is not None:
            self.log.warning("A2A call failed: %s (%r)", message, detail)
        else:
            self.log.warning("A2A call failed: %s", message)
        return _error(message)


def _trace_hooks() -> dict[str, list[Callable[[httpx.Request], Awaitable[None]]]]:
    """With tracing on, each call carries the calling tool span's ``traceparent``, so the
    remote agent's spans (another agentik's) join our run's trace."""
    from agentik import tracing

    if not tracing.enabled():
        return {}

    async def inject(request: httpx.Request) -> None:
        for key, value in tracing.trace_metadata():
            request.headers[key] = value

    return {"request": [inject]}


def _remember(tasks: dict[str, str], context_id: str, task_id: str) -> None:
    """Keep ``task_id`` for ``context_id``; past ``MAX_REMEMBERED`` contexts the oldest is
    forgotten (its next call then goes as a new message: see ``_find_waiting``)."""
    tasks.pop(context_id, None)
    tasks[context_id] = task_id
    while len(tasks) > MAX_REMEMBERED:
        del tasks[next(iter(tasks))]


def _error(text: str) -> ToolResult:
    return ToolResult(f"error: {text}", is_error=True)
