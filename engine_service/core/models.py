"""The engine's domain types: sessions, messages, runs and run input.

These are plain dataclasses with no transport in sight; the gRPC edge converts them
to and from the protobuf contract (``engine_service.convert``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from engine_service.core.deliveries import PushConfig

__all__ = [
    "ClientTool",
    "ContentPart",
    "DocumentPart",
    "ContextItem",
    "ImagePart",
    "Interrupt",
    "InterruptKind",
    "JSON",
    "Message",
    "MessageStatus",
    "ReconcileMode",
    "ResumeEntry",
    "ResumeStatus",
    "Role",
    "RunInput",
    "RunRecord",
    "RunStatus",
    "Session",
    "TextPart",
    "ToolCall",
    "UNSET",
    "Unset",
    "message_text",
]

JSON: TypeAlias = Any
"""A JSON value: None, bool, int, float, str, list or dict of JSON values."""


class Unset(enum.Enum):
    """Marks an optional field the caller did not send (distinct from JSON null)."""

    UNSET = "unset"


UNSET = Unset.UNSET


class Role(enum.StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    DEVELOPER = "developer"
    TOOL = "tool"


class MessageStatus(enum.StrEnum):
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"
    ERROR = "error"


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    INPUT_REQUIRED = "input_required"
    """Ended waiting for a person (outcome interrupt); see ``RunRecord.interrupts``."""


class ReconcileMode(enum.StrEnum):
    APPEND = "append"
    REPLACE = "replace"


@dataclass(slots=True)
class TextPart:
    text: str


@dataclass(slots=True)
class ImagePart:
    """An image by URL, or inline bytes with their MIME type."""

    url: str = ""
    data: bytes = b""
    mime_type: str = ""


@dataclass(slots=True)
class DocumentPart:
    """A document (a PDF): inline bytes with their MIME type, or a file the LLM provider
    already holds, by its id. Sent only to models that take documents."""

    data: bytes = b""
    file_id: str = ""
    mime_type: str = ""
    filename: str = ""


ContentPart: TypeAlias = TextPart | ImagePart | DocumentPart


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as JSON text, exactly as the LLM produced them."""


@dataclass(slots=True)
class Message:
    id: str
    role: Role
    content: list[ContentPart] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""
    status: MessageStatus = MessageStatus.COMPLETE
    created_at: datetime | None = None
    run_id: str = ""
    name: str = ""
    metadata: dict[str, JSON] | None = None
    """The client's own information about the message (AG-UI ``metadata``): stored and
    handed back as sent, never sent to the LLM."""


class InterruptKind(enum.StrEnum):
    APPROVAL = "approval"
    """A tool call that needs a person's approval before it runs."""
    QUESTION = "question"
    """A question the LLM asks the person (the ``ask_user`` tool)."""


@dataclass(slots=True)
class Interrupt:
    """What a run stopped to ask a person; pending on the session until resumed."""

    id: str
    kind: InterruptKind
    run_id: str
    tool_call: ToolCall
    message: str
    """What is asked, for a person."""
    payload: JSON = None
    """The structured request: {"tool", "arguments"} or {"question", "choices"?}."""
    expires_at: datetime | None = None
    """When it counts as declined if still unanswered; None: never."""

    def expired(self, now: datetime) -> bool:
        return self.expires_at is not None and now >= self.expires_at


class ResumeStatus(enum.StrEnum):
    RESOLVED = "resolved"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class ResumeEntry:
    """A person's answer to one pending interrupt (AG-UI ``ResumeEntry``)."""

    interrupt_id: str
    status: ResumeStatus
    payload: JSON = None


def message_text(message: Message) -> str:
    """The text parts of a message joined together."""
    return "".join(p.text for p in message.content if isinstance(p, TextPart))


@dataclass(slots=True)
class Session:
    id: str
    title: str
    created_at: datetime
    updated_at: datetime
    message_count: int = 0
    state: JSON = None
    last_seq: int = 0
    active_run_id: str = ""
    reserved_seq: int = 0
    """The highest seq an engine may have handed out: at least ``last_seq``. After a crash
    the events between the two were seen by clients but never stored, so their seqs are
    skipped, never reused."""
    owner: str = ""
    """The principal that created the session ("" when it was made without credentials)."""
    interrupts: list[Interrupt] = field(default_factory=list)
    """What the session waits for from a person (not yet resumed)."""
    input_tokens: int = 0
    """Tokens the LLM read over all the session's runs, as it reported them."""
    output_tokens: int = 0
    cached_tokens: int = 0
    """Of ``input_tokens``, those the LLM served from its prompt cache (when it says)."""
    webhook_url: str = ""
    """The conversation's default run webhook: runs that name none are told here."""
    agent: str = ""
    """The agent the session belongs to, named at its creation ("": stored before agents
    existed, the default agent's; ``core.agents``)."""


@dataclass(slots=True)
class RunRecord:
    """One run as stored: a run is an A2A task too, so it outlives its stream."""

    id: str
    session_id: str
    status: RunStatus
    started_at: datetime
    finished_at: datetime | None = None
    error_code: str = ""
    error_message: str = ""
    pending_tool_call_ids: list[str] = field(default_factory=list)
    """Client tool calls the run ended waiting for."""
    start_seq: int = 0
    """Seq of the run's first event (RUN_STARTED)."""
    replica: str = ""
    """The engine replica holding the run while it is RUNNING ("" for none, or unknown)."""
    lease_until: datetime | None = None
    """Until when that replica's lease on the RUNNING run holds; None: no lease."""
    interrupts: list[Interrupt] = field(default_factory=list)
    """What the run ended waiting for (status INPUT_REQUIRED)."""
    resumed_by: str = ""
    """The run that resumed this one's interrupts ("" while none has)."""
    parent_run_id: str = ""
    input_tokens: int = 0
    """Tokens the LLM read during the run, as it reported them (0 while running)."""
    output_tokens: int = 0
    cached_tokens: int = 0


@dataclass(slots=True)
class ClientTool:
    """A tool the client offers for one run (AG-UI frontend tool)."""

    name: str
    description: str
    parameters: dict[str, JSON]


@dataclass(slots=True)
class ContextItem:
    description: str
    value: str


@dataclass(slots=True)
class RunInput:
    """One run as asked for; mirrors AG-UI's RunAgentInput (its threadId is ``session_id``)."""

    session_id: str
    run_id: str = ""
    messages: list[Message] = field(default_factory=list)
    tools: list[ClientTool] = field(default_factory=list)
    context: list[ContextItem] = field(default_factory=list)
    state: JSON | Unset = UNSET
    forwarded_props: dict[str, JSON] = field(default_factory=dict)
    reconcile: ReconcileMode = ReconcileMode.APPEND
    create_session: bool = False
    cancel_on_disconnect: bool = False
    parent_run_id: str = ""
    messages_snapshot: bool = False
    resume: list[ResumeEntry] = field(default_factory=list)
    webhook_url: str = ""
    """Where to POST the run's outcome when it ends (``core.run_webhooks``); empty: nowhere."""
    push_configs: list[PushConfig] = field(default_factory=list)
    """Push configs of the run's task, stored as the run begins (A2A)."""
    agent: str = ""
    """The agent of a session this run creates ("": the default); for a session that
    exists, its own agent or "" (``core.agents``)."""
