"""The SQLite store's run leases (``core.leases``): the runs still running, a replica's
leases renewed, and the runs whose lease ran out claimed by another."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from engine_service.core.models import RunRecord
from engine_service.stores.sqlite.file import SqliteFile, off_loop
from engine_service.stores.sqlite.rows import RUN_COLUMNS, from_iso, iso, to_run

__all__ = ["SqliteLeases"]


class SqliteLeases(SqliteFile):
    """The runs' leases, a part of ``SqliteSessionStore``."""

    @off_loop
    def running_runs(self) -> list[RunRecord]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running'"
                " ORDER BY session_id, started_at, rowid"
            ).fetchall()
        return [to_run(row) for row in rows]

    @off_loop
    def renew_leases(self, replica: str, until: datetime) -> int:
        stamp = iso(until, "until")
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE runs SET lease_until = ? WHERE status = 'running' AND replica = ?",
                (stamp, replica),
            )
            return cursor.rowcount

    @off_loop
    def claim_expired_runs(self, replica: str, now: datetime, until: datetime) -> list[RunRecord]:
        now_stamp, until_stamp = iso(now, "now"), iso(until, "until")
        with self._tx() as conn:
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running'"
                " AND (lease_until IS NULL OR lease_until < ?) ORDER BY session_id, started_at",
                (now_stamp,),
            ).fetchall()
            for row in rows:
                conn.execute(
                    "UPDATE runs SET replica = ?, lease_until = ? WHERE session_id = ? AND id = ?",
                    (replica, until_stamp, row[1], row[0]),
                )
                if to_run(row).replica != replica:  # its old replica's events are refused
                    conn.execute(
                        "UPDATE sessions SET last_seq = max(last_seq, reserved_seq) WHERE id = ?",
                        (row[1],),
                    )
        return [
            replace(to_run(row), replica=replica, lease_until=from_iso(until_stamp)) for row in rows
        ]
