"""The SQLite store's webhook outbox (``core.deliveries``: deliveries added, claimed under a
lease, settled) and the A2A push configs of each task."""

from __future__ import annotations

import sqlite3
from datetime import datetime

from engine_service.core.deliveries import Delivery, PushConfig
from engine_service.core.errors import InvalidInput
from engine_service.stores.encoding import dumps
from engine_service.stores.sqlite.file import SqliteFile, off_loop
from engine_service.stores.sqlite.rows import (
    DELIVERY_COLUMNS,
    PUSH_COLUMNS,
    iso,
    sql_limit,
    to_delivery,
    to_push_config,
)

__all__ = ["SqliteDeliveries", "insert_delivery"]


def insert_delivery(conn: sqlite3.Connection, delivery: Delivery) -> None:
    """Add ``delivery`` to the outbox in ``conn``'s transaction; one with its id is kept,
    and so is one whose conversation is gone: nothing is added for it (deleting the
    conversation deleted its deliveries, ``ON DELETE CASCADE``)."""
    session_id = delivery.session_id or None
    conn.execute(
        "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
        " attempts, next_attempt_at, status, last_error, session_id)"
        " SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"
        " WHERE ? IS NULL OR EXISTS (SELECT 1 FROM sessions WHERE id = ?)"
        " ON CONFLICT (id) DO NOTHING",
        (
            delivery.id,
            delivery.kind,
            delivery.url,
            dumps(delivery.headers, "headers"),
            delivery.payload,
            iso(delivery.created_at, "created_at"),
            delivery.attempts,
            iso(delivery.next_attempt_at, "next_attempt_at"),
            delivery.status.value,
            delivery.last_error,
            session_id,
            session_id,
            session_id,
        ),
    )


class SqliteDeliveries(SqliteFile):
    """The delivery outbox and the push configs, a part of ``SqliteSessionStore``."""

    @off_loop
    def add_delivery(self, delivery: Delivery) -> None:
        with self._tx() as conn:
            insert_delivery(conn, delivery)

    @off_loop
    def claim_deliveries(
        self, replica: str, now: datetime, until: datetime, limit: int
    ) -> list[Delivery]:
        now_stamp, until_stamp = iso(now, "now"), iso(until, "until")
        with self._tx() as conn:  # BEGIN IMMEDIATE: one claimer at a time
            rows = conn.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE status = 'pending'"
                " AND next_attempt_at <= ? AND (lease_until IS NULL OR lease_until < ?)"
                " ORDER BY next_attempt_at, created_at, id LIMIT ?",
                (now_stamp, now_stamp, sql_limit(limit)),
            ).fetchall()
            conn.executemany(
                "UPDATE deliveries SET replica = ?, lease_until = ?, attempts = attempts + 1"
                " WHERE id = ?",
                [(replica, until_stamp, row[0]) for row in rows],
            )
        claimed = [to_delivery(row) for row in rows]
        for delivery in claimed:
            delivery.attempts += 1  # as stored: the claim counts the attempt
        return claimed

    @off_loop
    def settle_delivery(self, replica: str, delivery: Delivery, now: datetime) -> bool:
        with self._tx() as conn:
            cursor = conn.execute(
                "UPDATE deliveries SET attempts = ?, status = ?, next_attempt_at = ?,"
                " last_error = ?, updated_at = ?, replica = '', lease_until = NULL"
                " WHERE id = ? AND replica = ?",
                (
                    delivery.attempts,
                    delivery.status.value,
                    iso(delivery.next_attempt_at, "next_attempt_at"),
                    delivery.last_error,
                    iso(now, "now"),
                    delivery.id,
                    replica,
                ),
            )
            return cursor.rowcount > 0

    @off_loop
    def get_delivery(self, delivery_id: str) -> Delivery | None:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
        return to_delivery(row) if row else None

    @off_loop
    def failed_deliveries(self, offset: int, limit: int) -> tuple[list[Delivery], int]:
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE status = 'failed'"
                " ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
                (sql_limit(limit), offset),
            ).fetchall()
            (total,) = conn.execute(
                "SELECT count(*) FROM deliveries WHERE status = 'failed'"
            ).fetchone()
        return [to_delivery(row) for row in rows], int(total)

    async def add_push_config(self, config: PushConfig, limit: int) -> PushConfig:
        # Noted before the write: a session noted may have none, never the other way round.
        self._push_sessions.add(config.session_id)
        return await self._add_push_config(config, limit)

    @off_loop
    def _add_push_config(self, config: PushConfig, limit: int) -> PushConfig:
        with self._tx() as conn:
            self._require(conn, config.session_id)
            (held,) = conn.execute(
                "SELECT count(*) FROM push_configs WHERE task_id = ? AND id != ?",
                (config.task_id, config.id),
            ).fetchone()
            if held >= limit:
                raise InvalidInput(
                    f"the task has {limit} push notification configs, the most it may"
                )
            conn.execute(
                "DELETE FROM push_configs WHERE task_id = ? AND id = ?", (config.task_id, config.id)
            )
            conn.execute(
                "INSERT INTO push_configs (id, task_id, session_id, url, created_at, token,"
                " auth_scheme, auth_credentials, n) VALUES (?, ?, ?, ?, ?, ?, ?, ?,"
                " (SELECT coalesce(max(n), 0) + 1 FROM push_configs))",
                (
                    config.id,
                    config.task_id,
                    config.session_id,
                    config.url,
                    iso(config.created_at, "created_at"),
                    config.token,
                    config.auth_scheme,
                    config.auth_credentials,
                ),
            )
        return config

    @off_loop
    def push_configs(self, task_id: str) -> list[PushConfig]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {PUSH_COLUMNS} FROM push_configs WHERE task_id = ? ORDER BY n",
                (task_id,),
            ).fetchall()
        return [to_push_config(row) for row in rows]

    async def session_push_configs(self, session_id: str) -> list[PushConfig]:
        if session_id not in self._push_sessions:
            return []  # most sessions: nothing read through the writer
        return await self._session_push_configs(session_id)

    @off_loop
    def _session_push_configs(self, session_id: str) -> list[PushConfig]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {PUSH_COLUMNS} FROM push_configs WHERE session_id = ? ORDER BY n",
                (session_id,),
            ).fetchall()
        return [to_push_config(row) for row in rows]

    @off_loop
    def delete_push_config(self, task_id: str, config_id: str) -> bool:
        with self._tx() as conn:
            cursor = conn.execute(
                "DELETE FROM push_configs WHERE task_id = ? AND id = ?", (task_id, config_id)
            )
            return cursor.rowcount > 0
