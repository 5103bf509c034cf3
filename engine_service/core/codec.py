"""JSON forms of messages and events, for stores that keep them as text.

The shapes are ours (snake_case, ``type`` as the AG-UI event name); they are a storage
format, not a wire protocol. Round-tripping is exact: ``event_from_dict(event_to_dict(e))
== e``.
"""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime
from typing import Any

from engine_service.core import events as ev
from engine_service.core.models import (
    ContentPart,
    ImagePart,
    Interrupt,
    InterruptKind,
    Message,
    MessageStatus,
    Role,
    TextPart,
    ToolCall,
)

__all__ = [
    "EVENT_TYPES",
    "event_from_dict",
    "event_to_dict",
    "interrupt_from_dict",
    "interrupt_to_dict",
    "interrupts_from_list",
    "message_from_dict",
    "message_to_dict",
    "part_from_dict",
    "part_to_dict",
]

EVENT_TYPES: dict[type[ev.EventBody], str] = {
    ev.RunStarted: "RUN_STARTED",
    ev.RunFinished: "RUN_FINISHED",
    ev.RunError: "RUN_ERROR",
    ev.StepStarted: "STEP_STARTED",
    ev.StepFinished: "STEP_FINISHED",
    ev.TextMessageStart: "TEXT_MESSAGE_START",
    ev.TextMessageContent: "TEXT_MESSAGE_CONTENT",
    ev.TextMessageEnd: "TEXT_MESSAGE_END",
    ev.ToolCallStart: "TOOL_CALL_START",
    ev.ToolCallArgs: "TOOL_CALL_ARGS",
    ev.ToolCallEnd: "TOOL_CALL_END",
    ev.ToolCallResult: "TOOL_CALL_RESULT",
    ev.ReasoningStart: "REASONING_START",
    ev.ReasoningMessageStart: "REASONING_MESSAGE_START",
    ev.ReasoningMessageContent: "REASONING_MESSAGE_CONTENT",
    ev.ReasoningMessageEnd: "REASONING_MESSAGE_END",
    ev.ReasoningEnd: "REASONING_END",
    ev.StateSnapshot: "STATE_SNAPSHOT",
    ev.StateDelta: "STATE_DELTA",
    ev.MessagesSnapshot: "MESSAGES_SNAPSHOT",
    ev.Custom: "CUSTOM",
    ev.Raw: "RAW",
    ev.MessageStored: "MESSAGE_STORED",
}
_BODY_BY_TYPE = {name: cls for cls, name in EVENT_TYPES.items()}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in EVENT_TYPES}


def part_to_dict(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    out: dict[str, Any] = {"type": "image", "mime_type": part.mime_type}
    if part.url:
        out["url"] = part.url
    else:
        out["data"] = base64.b64encode(part.data).decode("ascii")
    return out


def part_from_dict(raw: dict[str, Any]) -> ContentPart:
    if raw["type"] == "text":
        return TextPart(raw["text"])
    return ImagePart(
        url=raw.get("url", ""),
        data=base64.b64decode(raw["data"]) if "data" in raw else b"",
        mime_type=raw.get("mime_type", ""),
    )


def message_to_dict(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "role": message.role.value,
        "content": [part_to_dict(p) for p in message.content],
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
        "status": message.status.value,
        "created_at": message.created_at.isoformat() if message.created_at else None,
        "run_id": message.run_id,
        "name": message.name,
    }


def message_from_dict(raw: dict[str, Any]) -> Message:
    created = raw.get("created_at")
    return Message(
        id=raw["id"],
        role=Role(raw["role"]),
        content=[part_from_dict(p) for p in raw.get("content", [])],
        tool_calls=[
            ToolCall(c["id"], c["name"], c["arguments"]) for c in raw.get("tool_calls", [])
        ],
        tool_call_id=raw.get("tool_call_id", ""),
        status=MessageStatus(raw.get("status", "complete")),
        created_at=datetime.fromisoformat(created).astimezone(UTC) if created else None,
        run_id=raw.get("run_id", ""),
        name=raw.get("name", ""),
    )


def interrupt_to_dict(interrupt: Interrupt) -> dict[str, Any]:
    call = interrupt.tool_call
    return {
        "id": interrupt.id,
        "kind": interrupt.kind.value,
        "run_id": interrupt.run_id,
        "tool_call": {"id": call.id, "name": call.name, "arguments": call.arguments},
        "message": interrupt.message,
        "payload": interrupt.payload,
        "expires_at": interrupt.expires_at.isoformat() if interrupt.expires_at else None,
    }


def interrupt_from_dict(raw: dict[str, Any]) -> Interrupt:
    call = raw["tool_call"]
    expires = raw.get("expires_at")
    return Interrupt(
        id=raw["id"],
        kind=InterruptKind(raw["kind"]),
        run_id=raw.get("run_id", ""),
        tool_call=ToolCall(call["id"], call["name"], call["arguments"]),
        message=raw.get("message", ""),
        payload=raw.get("payload"),
        expires_at=datetime.fromisoformat(expires).astimezone(UTC) if expires else None,
    )


def interrupts_from_list(raw: Any) -> list[Interrupt]:
    """Interrupts from their stored JSON list (None or absent: none)."""
    return [interrupt_from_dict(i) for i in raw or []]


def _body_to_dict(body: ev.EventBody) -> dict[str, Any]:
    out: dict[str, Any] = {"type": EVENT_TYPES[type(body)]}
    for name in _FIELDS[type(body)]:
        out[name] = getattr(body, name)
    match body:
        case ev.RunFinished(usage=usage, interrupts=interrupts):
            out["usage"] = dataclasses.asdict(usage) if usage else None
            out["interrupts"] = [interrupt_to_dict(i) for i in interrupts]
        case ev.RunError(usage=usage):
            out["usage"] = dataclasses.asdict(usage) if usage else None
        case ev.ToolCallResult(parts=parts):
            out["parts"] = [part_to_dict(p) for p in parts]
        case ev.MessagesSnapshot(messages=messages):
            out["messages"] = [message_to_dict(m) for m in messages]
        case ev.MessageStored(message=message):
            out["message"] = message_to_dict(message)
        case _:
            pass
    return out


def _body_from_dict(raw: dict[str, Any]) -> ev.EventBody:
    cls = _BODY_BY_TYPE[raw["type"]]
    kwargs = {name: raw[name] for name in _FIELDS[cls] if name in raw}
    if cls is ev.RunFinished:
        kwargs["outcome"] = ev.Outcome(kwargs["outcome"])
        kwargs["usage"] = ev.Usage(**kwargs["usage"]) if kwargs.get("usage") else None
        kwargs["interrupts"] = interrupts_from_list(kwargs.get("interrupts"))
    elif cls is ev.RunError:
        kwargs["usage"] = ev.Usage(**kwargs["usage"]) if kwargs.get("usage") else None
    elif cls is ev.ToolCallResult:
        kwargs["parts"] = [part_from_dict(p) for p in kwargs.get("parts", [])]
    elif cls is ev.MessagesSnapshot:
        kwargs["messages"] = [message_from_dict(m) for m in kwargs["messages"]]
    elif cls is ev.MessageStored:
        kwargs["message"] = message_from_dict(kwargs["message"])
    body: ev.EventBody = cls(**kwargs)
    return body


def event_to_dict(event: ev.Event) -> dict[str, Any]:
    """The stored form of an event's body (the envelope lives in the store's columns)."""
    return _body_to_dict(event.body)


def event_from_dict(
    seq: int, time: float, session_id: str, run_id: str, raw: dict[str, Any]
) -> ev.Event:
    return ev.Event(seq, time, session_id, run_id, _body_from_dict(raw))
