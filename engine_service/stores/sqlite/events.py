"""The SQLite store's event log: appending a run's events after the session's last seq (and
reserving seqs ahead), reading them back in order, pruning old ones."""

from __future__ import annotations

import functools
import itertools
import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine_service.core.errors import InvalidInput, SessionNotFound
from engine_service.core.events import ANSWER_STARTS, Event, RunStarted
from engine_service.core.store import RunHold
from engine_service.stores.encoding import event_from_dict, event_rows, run_not_held
from engine_service.stores.sqlite.file import SqliteFile, off_loop
from engine_service.stores.sqlite.rows import iso, sql_limit

__all__ = ["HELD", "SqliteEvents", "check_held", "hold_of", "insert_events"]

_STARTS = (RunStarted, *ANSWER_STARTS)
"""Events that start what a client waits for: an append holding one goes first."""

HELD = (
    "EXISTS (SELECT 1 FROM runs WHERE session_id = ? AND id = ? AND status = 'running'"
    " AND replica = ?)"
)
"""Whether a run is still held by a replica (``core.store.RunHold``): its parameters are the
session, the run and the replica."""


def hold_of(hold: RunHold) -> tuple[str, str]:
    """``HELD``'s parameters after the session's: the run and its replica."""
    return hold.run_id, hold.replica


def check_held(conn: sqlite3.Connection, session_id: str, hold: RunHold | None) -> None:
    """``InvalidInput`` when the run of ``hold`` no longer holds it."""
    if hold is None:
        return
    (held,) = conn.execute(f"SELECT {HELD}", (session_id, hold.run_id, hold.replica)).fetchone()
    if not held:
        raise run_not_held(hold.run_id)


def insert_events(
    conn: sqlite3.Connection,
    session_id: str,
    rows: list[tuple[Any, ...]],
    reserve_through: int = 0,
    hold: RunHold | None = None,
) -> None:
    """Append ``rows`` after the session's last seq, and reserve seqs through
    ``reserve_through``; ``SessionNotFound`` when the session does not exist,
    ``InvalidInput`` when the rows do not follow its last seq (or, with ``hold``, the run
    no longer holds the session: a run's end). Few statements: under load each one waits
    for the GIL again (see ``writer.Writer``), so one update checks that the rows follow
    the last seq and moves it."""
    for earlier, row in itertools.pairwise(rows):
        if row[1] <= earlier[1]:
            raise InvalidInput(f"event seq {row[1]} does not follow {earlier[1]}")
    if not rows and not reserve_through:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
            check_held(conn, session_id, hold)
            return
        raise SessionNotFound(session_id)
    held, fence = ("", ()) if hold is None else (f" AND {HELD}", (session_id, *hold_of(hold)))
    if rows:
        first, last = rows[0][1], rows[-1][1]
        moved = conn.execute(
            "UPDATE sessions SET last_seq = ?, reserved_seq = max(reserved_seq, ?)"
            f" WHERE id = ? AND last_seq < ?{held} RETURNING 1",
            (last, reserve_through, session_id, first, *fence),
        ).fetchall()
    else:
        moved = conn.execute(
            "UPDATE sessions SET reserved_seq = max(reserved_seq, ?)"
            f" WHERE id = ?{held} RETURNING 1",
            (reserve_through, session_id, *fence),
        ).fetchall()
    if not moved:  # which: no such session, the run not held, or rows that do not follow
        found = conn.execute("SELECT last_seq FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if found is None:
            raise SessionNotFound(session_id)
        check_held(conn, session_id, hold)
        raise InvalidInput(f"event seq {rows[0][1]} does not follow {found[0]}")
    if rows:
        conn.executemany(
            "INSERT INTO events (session_id, seq, time, run_id, body) VALUES (?, ?, ?, ?, ?)",
            rows,
        )


class SqliteEvents(SqliteFile):
    """The event log, a part of ``SqliteSessionStore``."""

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        # The start of an answer (its first token) goes in the writer's first lane.
        await self._writer.submit(
            functools.partial(self._append_events, session_id, events, reserve_through),
            session=session_id,
            first=any(isinstance(event.body, _STARTS) for event in events),
        )

    def _append_events(
        self, session_id: str, events: Sequence[Event], reserve_through: int
    ) -> None:
        rows = event_rows(session_id, events)
        with self._tx() as conn:
            insert_events(conn, session_id, rows, reserve_through)

    @off_loop
    def read_events(self, session_id: str, after_seq: int, limit: int) -> list[Event]:
        size = sql_limit(limit)
        with self._read() as conn:
            self._require(conn, session_id)
            rows = conn.execute(
                "SELECT seq, time, run_id, body FROM events WHERE session_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (session_id, after_seq, size),
            ).fetchall()
        return [event_from_dict(s, t, session_id, r, json.loads(b)) for s, t, r, b in rows]

    @off_loop
    def prune_events(self, before: datetime) -> int:
        iso(before, "before")
        with self._tx() as conn:
            cursor = conn.execute("DELETE FROM events WHERE time < ?", (before.timestamp(),))
            gone = cursor.rowcount
            conn.execute(
                "DELETE FROM deliveries WHERE status = 'delivered' AND updated_at < ?",
                (iso(before, "before"),),
            )
            return gone
