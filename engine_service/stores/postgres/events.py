"""The PostgreSQL store's event log: appends in the writer's batches, each after the
session's last seq or not at all (the other replicas told in the same statement), reads
after a seq, and the pruning of old events.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engine_service.core.errors import InvalidInput, SessionNotFound
from engine_service.core.events import Event
from engine_service.core.store import RunHold, Signal, SignalKind
from engine_service.stores.encoding import event_from_dict, run_not_held
from engine_service.stores.encoding import event_rows as _event_rows
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.rows import sql_limit
from engine_service.stores.postgres.signals import encode_signal

__all__ = ["APPEND_EVENTS", "HELD", "HELD_ROW", "PostgresEvents", "check_held", "hold_params"]

HELD_ROW = """
    SELECT 1 FROM runs WHERE session_id = %(session)s AND id = %(run)s
        AND status = 'running' AND replica = %(replica)s"""
"""The row of the run of a ``RunHold`` while it holds its session (RUNNING, leased to its
replica). Read so in a statement after the one that locked the session's row: another
replica's claim of the run locks that row too (``CLAIM_EXPIRED``), so the claim either
waits for the write (it skips the run until its next tick) or the write for the claim,
and then the statement (a snapshot taken after it) sees the run's new holder."""

HELD = f"EXISTS ({HELD_ROW}\n    FOR SHARE)"
"""Whether the run of a ``RunHold`` still holds its session, in a statement that does not
follow a lock of the session's row: the run's row is locked until the write commits, so a
claim in flight (which locks it ``FOR UPDATE``) is waited for and then seen, and a claim
after it skips the run until its next tick. A write is stored before the claim (the
claimer then reads it) or not at all."""


def hold_params(hold: RunHold) -> dict[str, str]:
    """``HELD``'s parameters besides the session."""
    return {"run": hold.run_id, "replica": hold.replica}


async def check_held(conn: Conn, session_id: str, hold: RunHold) -> None:
    """``InvalidInput`` when the run of ``hold`` no longer holds the session, read in a
    transaction that locked the session's row already (``HELD_ROW``)."""
    cursor = await conn.execute(HELD_ROW, {"session": session_id, **hold_params(hold)})
    if await cursor.fetchone() is None:
        raise run_not_held(hold.run_id)


APPEND_EVENTS = """
WITH moved AS (
    UPDATE sessions SET last_seq = %(last)s, reserved_seq = greatest(reserved_seq, %(reserve)s)
    WHERE id = %(session)s AND last_seq < %(first)s
    RETURNING id
), inserted AS (
    INSERT INTO events (session_id, seq, time, run_id, body)
    SELECT moved.id, u.seq, u.time, u.run_id, u.body FROM moved,
        unnest(%(seqs)s::bigint[], %(times)s::float8[], %(runs)s::text[], %(bodies)s::text[])
        AS u (seq, time, run_id, body)
)
SELECT pg_notify(%(channel)s, %(signal)s) FROM moved
"""
"""Events appended after the session's last seq, its reservation topped up and the other
replicas notified, in one statement (its own transaction, committed synchronously like every
write): no row when the session is gone or the first seq does not follow its last one
(another replica took the run over or closed it, ``RunHold``; or this very write committed
before its connection was lost: see ``append_events``)."""


class PostgresEvents(PostgresConnections):
    """The event log of ``PostgresSessionStore``."""

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        if not events:
            if reserve_through:
                await self._reserve(session_id, reserve_through)
            return
        rows, params = self._event_params(session_id, events, reserve_through)
        # One statement, in the writer's next batch with every other run's: followers wait
        # for this write (they see an event only once it is stored). A write its condition
        # refused (another replica closed the run) returns no row and is told apart here,
        # after the batch committed; so is a retried write that had committed before its
        # connection was lost (it finds its own rows at its seqs).
        (moved,) = await self._batch.first([(APPEND_EVENTS, params)])
        if moved is None:
            await self._refused_unless_held(session_id, rows)

    def _event_params(
        self, session_id: str, events: Sequence[Event], reserve_through: int
    ) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
        """The rows of ``events`` (not empty) and ``APPEND_EVENTS``' parameters."""
        rows = _event_rows(session_id, events)
        seqs = [row[1] for row in rows]
        for before, after in itertools.pairwise(seqs):
            if after <= before:
                raise InvalidInput(f"event seq {after} does not follow {before}")
        signal = Signal(SignalKind.EVENTS, session_id, events[-1].run_id, seqs[-1])
        return rows, {
            "session": session_id,
            "first": seqs[0],
            "last": seqs[-1],
            "reserve": reserve_through,
            "seqs": seqs,
            "times": [row[2] for row in rows],
            "runs": [row[3] for row in rows],
            "bodies": [row[4] for row in rows],
            "channel": self._channel,
            "signal": encode_signal(signal),
        }

    async def _refused_unless_held(self, session_id: str, rows: list[tuple[Any, ...]]) -> None:
        """An append of ``rows`` wrote nothing: fine when the store holds them already (a
        retried write that had committed), else ``InvalidInput`` (``SessionNotFound``)."""

        async def work(conn: Conn) -> None:
            found = await self._one(
                conn, "SELECT last_seq FROM sessions WHERE id = %s", (session_id,)
            )
            if found is None:
                raise SessionNotFound(session_id)
            if not await self._holds(conn, session_id, rows):
                raise InvalidInput(f"event seq {rows[0][1]} does not follow {found[0]}")

        await self._read(work)

    async def _holds(self, conn: Conn, session_id: str, rows: list[tuple[Any, ...]]) -> bool:
        """Whether the store already holds exactly ``rows`` (the first and last of them)."""
        for row in (rows[0], rows[-1]):
            stored = await self._one(
                conn,
                "SELECT run_id, body FROM events WHERE session_id = %s AND seq = %s",
                (session_id, row[1]),
            )
            if stored is None or (stored[0], stored[1]) != (row[3], row[4]):
                return False
        return True

    async def _reserve(self, session_id: str, reserve_through: int) -> None:
        await self._batch.first(
            [
                (
                    "UPDATE sessions SET reserved_seq = greatest(reserved_seq, %s) WHERE id = %s",
                    (reserve_through, session_id),
                )
            ]
        )

    async def read_events(self, session_id: str, after_seq: int, limit: int) -> list[Event]:
        size = sql_limit(limit)

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            await self._require(conn, session_id)
            return await self._all(
                conn,
                "SELECT seq, time, run_id, body FROM events WHERE session_id = %s AND seq > %s"
                " ORDER BY seq LIMIT %s",
                (session_id, after_seq, size),
            )

        rows = await self._snapshot(work)
        return [event_from_dict(s, t, session_id, r, json.loads(b)) for s, t, r, b in rows]

    async def prune_events(self, before: datetime) -> int:
        _utc(before, "before")

        async def work(conn: Conn) -> int:
            cursor = await conn.execute("DELETE FROM events WHERE time < %s", (before.timestamp(),))
            gone = cursor.rowcount
            await conn.execute(
                "DELETE FROM deliveries WHERE status = 'delivered' AND updated_at < %s",
                (_utc(before, "before"),),
            )
            return gone

        return await self._write(work)
