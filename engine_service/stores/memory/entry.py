"""What the memory store holds of one session (:class:`SessionEntry`: its messages, runs
and events in their stored JSON form), and what each part reads an entry with: the run
that holds a write, a copy of a run to hand out, the positions of a run's messages, a
page's size."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from engine_service.core.errors import InvalidInput
from engine_service.core.models import Message, RunRecord, RunStatus, Session
from engine_service.core.store import Checkpoint, RunHold
from engine_service.stores.encoding import decode_interrupts, encode_interrupts, run_not_held

__all__ = ["SessionEntry", "check_held", "copy_run", "holding_run", "index_runs", "page_limit"]


def copy_run(run: RunRecord) -> RunRecord:
    """A copy of ``run`` that shares nothing mutable with the one the store holds."""
    return replace(
        run,
        pending_tool_call_ids=list(run.pending_tool_call_ids),
        interrupts=decode_interrupts(encode_interrupts(run.interrupts)),
    )


@dataclass(slots=True)
class SessionEntry:
    """One session and everything it holds."""

    id: str
    title: str
    created_at: datetime
    updated_at: datetime
    state: str = "null"
    last_seq: int = 0
    reserved_seq: int = 0
    active_run_id: str = ""
    owner: str = ""
    interrupts: str | None = None
    """The pending interrupts, encoded (``encoding.encode_interrupts``)."""
    messages: list[tuple[str, str]] = field(default_factory=list)
    """(message id, stored JSON) in history order."""
    by_run: dict[str, list[int]] = field(default_factory=dict)
    """Run id → the positions of its messages in ``messages``, ascending."""
    positions: dict[str, int] = field(default_factory=dict)
    """Message id → its position in ``messages``."""
    checkpoint: Checkpoint | None = None
    """The compaction the runs start from (``core.context``); ``covered`` is its position + 1."""
    runs: dict[str, RunRecord] = field(default_factory=dict)
    """By id, in the order they began."""
    kept: dict[str, str] = field(default_factory=dict)
    """Run id → what the run kept of its request (``begin_run``'s ``kept``); it goes with
    the session, as the SQL stores' column goes with the run's row."""
    events: list[tuple[int, float, str, str]] = field(default_factory=list)
    """(seq, time, run id, stored JSON body) ascending by seq."""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    webhook_url: str = ""
    agent: str = ""

    def session(self) -> Session:
        return Session(
            id=self.id,
            title=self.title,
            created_at=self.created_at,
            updated_at=self.updated_at,
            message_count=len(self.messages),
            state=json.loads(self.state),
            last_seq=self.last_seq,
            active_run_id=self.active_run_id,
            reserved_seq=max(self.reserved_seq, self.last_seq),
            owner=self.owner,
            interrupts=decode_interrupts(self.interrupts),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            agent=self.agent,
            cached_tokens=self.cached_tokens,
            webhook_url=self.webhook_url,
        )


def index_runs(entry: SessionEntry, messages: Sequence[Message], start: int) -> None:
    """Record the positions of ``messages``, stored from ``start`` on, by their run."""
    for offset, message in enumerate(messages):
        entry.by_run.setdefault(message.run_id, []).append(start + offset)


def check_held(entry: SessionEntry, hold: RunHold | None) -> None:
    """``InvalidInput`` when the run of ``hold`` no longer holds it (``RunHold``)."""
    if hold is not None:
        holding_run(entry, hold)


def holding_run(entry: SessionEntry, hold: RunHold) -> RunRecord:
    """The run of ``hold``, RUNNING on its replica; else ``InvalidInput``."""
    run = entry.runs.get(hold.run_id)
    if run is None or run.status is not RunStatus.RUNNING or run.replica != hold.replica:
        raise run_not_held(hold.run_id)
    return run


def page_limit(limit: int) -> int | None:
    """A page size, where zero means no limit."""
    if limit < 0:
        raise InvalidInput("limit must not be negative")
    return limit or None
