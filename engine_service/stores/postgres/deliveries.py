"""The PostgreSQL store's webhook delivery outbox (``core.deliveries``) and the A2A push
notification configs it delivers to, shared by every replica: a due delivery is claimed
under a lease by one replica at a time (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engine_service.core.deliveries import Delivery, PushConfig
from engine_service.core.errors import InvalidInput
from engine_service.stores.encoding import dumps as _dumps
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.rows import (
    DELIVERY_COLUMNS,
    PUSH_COLUMNS,
    delivery_from,
    push_config_from,
    sql_limit,
)

__all__ = ["PostgresDeliveries"]


class PostgresDeliveries(PostgresConnections):
    """The delivery outbox and the push notification configs of ``PostgresSessionStore``."""

    async def add_delivery(self, delivery: Delivery) -> None:
        session_id = delivery.session_id or None
        args = (
            delivery.id,
            delivery.kind,
            delivery.url,
            _dumps(delivery.headers, "headers"),
            delivery.payload,
            _utc(delivery.created_at, "created_at"),
            delivery.attempts,
            _utc(delivery.next_attempt_at, "next_attempt_at"),
            delivery.status.value,
            delivery.last_error,
            session_id,
            session_id,
            session_id,
        )

        # A delivery whose conversation is gone is not added (deleting it deleted its
        # deliveries: ON DELETE CASCADE). The session's row is locked (FOR KEY SHARE)
        # until the insert commits: a delete waits for it and takes it along, or, done
        # first, leaves nothing to lock, and nothing is added.
        async def work(conn: Conn) -> None:
            await conn.execute(
                "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
                " attempts, next_attempt_at, status, last_error, session_id)"
                " SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s"
                " WHERE %s::text IS NULL"
                " OR EXISTS (SELECT 1 FROM sessions WHERE id = %s FOR KEY SHARE)"
                " ON CONFLICT (id) DO NOTHING",
                args,
            )

        await self._write(work)

    async def claim_deliveries(
        self, replica: str, now: datetime, until: datetime, limit: int
    ) -> list[Delivery]:
        now_stamp, until_stamp = _utc(now, "now"), _utc(until, "until")
        columns = ", ".join("d." + c.strip() for c in DELIVERY_COLUMNS.split(","))

        # Rows another replica is claiming right now are skipped, not waited for; each is
        # re-checked under its lock, so no delivery is handed to two replicas.
        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            return await self._all(
                conn,
                "UPDATE deliveries AS d SET replica = %s, lease_until = %s,"
                " attempts = d.attempts + 1"
                " FROM (SELECT id FROM deliveries WHERE status = 'pending'"
                "       AND next_attempt_at <= %s AND (lease_until IS NULL OR lease_until < %s)"
                "       ORDER BY next_attempt_at, created_at, id LIMIT %s"
                "       FOR UPDATE SKIP LOCKED) AS due"
                f" WHERE d.id = due.id RETURNING {columns}",
                (replica, until_stamp, now_stamp, now_stamp, sql_limit(limit)),
            )

        rows = await self._write(work)
        claimed = [delivery_from(row) for row in rows]
        claimed.sort(key=lambda d: (d.next_attempt_at, d.created_at, d.id))
        return claimed

    async def settle_delivery(self, replica: str, delivery: Delivery, now: datetime) -> bool:
        args = (
            delivery.attempts,
            delivery.status.value,
            _utc(delivery.next_attempt_at, "next_attempt_at"),
            delivery.last_error,
            _utc(now, "now"),
            delivery.id,
            replica,
        )

        async def work(conn: Conn) -> bool:
            cursor = await conn.execute(
                "UPDATE deliveries SET attempts = %s, status = %s, next_attempt_at = %s,"
                " last_error = %s, updated_at = %s, replica = '', lease_until = NULL"
                " WHERE id = %s AND replica = %s",
                args,
            )
            return cursor.rowcount > 0

        return await self._write(work)

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        async def work(conn: Conn) -> tuple[Any, ...] | None:
            return await self._one(
                conn, f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE id = %s", (delivery_id,)
            )

        row = await self._read(work)
        return delivery_from(row) if row else None

    async def failed_deliveries(self, offset: int, limit: int) -> tuple[list[Delivery], int]:
        if offset < 0 or limit < 0:
            raise InvalidInput("offset and limit must not be negative")

        async def work(conn: Conn) -> tuple[list[Delivery], int]:
            total = await self._one(conn, "SELECT count(*) FROM deliveries WHERE status = 'failed'")
            rows = await self._all(
                conn,
                f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE status = 'failed'"
                " ORDER BY updated_at DESC, id DESC LIMIT %s OFFSET %s",
                (sql_limit(limit), offset),
            )
            return [delivery_from(row) for row in rows], int(total[0]) if total else 0

        return await self._snapshot(work)

    # -- push notification configs -------------------------------------------------

    async def add_push_config(self, config: PushConfig, limit: int) -> PushConfig:
        async def work(conn: Conn) -> PushConfig:
            await self._require(conn, config.session_id, lock=True)  # serialises the count
            held = await self._one(
                conn,
                "SELECT count(*) FROM push_configs WHERE task_id = %s AND id != %s",
                (config.task_id, config.id),
            )
            if held and held[0] >= limit:
                raise InvalidInput(
                    f"the task has {limit} push notification configs, the most it may"
                )
            await conn.execute(
                "DELETE FROM push_configs WHERE task_id = %s AND id = %s",
                (config.task_id, config.id),
            )
            await conn.execute(
                "INSERT INTO push_configs (id, task_id, session_id, url, created_at, token,"
                " auth_scheme, auth_credentials) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    config.id,
                    config.task_id,
                    config.session_id,
                    config.url,
                    _utc(config.created_at, "created_at"),
                    config.token,
                    config.auth_scheme,
                    config.auth_credentials,
                ),
            )
            return config

        return await self._write(work)

    async def push_configs(self, task_id: str) -> list[PushConfig]:
        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            return await self._all(
                conn,
                f"SELECT {PUSH_COLUMNS} FROM push_configs WHERE task_id = %s ORDER BY n",
                (task_id,),
            )

        return [push_config_from(row) for row in await self._read(work)]

    async def session_push_configs(self, session_id: str) -> list[PushConfig]:
        (rows,) = await self._reads.submit(
            [
                (
                    f"SELECT {PUSH_COLUMNS} FROM push_configs WHERE session_id = %s ORDER BY n",
                    (session_id,),
                )
            ]
        )
        return [push_config_from(row) for row in rows]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        async def work(conn: Conn) -> bool:
            cursor = await conn.execute(
                "DELETE FROM push_configs WHERE task_id = %s AND id = %s", (task_id, config_id)
            )
            return cursor.rowcount > 0

        return await self._write(work)
