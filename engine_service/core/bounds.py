"""Size bounds on what the engine makes and hands out (``[engine] max_event_bytes``).

One event, one message and one page of a list must each fit in one gRPC message (4 MiB
on the wire for most clients), or the stream that carries it breaks, and breaks again at
every resume. So every body the engine makes is bounded where it is made, and every body
it reads back from the store (rows written before the bound, or under a larger one) is
bounded again on the way out:

- a text delta (answer, reasoning, tool-call arguments) is split into several deltas;
- a tool result, a stored message, a delta read back, is clipped, with a note that says
  how much was cut;
- a messages snapshot holds the most recent messages that fit;
- a JSON body (state, custom, raw) that does not fit is replaced by a small custom event
  ``agentik.event_omitted`` that names it, keeping its seq, so a resume never skips or
  repeats an id;
- a page of messages (or of stored events) stops at the byte budget.

Sizes are estimates of the protobuf encoding, from above: UTF-8 bytes of the text plus a
little per field, and for JSON values what a ``google.protobuf.Value`` costs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, TypeVar

from agentik.limits import GRPC_MESSAGE_LIMIT, MAX_EVENT_BYTES, MIN_EVENT_BYTES
from engine_service.core import events as ev
from engine_service.core.models import (
    JSON,
    ContentPart,
    DocumentPart,
    ImagePart,
    Interrupt,
    Message,
    RunRecord,
    Session,
    TextPart,
    ToolCall,
)

__all__ = [
    "EVENT_OMITTED",
    "GRPC_MESSAGE_LIMIT",
    "MAX_EVENT_BYTES",
    "MESSAGE_ROOM",
    "MIN_EVENT_BYTES",
    "body_size",
    "bound_body",
    "bound_message",
    "bound_result",
    "bounded_events",
    "bounded_page",
    "bound_run",
    "bound_session",
    "fit_page",
    "run_size",
    "session_size",
    "bounded_snapshot",
    "clip_text",
    "fit_bytes",
    "message_size",
    "split_text",
    "text_bytes",
]

MESSAGE_ROOM: Final = 1024
"""What an event adds around a message: a message holds ``max_event_bytes`` less this."""
EVENT_OMITTED: Final = "agentik.event_omitted"
"""Name of the custom event that stands for a JSON event too large to send."""

T = TypeVar("T")

_FIELD = 16
"""Per-field overhead allowed for (tag, length, nested message headers)."""
_NOTE_ROOM = 256
"""Bytes kept free for the clipping note."""


def text_bytes(text: str) -> int:
    """UTF-8 size of ``text``; cheap for short text (at most 4 bytes a character)."""
    return len(text.encode()) if text and not text.isascii() else len(text)


def _cut(data: bytes, limit: int) -> int:
    """The largest ``n <= limit`` that does not cut a UTF-8 character in ``data``."""
    if limit >= len(data):
        return len(data)
    end = max(limit, 0)
    while end > 0 and (data[end] & 0xC0) == 0x80:
        end -= 1
    return end


def split_text(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, no character cut in two."""
    if len(text) * 4 <= limit:
        return [text]
    data = text.encode()
    if len(data) <= limit:
        return [text]
    pieces = []
    start = 0
    while start < len(data):
        end = start + _cut(data[start:], limit)
        if end == start:  # a limit under one character: never loop for ever
            end = start + 1
            while end < len(data) and (data[end] & 0xC0) == 0x80:
                end += 1
        pieces.append(data[start:end].decode())
        start = end
    return pieces


def _note(cut: int, whole: int, limit: int) -> str:
    return (
        f"\n[clipped by agentik: {cut:,} of {whole:,} bytes not shown; one event holds at "
        f"most {limit:,} bytes ([engine] max_event_bytes)]"
    )


def clip_text(text: str, budget: int, limit: int) -> tuple[str, int]:
    """``text`` in at most ``budget`` bytes, a note at its end when cut; and the bytes cut.
    ``limit`` is the setting the note names."""
    size = text_bytes(text)
    if size <= budget:
        return text, 0
    data = text.encode()
    keep = _cut(data, max(budget - _NOTE_ROOM, 0))
    cut = size - keep
    return data[:keep].decode() + _note(cut, size, limit), cut


def fit_bytes(sizes: Iterable[int], budget: int) -> int:
    """How many of the leading ``sizes`` fit in ``budget`` (always at least one)."""
    total = 0
    count = 0
    for size in sizes:
        total += size
        if count and total > budget:
            break
        count += 1
    return count


# -- sizes ------------------------------------------------------------------------------


def json_size(value: JSON) -> int:
    """An upper estimate of ``value`` as a ``google.protobuf.Value``."""
    size = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            size += text_bytes(item) + 8
        elif isinstance(item, dict):
            size += 8
            for key, member in item.items():
                size += text_bytes(str(key)) + 8
                stack.append(member)
        elif isinstance(item, list | tuple):
            size += 8
            stack.extend(item)
        else:  # number, bool, null
            size += 12
    return size


def _part_size(part: ContentPart) -> int:
    if isinstance(part, TextPart):
        return text_bytes(part.text) + _FIELD
    if isinstance(part, DocumentPart):
        return (
            len(part.data)
            + text_bytes(part.file_id)
            + text_bytes(part.filename)
            + len(part.mime_type)
            + 3 * _FIELD
        )
    return len(part.data) + text_bytes(part.url) + len(part.mime_type) + 2 * _FIELD


def message_size(message: Message) -> int:
    """An upper estimate of ``message``'s encoded size."""
    size = 8 * _FIELD + len(message.id) + len(message.run_id) + len(message.tool_call_id)
    size += text_bytes(message.name)
    for part in message.content:
        size += _part_size(part)
    for call in message.tool_calls:
        size += len(call.id) + text_bytes(call.name) + text_bytes(call.arguments) + 3 * _FIELD
    if message.metadata is not None:
        size += json_size(message.metadata)
    return size


def _interrupt_size(interrupt: Interrupt) -> int:
    call = interrupt.tool_call
    return (
        text_bytes(interrupt.message)
        + text_bytes(call.arguments)
        + text_bytes(call.name)
        + json_size(interrupt.payload)
        + 16 * _FIELD
    )


_SIZES: dict[type, Callable[[Any], int]] = {
    ev.TextMessageContent: lambda b: text_bytes(b.delta),
    ev.ReasoningMessageContent: lambda b: text_bytes(b.delta),
    ev.ToolCallArgs: lambda b: text_bytes(b.delta),
    ev.ToolCallStart: lambda b: text_bytes(b.tool_call_name),
    ev.ToolCallResult: lambda b: text_bytes(b.content) + sum(_part_size(p) for p in b.parts),
    ev.MessageStored: lambda b: message_size(b.message),
    ev.MessagesSnapshot: lambda b: sum(message_size(m) for m in b.messages),
    ev.StateSnapshot: lambda b: json_size(b.snapshot),
    ev.StateDelta: lambda b: json_size(b.delta),
    ev.Custom: lambda b: text_bytes(b.name) + json_size(b.value),
    ev.Raw: lambda b: json_size(b.event) + text_bytes(b.source),
    ev.RunError: lambda b: text_bytes(b.message) + text_bytes(b.code),
    ev.RunFinished: lambda b: json_size(b.result) + sum(_interrupt_size(i) for i in b.interrupts),
    ev.StepStarted: lambda b: text_bytes(b.step_name),
    ev.StepFinished: lambda b: text_bytes(b.step_name),
}


def body_size(body: ev.EventBody) -> int:
    """An upper estimate of ``body``'s encoded size, envelope included."""
    sizer = _SIZES.get(type(body))
    return 128 + (sizer(body) if sizer is not None else 0)


# -- bounding ---------------------------------------------------------------------------


def bound_message(message: Message, limit: int) -> Message:
    """``message`` itself when it fits in ``limit`` bytes, else a copy clipped to fit:
    text first, then tool-call arguments, then images (dropped whole), and a note."""
    size = message_size(message)
    if size <= limit:
        return message
    budget = limit - (size - _payload(message)) - 2 * _NOTE_ROOM
    content: list[ContentPart] = []
    calls: list[ToolCall] = []
    for part in message.content:
        if isinstance(part, TextPart):
            kept = _take(part.text, budget)
            budget -= text_bytes(kept)
            content.append(TextPart(kept))
    for call in message.tool_calls:
        kept = _take(call.arguments, budget)
        budget -= text_bytes(kept)
        calls.append(ToolCall(call.id, call.name, kept))
    for part in message.content:
        if isinstance(part, ImagePart | DocumentPart):
            image = _part_size(part)
            if image <= budget:
                content.append(part)
                budget -= image
    clipped = dataclasses.replace(message, content=content, tool_calls=calls)
    kept_size = message_size(clipped)
    content.append(TextPart(_note(size - kept_size, size, limit).lstrip("\n")))
    return clipped


def _payload(message: Message) -> int:
    """The bytes of ``message`` clipping can cut: text, arguments, images."""
    return sum(_part_size(p) for p in message.content) + sum(
        text_bytes(c.arguments) for c in message.tool_calls
    )


def _take(text: str, budget: int) -> str:
    if text_bytes(text) <= budget:
        return text
    data = text.encode()
    return data[: _cut(data, max(budget, 0))].decode()


def bounded_snapshot(messages: Sequence[Message], limit: int) -> list[Message]:
    """The most recent ``messages`` (each bounded) whose total fits in ``limit`` bytes,
    oldest first; always at least the last one."""
    bounded = [bound_message(m, limit) for m in reversed(messages)]
    count = fit_bytes((message_size(m) for m in bounded), limit)
    return bounded[:count][::-1]


def _omitted(body: ev.EventBody, size: int, limit: int) -> ev.Custom:
    kind = type(body).__name__
    return ev.Custom(
        EVENT_OMITTED,
        {
            "event": kind,
            "bytes": size,
            "limit": limit,
            "reason": f"this {kind} event is larger than one event may be "
            "([engine] max_event_bytes)",
        },
    )


def bound_body(body: ev.EventBody, limit: int) -> ev.EventBody:
    """``body`` itself when it fits in ``limit`` bytes, else one that does (see the module
    docstring); the run's end stays a run's end."""
    size = body_size(body)
    if size <= limit:
        return body
    room = limit - 1024
    match body:
        case ev.TextMessageContent() | ev.ReasoningMessageContent() | ev.ToolCallArgs():
            return dataclasses.replace(body, delta=clip_text(body.delta, room, limit)[0])
        case ev.ToolCallResult():
            return bound_result(body, limit)
        case ev.MessageStored(message=message):
            return ev.MessageStored(bound_message(message, room))
        case ev.MessagesSnapshot(messages=messages):
            return ev.MessagesSnapshot(bounded_snapshot(messages, room))
        case ev.RunError():
            return ev.RunError(clip_text(body.message, room // 2, limit)[0], body.code[:200])
        case ev.RunFinished():
            return _bound_finished(body, room)
        case ev.ToolCallStart():  # a tool name no tool has: the call fails as unknown
            return dataclasses.replace(body, tool_call_name=_take(body.tool_call_name, room))
        case ev.StepStarted() | ev.StepFinished():
            return dataclasses.replace(body, step_name=_take(body.step_name, room))
    return _omitted(body, size, limit)


def _bound_interrupts(interrupts: list[Interrupt], room: int) -> list[Interrupt]:
    """Each interrupt in its share of ``room``: its message and arguments shortened, its
    payload dropped, when it does not fit (the person is still asked)."""
    share = room // max(len(interrupts), 1) - 1024
    return [
        i
        if _interrupt_size(i) <= share
        else dataclasses.replace(
            i,
            message=_take(i.message, share // 4),
            payload=None,
            tool_call=dataclasses.replace(
                i.tool_call, arguments=_take(i.tool_call.arguments, share // 2)
            ),
        )
        for i in interrupts
    ]


def _bound_finished(body: ev.RunFinished, room: int) -> ev.RunFinished:
    """The run's end without its result, and with what it asks a person clipped: the
    interrupts stay (the run waits for them), their arguments shortened."""
    interrupts = _bound_interrupts(body.interrupts, room)
    return dataclasses.replace(body, result=None, interrupts=interrupts)


def session_size(session: Session) -> int:
    """An upper estimate of ``session``'s encoded size."""
    return (
        text_bytes(session.title)
        + len(session.id)
        + text_bytes(session.owner)
        + json_size(session.state)
        + sum(_interrupt_size(i) for i in session.interrupts)
        + 16 * _FIELD
    )


def run_size(run: RunRecord) -> int:
    """An upper estimate of ``run``'s encoded size."""
    return (
        text_bytes(run.error_message)
        + sum(len(i) + _FIELD for i in run.pending_tool_call_ids)
        + sum(_interrupt_size(i) for i in run.interrupts)
        + 16 * _FIELD
    )


def bound_session(session: Session, limit: int) -> Session:
    """``session`` itself when it fits in ``limit`` bytes; else without its state (a state
    stored over the limit: it cannot be cut like text) and with its interrupts bounded."""
    if session_size(session) <= limit:
        return session
    bounded = dataclasses.replace(session, state=None)
    if session_size(bounded) > limit:
        bounded.interrupts = _bound_interrupts(session.interrupts, limit - 4096)
    return bounded


def bound_run(run: RunRecord, limit: int) -> RunRecord:
    """``run`` itself when it fits in ``limit`` bytes; else with its error message and
    interrupts bounded."""
    if run_size(run) <= limit:
        return run
    return dataclasses.replace(
        run,
        error_message=clip_text(run.error_message, limit // 4, limit)[0],
        interrupts=_bound_interrupts(run.interrupts, limit // 2),
    )


def fit_page(items: Sequence[T], size: Callable[[T], int], budget: int) -> list[T]:
    """The leading ``items`` whose total ``size`` fits in ``budget`` (at least one)."""
    return list(items[: fit_bytes((size(item) for item in items), budget)])


def bound_result(body: ev.ToolCallResult, limit: int) -> ev.ToolCallResult:
    """A tool result clipped to ``limit`` bytes: its text, then its parts (a part that
    does not fit is dropped, and the note counts it)."""
    if body_size(body) <= limit:
        return body
    room = limit - 1024
    parts_size = sum(_part_size(p) for p in body.parts)
    text_room = max(room - parts_size, room // 2)
    content, cut = clip_text(body.content, text_room, limit)
    budget = room - text_bytes(content)
    parts = []
    dropped = 0
    for part in body.parts:
        size = _part_size(part)
        if size <= budget:
            parts.append(part)
            budget -= size
        else:
            dropped += size
    if dropped:
        if not cut:
            content += _note(dropped, text_bytes(body.content) + parts_size, limit)
        content += f" ({dropped:,} bytes of attached parts dropped)"
    return dataclasses.replace(body, content=content, parts=parts)


def bounded_events(events: Sequence[ev.Event], limit: int, budget: int) -> list[ev.Event]:
    """``events`` read back from the store, each bounded to ``limit`` bytes: the leading
    ones whose total fits in ``budget`` (always at least one)."""
    out: list[ev.Event] = []
    total = 0
    for event in events:
        size = body_size(event.body)
        if size > limit:
            event = dataclasses.replace(event, body=bound_body(event.body, limit))
            size = body_size(event.body)
        total += size
        if out and total > budget:
            break
        out.append(event)
    return out


def bounded_page(messages: Sequence[Message], limit: int, budget: int) -> list[Message]:
    """A page of stored ``messages``, each bounded to ``limit`` bytes: the leading ones
    whose total fits in ``budget`` (always at least one)."""
    bounded = [bound_message(m, limit) for m in messages]
    return bounded[: fit_bytes((message_size(m) for m in bounded), budget)]
