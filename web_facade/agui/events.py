"""The one table that maps the engine's events to AG-UI 1.0 events.

The engine already speaks AG-UI: each ``Event.kind`` becomes the ``ag_ui.core`` event of the
same name, with ``threadId``/``runId`` on the run events, ``protocolVersion: "1.0"`` on
RUN_STARTED and the event's time as ``timestamp`` (ms). Three rows do more than rename:

- ``run_finished``: the outcome becomes ``{"type": "success", "pendingToolCallIds"?}``,
  ``{"type": "interrupt", "interrupts": [...]}`` (see :func:`interrupt_to_agui`) or
  ``{"type": "cancelled"}``; usage becomes a one-entry ``TokenUsage`` list (on
  RUN_ERROR too, AG-UI's own field; cached tokens as ``cachedInputTokens``);
- ``tool_call_result``: content is the text, or text and image parts when the tool
  returned images;
- ``messages_snapshot``: the stored messages as AG-UI messages, ids unchanged;
- ``custom``: long-running work is an ``ACTIVITY_SNAPSHOT`` (AG-UI 2026): ``tool_progress``
  (``activityType`` ``tool_progress``, ``messageId`` ``{toolCallId}-progress``) and
  ``compacted`` (``activityType`` ``compaction``, ``messageId``
  ``compaction-{through_message_id}``); the stream turns a tool's later progress into
  ``ACTIVITY_DELTA`` (:class:`web_facade.agui.stream.AguiStream`). Other custom events
  (``superseded``, ``resumed``, ...) stay ``CUSTOM``.

``message_stored`` is agentik's own extension, not an AG-UI event: it has no row.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    ActivitySnapshotEvent,
    AssistantMessage,
    BaseEvent,
    ContentPart,
    CustomEvent,
    DataSource,
    DeveloperMessage,
    DocumentPart,
    FileSource,
    FunctionCall,
    ImagePart,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    RawEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    TokenUsage,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)
from ag_ui.core.events import TextMessageRole

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.proto_json import json_value

__all__ = [
    "COMPACTION",
    "EVENT_TABLE",
    "INTERRUPT_KINDS",
    "INTERRUPT_REASONS",
    "TEXT_ROLES",
    "TOOL_PROGRESS",
    "interrupt_to_agui",
    "message_to_agui",
    "run_error",
    "to_agui",
]

Mapper = Callable[[pb.Event], BaseEvent]

TEXT_ROLES: dict[int, TextMessageRole] = {
    # A text message's role by the engine's; any other is the assistant's.
    pb.ROLE_USER: "user",
    pb.ROLE_SYSTEM: "system",
    pb.ROLE_DEVELOPER: "developer",
}


INTERRUPT_REASONS: dict[int, str] = {
    pb.INTERRUPT_KIND_APPROVAL: "tool_approval",
    pb.INTERRUPT_KIND_QUESTION: "question",
}
"""The engine's interrupt kind → AG-UI ``Interrupt.reason``."""

INTERRUPT_KINDS: dict[int, str] = {
    pb.INTERRUPT_KIND_APPROVAL: "approval",
    pb.INTERRUPT_KIND_QUESTION: "question",
}
"""The engine's interrupt kind → ``Interrupt.metadata.kind``."""


def _millis(event: pb.Event) -> int:
    return event.time.seconds * 1000 + event.time.nanos // 1_000_000


# -- messages -------------------------------------------------------------------------


def _document(document: pb.DocumentPart) -> DocumentPart:
    metadata = {"filename": document.filename} if document.filename else None
    if document.WhichOneof("source") == "file_id":
        source: DataSource | FileSource = FileSource(
            value=document.file_id, mime_type=document.mime_type or None
        )
    else:
        data = base64.b64encode(document.data).decode("ascii")
        source = DataSource(value=data, mime_type=document.mime_type)
    return DocumentPart(source=source, metadata=metadata)


def _part(part: pb.ContentPart) -> TextPart | ImagePart | DocumentPart:
    kind = part.WhichOneof("part")
    if kind == "document":
        return _document(part.document)
    if kind != "image":
        return TextPart(text=part.text.text)
    image = part.image
    if image.WhichOneof("source") == "data":
        data = base64.b64encode(image.data).decode("ascii")
        return ImagePart(source=DataSource(value=data, mime_type=image.mime_type))
    return ImagePart(source=UrlSource(value=image.url, mime_type=image.mime_type or None))


def _content(parts: list[pb.ContentPart]) -> str | list[ContentPart]:
    """Plain text when every part is text; the parts otherwise."""
    if all(p.WhichOneof("part") in ("text", None) for p in parts):
        return "".join(p.text.text for p in parts)
    return [_part(p) for p in parts]


def _text(message: pb.Message) -> str:
    return "".join(p.text.text for p in message.content if p.WhichOneof("part") == "text")


def message_to_agui(message: pb.Message) -> Message:
    """A stored message as an AG-UI message with the same id and ``metadata``."""
    converted = _message_to_agui(message)
    if message.HasField("metadata"):
        converted.metadata = json_value(message.metadata)
    return converted


def _message_to_agui(message: pb.Message) -> Message:
    name = message.name or None
    if message.role == pb.ROLE_ASSISTANT:
        calls = [
            ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.arguments))
            for c in message.tool_calls
        ]
        return AssistantMessage(
            id=message.id, name=name, content=_text(message) or None, tool_calls=calls or None
        )
    if message.role == pb.ROLE_TOOL:
        failed = message.status == pb.MESSAGE_STATUS_ERROR
        return ToolMessage(
            id=message.id,
            tool_call_id=message.tool_call_id,
            content=_content(list(message.content)),
            error=_text(message) if failed else None,
        )
    if message.role == pb.ROLE_SYSTEM:
        return SystemMessage(id=message.id, name=name, content=_text(message))
    if message.role == pb.ROLE_DEVELOPER:
        return DeveloperMessage(id=message.id, name=name, content=_text(message))
    return UserMessage(id=message.id, name=name, content=_content(list(message.content)))


# -- events ---------------------------------------------------------------------------


def _run_started(event: pb.Event) -> BaseEvent:
    return RunStartedEvent(
        thread_id=event.session_id,
        run_id=event.run_id,
        protocol_version=PROTOCOL_VERSION,
        parent_run_id=event.run_started.parent_run_id or None,
    )


def interrupt_to_agui(interrupt: pb.Interrupt) -> Interrupt:
    """An engine interrupt as AG-UI's: ``reason`` from :data:`INTERRUPT_REASONS`,
    ``toolCallId`` the waiting call, ``metadata`` the kind and the structured request
    (``tool``/``arguments`` for an approval, ``question``/``choices`` for a question)."""
    kind = INTERRUPT_KINDS.get(interrupt.kind, "unspecified")
    metadata: dict[str, Any] = {"kind": kind}
    if interrupt.HasField("payload"):
        payload = json_value(interrupt.payload)
        metadata.update(payload if isinstance(payload, dict) else {"payload": payload})
    expires_at = None
    if interrupt.HasField("expire_time"):
        expires_at = interrupt.expire_time.ToJsonString()
    return Interrupt(
        id=interrupt.id,
        reason=INTERRUPT_REASONS.get(interrupt.kind, kind),
        message=interrupt.message or None,
        tool_call_id=interrupt.tool_call.id or None,
        response_schema=(
            json_value(interrupt.response_schema) if interrupt.HasField("response_schema") else None
        ),
        expires_at=expires_at,
        metadata=metadata,
    )


def _outcome(body: pb.RunFinished) -> RunFinishedOutcome:
    if body.outcome == pb.OUTCOME_TYPE_CANCELLED:
        return RunFinishedCancelledOutcome()
    if body.outcome == pb.OUTCOME_TYPE_INTERRUPT and body.interrupts:
        return RunFinishedInterruptOutcome(
            interrupts=[interrupt_to_agui(i) for i in body.interrupts]
        )
    pending = list(body.pending_tool_call_ids)
    return RunFinishedSuccessOutcome(pending_tool_call_ids=pending or None)


def _usage(body: pb.RunFinished | pb.RunError) -> list[TokenUsage] | None:
    """The run's tokens as AG-UI's one-entry ``TokenUsage`` list (cached tokens are part of
    the input tokens there too); None when the LLM reported none."""
    if not body.HasField("usage"):
        return None
    usage = body.usage
    return [
        TokenUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            cached_input_tokens=usage.cached_tokens or None,
        )
    ]


def _run_finished(event: pb.Event) -> BaseEvent:
    body = event.run_finished
    return RunFinishedEvent(
        thread_id=event.session_id,
        run_id=event.run_id,
        outcome=_outcome(body),
        usage=_usage(body),
        result=json_value(body.result) if body.HasField("result") else None,
    )


def run_error(code: str, message: str, usage: list[TokenUsage] | None = None) -> RunErrorEvent:
    """RUN_ERROR; ``code`` is one of the engine's codes or the facade's error table's."""
    return RunErrorEvent(code=code or "internal", message=message or code, usage=usage)


def _tool_call_result(event: pb.Event) -> BaseEvent:
    body = event.tool_call_result
    content: str | list[ContentPart] = body.content
    if body.parts:
        content = [TextPart(text=body.content), *(_part(p) for p in body.parts)]
    return ToolCallResultEvent(
        message_id=body.message_id, tool_call_id=body.tool_call_id, content=content, role="tool"
    )


def _text_message_start(event: pb.Event) -> BaseEvent:
    body = event.text_message_start
    return TextMessageStartEvent(
        message_id=body.message_id, role=TEXT_ROLES.get(body.role, "assistant")
    )


TOOL_PROGRESS = "tool_progress"
"""The engine's custom event of a tool's progress, and its AG-UI ``activityType``."""
COMPACTION = "compaction"
"""The AG-UI ``activityType`` of a compaction (the engine's custom ``compacted``)."""


def _custom(event: pb.Event) -> BaseEvent:
    """A custom event: an ACTIVITY_SNAPSHOT for tool progress and compaction, else CUSTOM."""
    name = event.custom.name
    value = json_value(event.custom.value)
    if isinstance(value, dict):
        if name == TOOL_PROGRESS and isinstance(value.get("tool_call_id"), str):
            return ActivitySnapshotEvent(
                message_id=f"{value['tool_call_id']}-progress",
                activity_type=TOOL_PROGRESS,
                content=value,
            )
        if name == "compacted":
            through = value.get("through_message_id")
            return ActivitySnapshotEvent(
                message_id=f"compaction-{through or event.run_id}",
                activity_type=COMPACTION,
                content=value,
            )
    return CustomEvent(name=name, value=value)


EVENT_TABLE: dict[str, Mapper] = {
    "run_started": _run_started,
    "run_finished": _run_finished,
    "run_error": lambda e: run_error(e.run_error.code, e.run_error.message, _usage(e.run_error)),
    "step_started": lambda e: StepStartedEvent(step_name=e.step_started.step_name),
    "step_finished": lambda e: StepFinishedEvent(step_name=e.step_finished.step_name),
    "text_message_start": _text_message_start,
    "text_message_content": lambda e: TextMessageContentEvent(
        message_id=e.text_message_content.message_id, delta=e.text_message_content.delta
    ),
    "text_message_end": lambda e: TextMessageEndEvent(message_id=e.text_message_end.message_id),
    "tool_call_start": lambda e: ToolCallStartEvent(
        tool_call_id=e.tool_call_start.tool_call_id,
        tool_call_name=e.tool_call_start.tool_call_name,
        parent_message_id=e.tool_call_start.parent_message_id or None,
    ),
    "tool_call_args": lambda e: ToolCallArgsEvent(
        tool_call_id=e.tool_call_args.tool_call_id, delta=e.tool_call_args.delta
    ),
    "tool_call_end": lambda e: ToolCallEndEvent(tool_call_id=e.tool_call_end.tool_call_id),
    "tool_call_result": _tool_call_result,
    "reasoning_start": lambda e: ReasoningStartEvent(message_id=e.reasoning_start.message_id),
    "reasoning_message_start": lambda e: ReasoningMessageStartEvent(
        message_id=e.reasoning_message_start.message_id, role="reasoning"
    ),
    "reasoning_message_content": lambda e: ReasoningMessageContentEvent(
        message_id=e.reasoning_message_content.message_id,
        delta=e.reasoning_message_content.delta,
    ),
    "reasoning_message_end": lambda e: ReasoningMessageEndEvent(
        message_id=e.reasoning_message_end.message_id
    ),
    "reasoning_end": lambda e: ReasoningEndEvent(message_id=e.reasoning_end.message_id),
    "state_snapshot": lambda e: StateSnapshotEvent(snapshot=json_value(e.state_snapshot.snapshot)),
    "state_delta": lambda e: StateDeltaEvent(delta=json_value(e.state_delta.delta)),
    "messages_snapshot": lambda e: MessagesSnapshotEvent(
        messages=[message_to_agui(m) for m in e.messages_snapshot.messages]
    ),
    "custom": _custom,
    "raw": lambda e: RawEvent(event=json_value(e.raw.event), source=e.raw.source or None),
}
"""Engine ``Event.kind`` → AG-UI event; kinds without a row are dropped."""


def to_agui(event: pb.Event) -> BaseEvent | None:
    """The AG-UI event for an engine event, or None when it has no AG-UI form."""
    kind = event.WhichOneof("kind")
    mapper = EVENT_TABLE.get(kind) if kind else None
    if mapper is None:
        return None
    out = mapper(event)
    out.timestamp = _millis(event)
    return out
