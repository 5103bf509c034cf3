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
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.rows import RUN_COLUMNS, run_from
from engine_service.stores.postgres.signals import encode_signal

__all__ = ["PostgresReplicas"]


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

    async def note_usage(self, session_id: str, run_id: str, usage: Usage) -> None:
        counts = (usage.input_tokens, usage.output_tokens, usage.cached_tokens)

        await self._batch.first(
            [
                (
                    "UPDATE runs SET input_tokens = %s, output_tokens = %s, cached_tokens = %s"
                    " WHERE session_id = %s AND id = %s AND status = 'running'",
                    (*counts, session_id, run_id),
                )
            ]
        )

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

        # Rows another replica is claiming right now are skipped, not waited for; a row
        # is re-checked under its lock, so no run is ever claimed twice.
        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            return await self._all(
                conn,
                "UPDATE runs AS r SET replica = %s, lease_until = %s"
                " FROM (SELECT session_id, id FROM runs WHERE status = 'running'"
                "       AND (lease_until IS NULL OR lease_until < %s)"
                "       FOR UPDATE SKIP LOCKED) AS expired"
                " WHERE r.session_id = expired.session_id AND r.id = expired.id"
                f" RETURNING {', '.join('r.' + c.strip() for c in RUN_COLUMNS.split(','))},"
                " r.n",
                (replica, until_stamp, now_stamp),
            )

        rows = await self._write(work)
        rows.sort(key=lambda row: (row[1], row[3], row[-1]))
        return [run_from(row) for row in rows]
