"""AG-UI 1.0 events as the core emits them.

An :class:`Event` is an envelope (``seq``, time, session and run ids) around one body
dataclass per AG-UI event kind, the same shape as the ``Event`` oneof of the gRPC
contract. Bodies are small slotted dataclasses: one is built for every streamed token,
so they stay cheap.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TypeAlias

from engine_service.core.models import JSON, ContentPart, Interrupt, Message

__all__ = [
    "ANSWER_STARTS",
    "Custom",
    "Event",
    "EventBody",
    "MessageStored",
    "MessagesSnapshot",
    "Outcome",
    "Raw",
    "ReasoningEnd",
    "ReasoningMessageContent",
    "ReasoningMessageEnd",
    "ReasoningMessageStart",
    "ReasoningStart",
    "RunError",
    "RunFinished",
    "RunStarted",
    "StateDelta",
    "StateSnapshot",
    "StepFinished",
    "StepStarted",
    "TERMINAL",
    "TextMessageContent",
    "TextMessageEnd",
    "TextMessageStart",
    "ToolCallArgs",
    "ToolCallEnd",
    "ToolCallResult",
    "ToolCallStart",
    "Usage",
]


class Outcome(enum.StrEnum):
    SUCCESS = "success"
    INTERRUPT = "interrupt"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    """Of ``input_tokens``, those the LLM served from its prompt cache (when it says)."""

    def add(self, other: Usage) -> None:
        """Count ``other``'s tokens too."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cached_tokens += other.cached_tokens
        self.total_tokens = self.input_tokens + self.output_tokens


@dataclass(slots=True)
class RunStarted:
    parent_run_id: str = ""


@dataclass(slots=True)
class RunFinished:
    outcome: Outcome = Outcome.SUCCESS
    pending_tool_call_ids: list[str] = field(default_factory=list)
    usage: Usage | None = None
    result: JSON = None
    interrupts: list[Interrupt] = field(default_factory=list)
    """What the run waits for (outcome INTERRUPT)."""


@dataclass(slots=True)
class RunError:
    message: str
    code: str
    usage: Usage | None = None
    """Tokens the run used before it failed, when the LLM reported any."""


@dataclass(slots=True)
class StepStarted:
    step_name: str


@dataclass(slots=True)
class StepFinished:
    step_name: str


@dataclass(slots=True)
class TextMessageStart:
    message_id: str
    role: str = "assistant"


@dataclass(slots=True)
class TextMessageContent:
    message_id: str
    delta: str


@dataclass(slots=True)
class TextMessageEnd:
    message_id: str


@dataclass(slots=True)
class ToolCallStart:
    tool_call_id: str
    tool_call_name: str
    parent_message_id: str = ""


@dataclass(slots=True)
class ToolCallArgs:
    tool_call_id: str
    delta: str


@dataclass(slots=True)
class ToolCallEnd:
    tool_call_id: str


@dataclass(slots=True)
class ToolCallResult:
    message_id: str
    tool_call_id: str
    content: str
    is_error: bool = False
    parts: list[ContentPart] = field(default_factory=list)


@dataclass(slots=True)
class ReasoningStart:
    message_id: str


@dataclass(slots=True)
class ReasoningMessageStart:
    message_id: str


@dataclass(slots=True)
class ReasoningMessageContent:
    message_id: str
    delta: str


@dataclass(slots=True)
class ReasoningMessageEnd:
    message_id: str


@dataclass(slots=True)
class ReasoningEnd:
    message_id: str


@dataclass(slots=True)
class StateSnapshot:
    snapshot: JSON


@dataclass(slots=True)
class StateDelta:
    delta: list[JSON]
    """RFC 6902 JSON Patch operations."""


@dataclass(slots=True)
class MessagesSnapshot:
    messages: list[Message]


@dataclass(slots=True)
class Custom:
    name: str
    value: JSON = None


@dataclass(slots=True)
class Raw:
    event: JSON
    source: str = ""


@dataclass(slots=True)
class MessageStored:
    """agentik's own event: a message entered the session's history."""

    message: Message


EventBody: TypeAlias = (
    RunStarted
    | RunFinished
    | RunError
    | StepStarted
    | StepFinished
    | TextMessageStart
    | TextMessageContent
    | TextMessageEnd
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | ToolCallResult
    | ReasoningStart
    | ReasoningMessageStart
    | ReasoningMessageContent
    | ReasoningMessageEnd
    | ReasoningEnd
    | StateSnapshot
    | StateDelta
    | MessagesSnapshot
    | Custom
    | Raw
    | MessageStored
)

TERMINAL = (RunFinished, RunError)
"""The bodies that end a run."""
ANSWER_STARTS = (TextMessageStart, ToolCallStart, ReasoningStart)
"""The bodies that start an answer: its first token, which a caller waits for."""


@dataclass(slots=True)
class Event:
    """One event of a session: ``seq`` grows by one per event within the session."""

    seq: int
    time: float
    """Seconds since the epoch."""
    session_id: str
    run_id: str
    body: EventBody
