"""The SQLite store's sessions: made, read, listed newest first, renamed, forked at a
message, deleted with all they hold; their state and webhook."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime

from engine_service.core.errors import AlreadyExists, InvalidInput, SessionBusy
from engine_service.core.models import JSON, Session
from engine_service.core.store import RunHold
from engine_service.stores.encoding import dumps, session_filter
from engine_service.stores.sqlite.errors import mapped_errors
from engine_service.stores.sqlite.events import check_held
from engine_service.stores.sqlite.file import SqliteFile, off_loop
from engine_service.stores.sqlite.rows import SESSION_COLUMNS, iso, sql_limit, to_session

__all__ = ["SqliteSessions"]


class SqliteSessions(SqliteFile):
    """The sessions, a part of ``SqliteSessionStore``."""

    @off_loop
    def create_session(
        self, session_id: str, title: str, now: datetime, *, owner: str = "", agent: str = ""
    ) -> Session:
        stamp = iso(now, "now")
        if not session_id:
            raise InvalidInput("session id must not be empty")
        with self._tx() as conn:
            try:
                conn.execute(
                    "INSERT INTO sessions (id, title, created_at, updated_at, owner, agent)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (session_id, title, stamp, stamp, owner, agent),
                )
            except sqlite3.IntegrityError as exc:
                raise AlreadyExists(f"session {session_id!r} already exists") from exc
            return self._load(conn, session_id)

    @off_loop
    def count_sessions(self, owner: str) -> int:
        with self._read() as conn:  # the index sessions_by_owner
            (total,) = conn.execute(
                "SELECT count(*) FROM sessions WHERE owner = ?", (owner,)
            ).fetchone()
        return int(total)

    @off_loop
    def get_session(self, session_id: str) -> Session:
        with mapped_errors():
            return self._load(self._conn, session_id)

    @off_loop
    def list_sessions(
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
        where, args = session_filter("?", "s.", owner, agents)
        with self._read() as conn:
            (total,) = conn.execute(f"SELECT count(*) FROM sessions s {where}", args).fetchone()
            rows = conn.execute(
                f"SELECT {SESSION_COLUMNS} FROM sessions s {where}"
                " ORDER BY s.updated_at DESC, s.id LIMIT ? OFFSET ?",
                (*args, size, offset),
            ).fetchall()
        return [to_session(row) for row in rows], total

    @off_loop
    def rename_session(self, session_id: str, title: str, now: datetime) -> Session:
        stamp = iso(now, "now")
        with self._tx() as conn:
            conn.execute(
                "UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?",
                (title, stamp, session_id),
            )
            return self._load(conn, session_id)

    @off_loop
    def set_session_webhook(self, session_id: str, url: str, now: datetime) -> Session:
        stamp = iso(now, "now")
        with self._tx() as conn:
            self._require(conn, session_id)
            conn.execute(
                "UPDATE sessions SET webhook_url = ?, updated_at = ? WHERE id = ?",
                (url, stamp, session_id),
            )
            return self._load(conn, session_id)

    @off_loop
    def delete_session(self, session_id: str) -> None:
        with self._tx() as conn:
            active = self._require(conn, session_id)
            if active:
                raise SessionBusy(session_id, active)
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))

    @off_loop
    def fork_session(
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
        stamp = iso(now, "now")
        if not new_id:
            raise InvalidInput("session id must not be empty")
        with self._tx() as conn:
            self._require(conn, source_id, source_owner)
            row = conn.execute(
                "SELECT position FROM messages WHERE session_id = ? AND id = ?",
                (source_id, up_to_message_id),
            ).fetchone()
            if row is None:
                raise InvalidInput(
                    f"up_to_message_id {up_to_message_id!r} is not a message of the session"
                )
            try:
                conn.execute(
                    "INSERT INTO sessions"
                    " (id, title, created_at, updated_at, owner, state, agent)"
                    " SELECT ?, ?, ?, ?, ?, state, agent FROM sessions WHERE id = ?",
                    (new_id, title, stamp, stamp, owner, source_id),
                )
            except sqlite3.IntegrityError as exc:
                raise AlreadyExists(f"session {new_id!r} already exists") from exc
            conn.execute(
                "INSERT INTO messages (session_id, position, id, body)"
                " SELECT ?, position, id, body FROM messages"
                " WHERE session_id = ? AND position <= ?",
                (new_id, source_id, row[0]),
            )
            return self._load(conn, new_id)

    @off_loop
    def set_state(self, session_id: str, state: JSON, *, hold: RunHold | None = None) -> None:
        text = dumps(state, "state")
        with self._tx() as conn:
            self._require(conn, session_id)
            check_held(conn, session_id, hold)
            conn.execute("UPDATE sessions SET state = ? WHERE id = ?", (text, session_id))
