"""What every store writes the same way: JSON text, UTC times, message and event rows, and
the session and run records read back from SQL rows.

The SQL stores select their columns in the same order (``_SESSION_COLUMNS`` and
``_RUN_COLUMNS`` in each), and pass their own time reader: SQLite keeps ISO text,
PostgreSQL ``timestamptz``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from engine_service.core.codec import (
    event_to_dict,
    interrupt_to_dict,
    interrupts_from_list,
    message_to_dict,
)
from engine_service.core.errors import InvalidInput
from engine_service.core.events import Event
from engine_service.core.models import JSON, Interrupt, Message, RunRecord, RunStatus, Session

__all__ = [
    "decode_interrupts",
    "dumps",
    "encode_interrupts",
    "encode_messages",
    "event_rows",
    "run_from_row",
    "run_taken",
    "session_from_row",
    "utc",
]

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


def event_rows(session_id: str, events: Sequence[Event]) -> list[tuple[Any, ...]]:
    """(session id, seq, time, run id, JSON body) per event of ``session_id``."""
    rows = []
    for event in events:
        if event.session_id != session_id:
            raise InvalidInput(f"the event is of session {event.session_id!r}, not {session_id!r}")
        body = dumps(event_to_dict(event), "event")
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
