"""The memory store's event log: appending a run's events after the session's last seq (and
reserving seqs ahead), reading them back in order, pruning old ones (and the deliveries
long delivered)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from engine_service.core.deliveries import DeliveryStatus
from engine_service.core.errors import InvalidInput
from engine_service.core.events import Event
from engine_service.core.store import Signal, SignalKind
from engine_service.stores.encoding import dumps, event_from_dict, event_to_dict, utc
from engine_service.stores.memory.dicts import MemoryDicts
from engine_service.stores.memory.entry import SessionEntry, page_limit

__all__ = ["MemoryEvents", "event_rows", "follows", "insert_events"]


def follows(entry: SessionEntry, events: Sequence[Event]) -> None:
    """``InvalidInput`` when ``events`` do not follow the session's last seq."""
    if events and events[0].seq <= entry.last_seq:
        raise InvalidInput(f"event seq {events[0].seq} does not follow {entry.last_seq}")


def event_rows(
    entry: SessionEntry, session_id: str, events: Sequence[Event]
) -> list[tuple[int, float, str, str]]:
    """The rows of ``events`` as stored after the session's last seq: ``InvalidInput``
    unless each is of the session, each seq after the last. Nothing is stored."""
    rows = []
    last = entry.last_seq
    for event in events:
        if event.session_id != session_id:
            raise InvalidInput(f"the event is of session {event.session_id!r}, not {session_id!r}")
        if event.seq <= last:
            raise InvalidInput(f"event seq {event.seq} does not follow {last}")
        last = event.seq
        rows.append((event.seq, event.time, event.run_id, dumps(event_to_dict(event), "event")))
    return rows


def insert_events(
    entry: SessionEntry, session_id: str, events: Sequence[Event], reserve_through: int
) -> None:
    """Store ``events`` after the session's last seq (each of the session, each seq after the
    last; else ``InvalidInput`` and nothing stored), reserving seqs through ``reserve_through``."""
    rows = event_rows(entry, session_id, events)
    entry.events.extend(rows)
    if rows:
        entry.last_seq = rows[-1][0]
    entry.reserved_seq = max(entry.reserved_seq, reserve_through)


class MemoryEvents(MemoryDicts):
    """The event log, a part of ``MemorySessionStore``."""

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        entry = self._entry(session_id)
        insert_events(entry, session_id, events, reserve_through)
        if events:
            self._send(Signal(SignalKind.EVENTS, session_id, events[-1].run_id, entry.last_seq))

    async def read_events(self, session_id: str, after_seq: int, limit: int) -> list[Event]:
        entry = self._entry(session_id)
        size = page_limit(limit)
        out: list[Event] = []
        for seq, time, run_id, body in entry.events:
            if seq <= after_seq:
                continue
            if size is not None and len(out) >= size:
                break
            out.append(event_from_dict(seq, time, session_id, run_id, json.loads(body)))
        return out

    async def prune_events(self, before: datetime) -> int:
        cutoff = utc(before, "before").timestamp()
        gone = 0
        for entry in self._sessions.values():
            kept = [row for row in entry.events if row[1] >= cutoff]
            gone += len(entry.events) - len(kept)
            entry.events = kept
        done = [
            key
            for key, (d, _, _) in self._deliveries.items()
            if d.status is DeliveryStatus.DELIVERED and (d.updated_at or d.created_at) < before
        ]
        for key in done:
            del self._deliveries[key]
        return gone
