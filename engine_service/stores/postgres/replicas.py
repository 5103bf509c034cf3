"""What lets several engines (replicas) share the PostgreSQL store: their signals
(``signals``), the leases on the runs each one runs, the tokens a run has used so
far (for the replica that resumes it), the replicas alive, and the claim of runs whose
lease expired, each by one replica only.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from engine_service.core.events import Usage
from engine_service.core.models import RunRecord
from engine_service.core.store import Signal
from engine_service.stores.encoding import run_not_held
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.rows import RUN_COLUMNS, run_from
from engine_service.stores.postgres.signals import encode_signal

__all__ = ["CLAIM_EXPIRED", "PostgresReplicas"]

CLAIM_EXPIRED = f"""
WITH expired AS (
    SELECT r.session_id, r.id, r.replica AS was FROM runs r JOIN sessions s ON s.id = r.session_id
    WHERE r.status = 'running' AND (r.lease_until IS NULL OR r.lease_until < %(now)s)
    FOR UPDATE OF r, s SKIP LOCKED
), moved AS (
    UPDATE sessions SET last_seq = greatest(last_seq, reserved_seq)
    FROM expired WHERE sessions.id = expired.session_id AND expired.was <> %(replica)s
)
UPDATE runs AS r SET replica = %(replica)s, lease_until = %(until)s
FROM expired WHERE r.session_id = expired.session_id AND r.id = expired.id
RETURNING {", ".join("r." + c.strip() for c in RUN_COLUMNS.split(","))}, r.n
"""
"""Expired runs leased to a replica, each with its session's row locked first: rows another
replica is claiming, and sessions a write is storing into right now, are skipped, not waited
for (each is re-checked under its lock, so no run is ever claimed twice, and a write in
flight is committed before its run is claimed). A run taken from another replica has its
session's last seq moved past its reserved seqs: the events of its old replica are refused
from then on (``RunHold``)."""


class PostgresReplicas(PostgresConnections):
    """The signals, leases and takeovers of ``PostgresSessionStore``."""

    @property
    def shared(self) -> bool:
        return True

    async def watch(self, on_signal: Callable[[Signal], None]) -> None:
        """Call ``on_signal`` for every signal on the channel from now until ``close``.

        Returns once listening (or, when the database is unreachable, once the first
        attempt failed: a background task keeps trying).
        """
        await self._signals.watch(on_signal)

    async def signal(self, signal: Signal) -> None:
        async def work(conn: Conn) -> None:
            await self._notify(conn, signal)

        await self._read(work)

    async def _notify(self, conn: Conn, signal: Signal) -> None:
        """Queue ``signal``; PostgreSQL delivers it when the transaction commits."""
        await conn.execute("SELECT pg_notify(%s, %s)", (self._channel, encode_signal(signal)))

    async def note_usage(
        self, session_id: str, run_id: str, usage: Usage, *, replica: str = ""
    ) -> None:
        counts = (usage.input_tokens, usage.output_tokens, usage.cached_tokens)

        (noted,) = await self._batch.first(
            [
                (
                    "UPDATE runs SET input_tokens = %s, output_tokens = %s, cached_tokens = %s"
                    " WHERE session_id = %s AND id = %s AND status = 'running' AND replica = %s"
                    " RETURNING 1",
                    (*counts, session_id, run_id, replica),
                )
            ]
        )
        if noted is None:
            raise run_not_held(run_id)

    async def renew_leases(self, replica: str, until: datetime) -> int:
        stamp = _utc(until, "until")

        async def work(conn: Conn) -> int:
            cursor = await conn.execute(
                "UPDATE runs SET lease_until = %s WHERE status = 'running' AND replica = %s",
                (stamp, replica),
            )
            return cursor.rowcount

        return await self._write(work)

    async def note_alive(self, replica: str, until: datetime) -> None:
        stamp = _utc(until, "until")

        async def work(conn: Conn) -> None:
            # The long gone are dropped as they are seen (a replica killed leaves its row).
            await conn.execute(
                "DELETE FROM replicas WHERE alive_until < %s - interval '1 day'", (stamp,)
            )
            await conn.execute(
                "INSERT INTO replicas (id, alive_until) VALUES (%s, %s)"
                " ON CONFLICT (id) DO UPDATE SET alive_until = EXCLUDED.alive_until",
                (replica, stamp),
            )

        await self._write(work)

    async def replicas_alive(self, now: datetime) -> list[str]:
        stamp = _utc(now, "now")

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            return await self._all(
                conn, "SELECT id FROM replicas WHERE alive_until > %s ORDER BY id", (stamp,)
            )

        return [row[0] for row in await self._read(work)]

    async def claim_expired_runs(
        self, replica: str, now: datetime, until: datetime
    ) -> list[RunRecord]:
        now_stamp, until_stamp = _utc(now, "now"), _utc(until, "until")

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            return await (
                await conn.execute(
                    CLAIM_EXPIRED, {"replica": replica, "until": until_stamp, "now": now_stamp}
                )
            ).fetchall()

        rows = await self._write(work)
        rows.sort(key=lambda row: (row[1], row[3], row[-1]))
        return [run_from(row) for row in rows]
