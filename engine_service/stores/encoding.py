"""What every store writes the same way: messages, events and interrupts as JSON text,
UTC times, message and event rows, the session and run records read back from SQL rows, and
the WHERE clauses that pick sessions and runs by owner and agent.

The JSON shapes are ours (snake_case, ``type`` as the AG-UI event name); they are a storage
format, not a wire protocol. Round-tripping is exact: ``event_from_dict(event_to_dict(e))
== e``.

The SQL stores select the same columns (``SESSION_COLUMNS``, ``RUN_COLUMNS``,
``DELIVERY_COLUMNS``, ``PUSH_COLUMNS``, here), and pass their own time reader: SQLite
keeps ISO text, PostgreSQL ``timestamptz``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import typing
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from engine_service.core import events as ev
from engine_service.core.errors import InvalidInput
from engine_service.core.events import Event
from engine_service.core.models import (
    JSON,
    ContentPart,
    DocumentPart,
    ImagePart,
    Interrupt,
    InterruptKind,
    Message,
    MessageStatus,
    Role,
    RunRecord,
    RunStatus,
    Session,
    TextPart,
    ToolCall,
)

__all__ = [
    "DELIVERY_COLUMNS",
    "PUSH_COLUMNS",
    "RUN_COLUMNS",
    "SESSION_COLUMNS",
    "EVENT_TYPES",
    "decode_interrupts",
    "dumps",
    "encode_interrupts",
    "encode_messages",
    "event_from_dict",
    "event_rows",
    "event_to_dict",
    "interrupt_from_dict",
    "interrupt_to_dict",
    "interrupts_from_list",
    "message_from_dict",
    "message_to_dict",
    "part_from_dict",
    "part_to_dict",
    "run_from_row",
    "run_not_held",
    "run_taken",
    "session_from_row",
    "utc",
]


# The columns both SQL stores read, in the order their row converters take them.
SESSION_COLUMNS = """
    s.id, s.title, s.created_at, s.updated_at, s.state, s.last_seq, s.active_run_id,
    (SELECT coalesce(max(m.position) + 1, 0) FROM messages m WHERE m.session_id = s.id),
    s.reserved_seq, s.owner,
    s.interrupts, s.input_tokens, s.output_tokens, s.cached_tokens, s.webhook_url, s.agent
"""

RUN_COLUMNS = (
    "id, session_id, status, started_at, finished_at, error_code, error_message, pending,"
    " start_seq, replica, lease_until, interrupts, resumed_by, parent_run_id,"
    " input_tokens, output_tokens, cached_tokens"
)

DELIVERY_COLUMNS = (
    "id, url, payload, created_at, next_attempt_at, headers, kind, attempts, status,"
    " last_error, updated_at, session_id"
)

PUSH_COLUMNS = "id, task_id, session_id, url, created_at, token, auth_scheme, auth_credentials"


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
_PLAIN = frozenset(
    cls
    for cls in EVENT_TYPES
    if all(hint in (str, int, bool) for hint in typing.get_type_hints(cls).values())
)
"""Bodies of strings, integers and booleans only (the deltas, the starts and ends): most of
a run's events. :func:`event_rows` writes them by orjson (no float to refuse, no key that
is not a string), the same text as :func:`dumps` for every code point
(``tests/stores/test_encoding.py``)."""
_fast_dumps: Callable[[Any], bytes] | None = None


def part_to_dict(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, DocumentPart):
        doc: dict[str, Any] = {"type": "document", "mime_type": part.mime_type}
        if part.file_id:
            doc["file_id"] = part.file_id
        else:
            doc["data"] = base64.b64encode(part.data).decode("ascii")
        if part.filename:
            doc["filename"] = part.filename
        return doc
    out: dict[str, Any] = {"type": "image", "mime_type": part.mime_type}
    if part.url:
        out["url"] = part.url
    else:
        out["data"] = base64.b64encode(part.data).decode("ascii")
    return out


def part_from_dict(raw: dict[str, Any]) -> ContentPart:
    if raw["type"] == "text":
        return TextPart(raw["text"])
    if raw["type"] == "document":
        return DocumentPart(
            data=base64.b64decode(raw["data"]) if "data" in raw else b"",
            file_id=raw.get("file_id", ""),
            mime_type=raw.get("mime_type", ""),
            filename=raw.get("filename", ""),
        )
    return ImagePart(
        url=raw.get("url", ""),
        data=base64.b64decode(raw["data"]) if "data" in raw else b"",
        mime_type=raw.get("mime_type", ""),
    )


def message_to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {
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
    if message.metadata is not None:  # rows without it stay as they were
        out["metadata"] = message.metadata
    return out


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
        metadata=raw.get("metadata"),
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


TimeReader = Callable[[Any], datetime]


def utc(value: datetime, what: str) -> datetime:
    """``value`` in UTC; naive datetimes are refused rather than guessed at."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def dumps(value: JSON, what: str) -> str:
    """Compact JSON text; ``InvalidInput`` naming ``what`` when it is not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc


def _plain(body: dict[str, Any]) -> str:
    """:func:`dumps` of a body of the :data:`_PLAIN` kinds, by orjson (0.3 µs against 4;
    imported by the first, not held by an idle engine). A string orjson refuses (a lone
    surrogate) goes to :func:`dumps`, which says why."""
    global _fast_dumps
    if _fast_dumps is None:
        import orjson

        _fast_dumps = orjson.dumps
    try:
        return _fast_dumps(body).decode()
    except TypeError:
        return dumps(body, "event")


def encode_messages(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """Validate and encode messages as (id, JSON body); ``InvalidInput`` when bad."""
    out = []
    for message in messages:
        if not message.id:
            raise InvalidInput("message id must not be empty")
        if message.created_at is not None:
            utc(message.created_at, "message created_at")
        out.append((message.id, dumps(message_to_dict(message), "message")))
    return out


def encode_interrupts(interrupts: Sequence[Interrupt]) -> str | None:
    """The JSON list of ``interrupts``; None (SQL NULL) for none."""
    if not interrupts:
        return None
    return dumps([interrupt_to_dict(i) for i in interrupts], "interrupts")


def decode_interrupts(text: str | None) -> list[Interrupt]:
    return interrupts_from_list(json.loads(text)) if text else []


def run_taken(run_id: str) -> str:
    """Why a run id used before is refused (never where it was used: that is another's)."""
    return (
        f"run_id {run_id!r} is already taken: run ids are unique on the server, "
        "send a new one for every run"
    )


def run_not_held(run_id: str) -> InvalidInput:
    """What a write of a run is refused with once the run is no longer its replica's
    (``core.store.RunHold``): another took it over, or it ended."""
    return InvalidInput(
        f"run {run_id!r} is no longer held here: another replica took it over, or it ended"
    )


def event_rows(session_id: str, events: Sequence[Event]) -> list[tuple[Any, ...]]:
    """(session id, seq, time, run id, JSON body) per event of ``session_id``."""
    rows = []
    for event in events:
        if event.session_id != session_id:
            raise InvalidInput(f"the event is of session {event.session_id!r}, not {session_id!r}")
        raw = event_to_dict(event)
        body = _plain(raw) if type(event.body) in _PLAIN else dumps(raw, "event")
        rows.append((session_id, event.seq, event.time, event.run_id, body))
    return rows


def session_from_row(row: Sequence[Any], time: TimeReader) -> Session:
    return Session(
        id=row[0],
        title=row[1],
        created_at=time(row[2]),
        updated_at=time(row[3]),
        state=json.loads(row[4]),
        last_seq=row[5],
        active_run_id=row[6] or "",
        message_count=row[7],
        reserved_seq=max(row[8], row[5]),
        owner=row[9],
        interrupts=decode_interrupts(row[10]),
        input_tokens=row[11],
        output_tokens=row[12],
        cached_tokens=row[13],
        webhook_url=row[14],
        agent=row[15],
    )


def run_from_row(row: Sequence[Any], time: TimeReader) -> RunRecord:
    return RunRecord(
        id=row[0],
        session_id=row[1],
        status=RunStatus(row[2]),
        started_at=time(row[3]),
        finished_at=time(row[4]) if row[4] is not None else None,
        error_code=row[5],
        error_message=row[6],
        pending_tool_call_ids=json.loads(row[7]),
        start_seq=row[8],
        replica=row[9],
        lease_until=time(row[10]) if row[10] is not None else None,
        interrupts=decode_interrupts(row[11]),
        resumed_by=row[12],
        parent_run_id=row[13],
        input_tokens=row[14],
        output_tokens=row[15],
        cached_tokens=row[16],
    )


def session_filter(
    mark: str, prefix: str, owner: str | None, agents: Sequence[str] | None
) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause (and its arguments) of sessions of ``owner`` (None: anyone's)
    whose agent is one of ``agents`` (None: any); ``mark`` the driver's placeholder
    (``?`` for SQLite, ``%s`` for PostgreSQL), ``prefix`` the sessions table's alias."""
    conditions, args = [], []
    if owner is not None:
        conditions.append(f"{prefix}owner = {mark}")
        args.append(owner)
    if agents is not None:
        marks = ", ".join(mark for _ in agents) or "NULL"
        conditions.append(f"{prefix}agent IN ({marks})")
        args.extend(agents)
    return ("WHERE " + " AND ".join(conditions) if conditions else ""), tuple(args)


def runs_filter(
    mark: str, session_id: str, owner: str | None, agents: Sequence[str] | None
) -> tuple[str, tuple[str, ...]]:
    """The WHERE clause of ``page_runs``: one session's runs (its owner is checked by the
    caller), or the runs of the sessions :func:`session_filter` picks."""
    if session_id:
        if agents is None:
            return f"WHERE session_id = {mark}", (session_id,)
        owner = None
    sessions, args = session_filter(mark, "", owner, agents)
    if not sessions:
        return "", ()
    where = f"WHERE session_id IN (SELECT id FROM sessions {sessions})"
    if session_id:
        return where + f" AND session_id = {mark}", (*args, session_id)
    return where, args
