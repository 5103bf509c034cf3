"""``Tool``, what a call gets (``ToolContext``) and what it gives back (``ToolResult``)."""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from engine_service.core.events import EventBody
from engine_service.core.models import JSON, ContentPart, Interrupt, ResumeEntry

__all__ = [
    "TOOL_PROGRESS",
    "Answers",
    "Delegated",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolResult",
    "session_key",
]

TOOL_PROGRESS = "tool_progress"
"""The name of the ``CUSTOM`` events a tool sends while it works (MCP progress
notifications, a remote agent's status updates); the value names ``tool_call_id``."""


class ToolError(Exception):
    """Raised by a tool to give the LLM an error result with this message."""


@dataclass(frozen=True, slots=True)
class Delegated:
    """A run a tool started (a local agent's, ``tools/agents.py``) stopped to ask a person:
    its interrupts, which the calling run raises as its own so that its person answers
    them (``core.asks``); the answers go back to the tool (``ToolContext.answers``)."""

    agent: str
    conversation_id: str
    """The conversation the interrupts are pending in."""
    interrupts: list[Interrupt]


@dataclass(frozen=True, slots=True)
class Answers:
    """A person's answers to a ``Delegated`` tool's interrupts: the call is made again to
    carry them down to ``conversation_id`` (as resume entries of its pending interrupts)."""

    conversation_id: str
    entries: list[ResumeEntry]


@dataclass(slots=True)
class ToolResult:
    """What the LLM gets back: text (JSON text for structured results) and extra parts.

    With ``delegated`` the call is not over: the run asks its person (the result is not
    stored), and calls the tool again with the answers."""

    content: str
    is_error: bool = False
    parts: list[ContentPart] = field(default_factory=list)
    delegated: Delegated | None = None


@dataclass(slots=True)
class ToolContext:
    """What a running tool may see and do besides its arguments."""

    session_id: str
    run_id: str
    tool_call_id: str
    emit: Callable[[EventBody], object]
    """Publish an event into the run's stream (progress, state changes)."""
    get_state: Callable[[], JSON]
    set_state: Callable[[JSON], None]
    """Replace the session's shared state (the caller emits the matching event)."""
    session_key: str = ""
    """A stable, opaque name of this conversation: the same on every replica and after
    restarts, but different for a conversation made later under a deleted one's id (a
    tool that keeps remote state per conversation keys it by this, not by ``session_id``)."""
    max_state_bytes: int | None = None
    """The most the shared state may hold as JSON (``core.state``); None: no bound."""

    call_run_id: str = ""
    """The run whose LLM round made the call ("": this one; a call a person approved
    runs in the run that carries out the answer)."""

    answers: Answers | None = None
    """A person's answers to what this call's earlier attempt asked (``Delegated``): the
    call carries them down instead of starting over."""

    @property
    def idempotency_key(self) -> str:
        """The same for every attempt of this call (a run resumed after its engine died,
        or a person's approval to run it again, may call it again): a tool with side
        effects does them once per key. MCP servers get it in ``_meta``, remote A2A
        agents as the message id."""
        return f"{self.call_run_id or self.run_id}:{self.tool_call_id}"


def session_key(session_id: str, owner: str, created_at: datetime) -> str:
    """``ToolContext.session_key`` of a session with this id, owner and creation time."""
    created = created_at.astimezone(UTC).isoformat()  # exact, whatever zone the store gave
    material = f"{session_id}\0{owner}\0{created}".encode()
    return hashlib.sha256(material).hexdigest()[:32]


class Tool(abc.ABC):
    """A tool the engine runs itself (native or MCP)."""

    name: str
    description: str
    parameters: dict[str, JSON]
    """JSON Schema of the arguments (an object schema)."""
    source: str = "native"
    timeout: float | None = None
    """Seconds the run loop allows one call; None means the engine's tool timeout. A tool
    that enforces its own deadline (an MCP tool) sets this a little above it."""

    @abc.abstractmethod
    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        """Run the tool. Raise ``ToolError`` for a failure the LLM should read."""
