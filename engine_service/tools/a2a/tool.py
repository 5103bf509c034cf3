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
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import json
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx
from a2a.client import A2AClientError, A2AClientTimeoutError, Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.types import (
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError
from google.protobuf import json_format
from google.protobuf.message import Error as ProtobufError

from agentik.config import A2aAgentConfig
from engine_service.core.events import Custom
from engine_service.core.models import JSON
from engine_service.core.registry import READY, ToolRegistry
from engine_service.core.tool import TOOL_PROGRESS, Tool, ToolContext, ToolResult
from engine_service.tools.a2a.bounded import ResponseTooLarge, bounded_client

__all__ = ["A2aAgentSource", "A2aAgentTool", "AgentState", "context_id_for"]

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
MAX_RESULT_CHARS = 100_000
MAX_DESCRIPTION_CHARS = 4_000
MAX_CARD_BYTES = 1024 * 1024
MAX_PROGRESS_CHARS = 2_000
MAX_REMEMBERED = 10_000
"""Contexts whose waiting (or cut) remote task the engine keeps in memory."""
MAX_ERROR_CHARS = 2_000
"""A remote's error message longer than this is cut (in the result and in the log)."""
A2A_SOURCE = "a2a:"
"""The registry source of a remote A2A agent's tool: ``a2a:NAME``."""
PROGRESS_EVERY = 0.1
"""Seconds between two progress events of one call: a chatty (or hostile) agent's status
messages in between are not streamed (the answer is not affected)."""
_BINDINGS = ["JSONRPC", "HTTP+JSON"]
_DONE = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
_PAUSED = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
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


@dataclass(slots=True)
class _Call:
    """One message to the remote agent and what came back so far."""

    agent: str
    context: ToolContext
    task_id: str = ""
    state: TaskState = TaskState.TASK_STATE_UNSPECIFIED
    status_text: str = ""
    reply: str = ""
    """The text of a direct reply (a Message instead of a task)."""
    artifacts: dict[str, list[str]] = field(default_factory=dict)
    abandoned: bool = False
    """Our run stopped waiting: no more progress events."""
    known: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the task id (or a direct reply) has arrived."""
    progress: int = 0
    last_report: float = 0.0
    kept: int = 0
    """Characters of artifact text kept so far."""
    dropped: int = 0
    """Characters of artifact text past the answer's limit, not kept (but counted)."""

    def take(self, event: StreamResponse) -> None:
        if event.HasField("message"):
            self.reply = _text(event.message.parts)
            self.known.set()
        elif event.HasField("task"):
            self.take_task(event.task)
        elif event.HasField("status_update"):
            update = event.status_update
            self.task_id = update.task_id or self.task_id
            self.known.set()
            self.state = update.status.state
            if update.status.HasField("message"):
                self.status_text = _text(update.status.message.parts)
                self.report(self.status_text)
        elif event.HasField("artifact_update"):
            update_a = event.artifact_update
            self.task_id = update_a.task_id or self.task_id
            self.known.set()
            artifact = update_a.artifact
            chunks = self.artifacts.setdefault(artifact.artifact_id, [])
            if not update_a.append:
                self.kept -= sum(len(chunk) for chunk in chunks)
                chunks.clear()
            chunk = _text(artifact.parts)
            if self.kept <= MAX_RESULT_CHARS:  # past that it would be clipped anyway
                self.kept += len(chunk)
                chunks.append(chunk)
            else:
                self.dropped += len(chunk)

    def take_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self.known.set()
        self.state = task.status.state
        if task.status.HasField("message"):
            self.status_text = _text(task.status.message.parts)
        if task.artifacts:
            self.artifacts = {a.artifact_id: [_text(a.parts)] for a in task.artifacts}
        if not self.status_text and not task.artifacts:
            agent_says = [m for m in task.history if m.role == Role.ROLE_AGENT]
            if agent_says:
                self.status_text = _text(agent_says[-1].parts)

    def report(self, text: str) -> None:
        now = time.monotonic()
        if self.abandoned or not text or now - self.last_report < PROGRESS_EVERY:
            return
        self.last_report = now
        if len(text) > MAX_PROGRESS_CHARS:
            text = text[: MAX_PROGRESS_CHARS - 1] + "…"
        self.progress += 1
        value: JSON = {
            "tool_call_id": self.context.tool_call_id,
            "progress": self.progress,
            "total": None,
            "message": text,
            "agent": self.agent,
            "state": _state_name(self.state),
        }
        self.context.emit(Custom(TOOL_PROGRESS, value))

    @property
    def answer(self) -> str:
        texts = ["".join(chunks) for chunks in self.artifacts.values()]
        return "\n".join(t for t in texts if t) or self.reply or self.status_text


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
                    card = await self._read_card(self._http)
                self._client = self._make_client(card, self._http)
            except Exception as exc:
                reason = _why_card_failed(exc, self.config)
            else:
                self.card = card
                self.tool.description = self.config.description or _describe(card)
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
                    card = await self._read_card(http)
                if card == self.card:
                    continue
                client = self._make_client(card, http)
            except Exception as exc:
                self.log.info(
                    "A2A agent %r: its card could not be read again (%s); keeping the last one",
                    self.config.name,
                    _why_card_failed(exc, self.config),
                )
                continue
            # Calls in flight keep the client they started with (they share ``http``).
            self.card, self._client = card, client
            self.tool.description = self.config.description or _describe(card)
            self.log.info(
                "A2A agent %r changed its card: %r, %d skills",
                self.config.name,
                card.name,
                len(card.skills),
            )

    async def _read_card(self, http: httpx.AsyncClient) -> AgentCard:
        headers = {"Accept": "application/json"}
        async with http.stream("GET", self.config.card_url, headers=headers) as response:
            if response.status_code != 200:
                raise _CardError(f"HTTP {response.status_code} from {self.config.target}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise _CardError(
                        f"the card at {self.config.target} is larger than {MAX_CARD_BYTES:,} bytes"
                    )
        try:
            raw = json.loads(body)
        except ValueError:
            raise _CardError(f"{self.config.target} did not answer JSON") from None
        try:
            return parse_agent_card(raw)
        except (json_format.ParseError, ProtobufError, TypeError, ValueError) as exc:
            raise _CardError(f"{self.config.target} is not a valid agent card: {exc}") from None

    def _make_client(self, card: AgentCard, http: httpx.AsyncClient) -> Client:
        interfaces = [i for i in card.supported_interfaces if i.protocol_binding in _BINDINGS]
        if self.config.endpoint:
            version = next((i.protocol_version for i in interfaces), "1.0") or "1.0"
            interfaces = [
                AgentInterface(
                    url=self.config.endpoint, protocol_binding="JSONRPC", protocol_version=version
                )
            ]
        elif self.config.headers:
            # Credentials meant for the card's host go nowhere else.
            ours = _origin(self.config.card_url)
            foreign = [i.url for i in interfaces if _origin(i.url) != ours]
            interfaces = [i for i in interfaces if _origin(i.url) == ours]
            if not interfaces and foreign:
                raise _CardError(
                    f"the card names only endpoints on another origin than its own "
                    f"({', '.join(_origin(url) for url in foreign)}); the configured headers are "
                    "not sent there: set 'endpoint' to call one of them"
                )
        if not interfaces:
            raise _CardError("the card names no JSON-RPC or HTTP+JSON interface")
        chosen = AgentCard()
        chosen.CopyFrom(card)  # the card as read stays as it was (compared when re-read)
        del chosen.supported_interfaces[:]
        chosen.supported_interfaces.extend(interfaces)
        # An agent that does not stream is asked to answer at once with its task, which is
        # then polled: its id is known from the start, so a timeout or an interrupt can
        # cancel it (a blocking send would name the task only with its final answer).
        config = ClientConfig(
            streaming=True,
            polling=not card.capabilities.streaming,
            httpx_client=http,
            supported_protocol_bindings=list(_BINDINGS),
        )
        return ClientFactory(config).create(chosen)

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
        call = _Call(name, context)
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
            return self._failed(f"{_too_large(name, exc)}; {what}")
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
            if call.task_id and call.state not in _DONE | _PAUSED:
                # Cut mid-task (the agent or the network went away): the task may still run
                # there, and would keep this context busy; the next call cancels it first.
                _remember(self._cut, context_id, call.task_id)
            return self._failed(_why_call_failed(exc, name), detail=exc)
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

    async def _read(self, client: Client, request: SendMessageRequest, call: _Call) -> None:
        events: AsyncIterator[StreamResponse] = client.send_message(request)
        async for event in events:
            call.take(event)
        wait = FIRST_POLL
        while call.task_id and call.state not in _DONE | _PAUSED:
            # A remote that answered without streaming and left the task running.
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_POLL)
            call.take_task(await client.get_task(GetTaskRequest(id=call.task_id)))

    async def _cancel_remote(self, client: Client, call: _Call, reader: asyncio.Task[None]) -> bool:
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
                if call.task_id and call.state not in _DONE:
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
                _why_call_failed(exc, self.config.name),
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
                _why_call_failed(exc, self.config.name),
            )

    def _result(self, call: _Call, context_id: str) -> ToolResult:
        name = self.config.name
        state = call.state
        said = _clip(call.answer, call.dropped)
        if state in _PAUSED and call.task_id:
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


class _CardError(Exception):
    """Why a card is unusable, in words for ``agentik tools``."""


def _remember(tasks: dict[str, str], context_id: str, task_id: str) -> None:
    """Keep ``task_id`` for ``context_id``; past ``MAX_REMEMBERED`` contexts the oldest is
    forgotten (its next call then goes as a new message: see ``_find_waiting``)."""
    tasks.pop(context_id, None)
    tasks[context_id] = task_id
    while len(tasks) > MAX_REMEMBERED:
        del tasks[next(iter(tasks))]


def _error(text: str) -> ToolResult:
    return ToolResult(f"error: {text}", is_error=True)


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


def _clip(text: str, dropped: int = 0, limit: int = MAX_RESULT_CHARS) -> str:
    """``text`` cut at ``limit`` characters, with a note of how long it was (``dropped``:
    characters that were never kept)."""
    if len(text) <= limit and not dropped:
        return text
    whole = len(text) + dropped
    return text[:limit] + f"\n(truncated: the answer had {whole:,} characters)"


def _state_name(state: TaskState) -> str:
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def _text(parts: Iterable[Part]) -> str:
    """The parts as text: text as is, data as JSON, files by name and URL."""
    texts: list[str] = []
    for part in parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            value = json_format.MessageToDict(part.data)
            texts.append(json.dumps(value, ensure_ascii=False))
        elif part.HasField("url") or part.HasField("raw"):
            label = part.filename or part.media_type or "file"
            texts.append(f"[{label}: {part.url}]" if part.url else f"[{label}]")
    return "\n".join(texts)


def _describe(card: AgentCard) -> str:
    """The tool description the LLM reads: who the agent is and its skills."""
    lines = [f"Ask the remote agent {card.name!r} and get its answer."]
    if card.description:
        lines.append(card.description.strip())
    if card.skills:
        lines.append("Its skills:")
        for skill in card.skills:
            line = f"- {skill.name or skill.id}"
            if skill.description:
                line += f": {skill.description.strip()}"
            if skill.examples:
                line += " (for example: " + "; ".join(repr(e) for e in skill.examples[:3]) + ")"
            lines.append(line)
    text = "\n".join(lines)
    return text if len(text) <= MAX_DESCRIPTION_CHARS else text[: MAX_DESCRIPTION_CHARS - 1] + "…"


def _too_large(name: str, exc: ResponseTooLarge) -> str:
    return (
        f"the agent {name!r} sent an answer over {exc.limit:,} bytes "
        "([[a2a.agents]] max_response_bytes)"
    )


def _why_card_failed(exc: Exception, config: A2aAgentConfig) -> str:
    if isinstance(exc, _CardError):
        return str(exc)
    if isinstance(exc, ResponseTooLarge):
        return (
            f"the card at {config.target} is larger than {exc.limit:,} bytes "
            "([[a2a.agents]] max_response_bytes)"
        )
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return f"no card within the connect timeout of {config.connect_timeout:g} s"
    if isinstance(exc, httpx.HTTPError):
        return f"cannot reach {config.target}: {exc or type(exc).__name__}"
    if isinstance(exc, ValueError):  # the SDK's client factory: no usable transport
        return f"cannot call the agent: {exc}"
    return f"{type(exc).__name__}: {exc}"


def _why_call_failed(exc: BaseException, name: str) -> str:
    """Words for the LLM (and the client that sees tool results): no address, no trace."""
    if isinstance(exc, A2AClientTimeoutError | httpx.TimeoutException | TimeoutError):
        return f"the agent {name!r} did not answer in time"
    if isinstance(exc, ResponseTooLarge):  # while cancelling or listing tasks
        return _too_large(name, exc)
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError) or isinstance(exc, httpx.HTTPStatusError):
        status_error = cause if isinstance(cause, httpx.HTTPStatusError) else exc
        assert isinstance(status_error, httpx.HTTPStatusError)
        return f"the agent {name!r} answered HTTP {status_error.response.status_code}"
    if isinstance(exc, httpx.TransportError) or isinstance(cause, httpx.TransportError):
        return f"the agent {name!r} is unreachable"
    if isinstance(exc, A2AClientError | httpx.HTTPError):
        # It answered, but not in A2A (not JSON, not an event stream, ...).
        return f"the agent {name!r} sent an answer that could not be read"
    message = getattr(exc, "message", "") or str(exc) or type(exc).__name__
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "…"
    return f"the agent {name!r} refused the call: {message}"
