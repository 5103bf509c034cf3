"""The PostgreSQL store's sessions themselves: made, read, listed by page, renamed, given a
webhook or a state, forked at a message, and deleted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engine_service.core.errors import AlreadyExists, InvalidInput, SessionBusy, SessionNotFound
from engine_service.core.models import JSON, Session
from engine_service.core.store import RunHold
from engine_service.stores.encoding import dumps as _dumps
from engine_service.stores.encoding import run_not_held, session_filter
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.events import HELD, hold_params
from engine_service.stores.postgres.rows import SESSION_COLUMNS, session_from, sql_limit

__all__ = ["PostgresSessions"]

_SET_HELD_STATE = f"""
UPDATE sessions SET state = %(state)s WHERE id = %(session)s AND {HELD} RETURNING 1
"""
"""A state set by a run that holds the session (``HELD``)."""


class PostgresSessions(PostgresConnections):
    """The sessions of ``PostgresSessionStore``."""

    async def create_session(
        self, session_id: str, title: str, now: datetime, *, owner: str = "", agent: str = ""
    ) -> Session:
        stamp = _utc(now, "now")
        if not session_id:
            raise InvalidInput("session id must not be empty")

        async def work(conn: Conn) -> Session:
            cursor = await conn.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, owner, agent)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (session_id, title, stamp, stamp, owner, agent),
            )
            if cursor.rowcount != 1:
                raise AlreadyExists(f"session {session_id!r} already exists")
            return await self._load(conn, session_id)

        return await self._write(work)

    async def get_session(self, session_id: str) -> Session:
        (rows,) = await self._reads.submit(
            [(f"SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = %s", (session_id,))]
        )
        if not rows:
            raise SessionNotFound(session_id)
        return session_from(rows[0])

    async def list_sessions(
        self,
        offset: int,
        limit: int,
        *,
        owner: str | None = None,
        agents: Sequence[str] | None = None,
    ) -> tuple[list[Session], int]:
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        size = sql_limit(limit)
        where, args = session_filter("%s", "s.", owner, agents)

        async def work(conn: Conn) -> tuple[list[Session], int]:
            total = await self._one(conn, f"SELECT count(*) FROM sessions s {where}", args)
            rows = await self._all(
                conn,
                f"SELECT {SESSION_COLUMNS} FROM sessions s {where}"
                " ORDER BY s.updated_at DESC, s.id LIMIT %s OFFSET %s",
                (*args, size, offset),
            )
            return [session_from(row) for row in rows], int(total[0]) if total else 0

        return await self._snapshot(work)

    async def count_sessions(self, owner: str) -> int:
        async def work(conn: Conn) -> int:  # the index sessions_by_owner
            row = await self._one(conn, "SELECT count(*) FROM sessions WHERE owner = %s", (owner,))
            return int(row[0]) if row else 0

        return await self._snapshot(work)

    async def rename_session(self, session_id: str, title: str, now: datetime) -> Session:
        stamp = _utc(now, "now")

        _, row = await self._batch.first(
            [
                (
                    "UPDATE sessions SET title = %s, updated_at = %s WHERE id = %s",
                    (title, stamp, session_id),
                ),
                (f"SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = %s", (session_id,)),
            ]
        )
        if row is None:
            raise SessionNotFound(session_id)
        return session_from(row)

    async def set_session_webhook(self, session_id: str, url: str, now: datetime) -> Session:
        stamp = _utc(now, "now")

        async def work(conn: Conn) -> Session:
            await self._require(conn, session_id)
            await conn.execute(
                "UPDATE sessions SET webhook_url = %s, updated_at = %s WHERE id = %s",
                (url, stamp, session_id),
            )
            return await self._load(conn, session_id)

        return await self._write(work)

    async def delete_session(self, session_id: str) -> None:
        async def work(conn: Conn) -> None:
            active = await self._require(conn, session_id, lock=True)
            if active:
                raise SessionBusy(session_id, active)
            await conn.execute("DELETE FROM sessions WHERE id = %s", (session_id,))

        await self._write(work)

    async def set_state(self, session_id: str, state: JSON, *, hold: RunHold | None = None) -> None:
        text = _dumps(state, "state")
        if hold is None:
            (found,) = await self._batch.first(
                [("UPDATE sessions SET state = %s WHERE id = %s RETURNING 1", (text, session_id))]
            )
            if found is None:
                raise SessionNotFound(session_id)
            return
        params = {"state": text, "session": session_id, **hold_params(hold)}
        (found,) = await self._batch.first([(_SET_HELD_STATE, params)])
        if found is None:

            async def exists(conn: Conn) -> None:
                await self._require(conn, session_id)

            await self._read(exists)  # SessionNotFound, or:
            raise run_not_held(hold.run_id)

    async def fork_session(
        self,
        source_id: str,
        up_to_message_id: str,
        new_id: str,
        now: datetime,
        *,
        owner: str = "",
        source_owner: str | None = None,
        title: str = "",
    ) -> Session:
        stamp = _utc(now, "now")
        if not new_id:
            raise InvalidInput("session id must not be empty")

        async def work(conn: Conn) -> Session:
            await self._require(conn, source_id, source_owner)
            row = await self._one(
                conn,
                "SELECT position FROM messages WHERE session_id = %s AND id = %s",
                (source_id, up_to_message_id),
            )
            if row is None:
                raise InvalidInput(
                    f"up_to_message_id {up_to_message_id!r} is not a message of the session"
                )
            cursor = await conn.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, owner, state, agent)"
                " SELECT %s, %s, %s, %s, %s, state, agent FROM sessions WHERE id = %s"
                " ON CONFLICT (id) DO NOTHING",
                (new_id, title, stamp, stamp, owner, source_id),
            )
            if cursor.rowcount != 1:
                raise AlreadyExists(f"session {new_id!r} already exists")
            await conn.execute(
                "INSERT INTO messages (session_id, position, id, body, run_id)"
                " SELECT %s, position, id, body, run_id FROM messages"
                " WHERE session_id = %s AND position <= %s",
                (new_id, source_id, row[0]),
            )
            return await self._load(conn, new_id)

        return await self._write(work)
