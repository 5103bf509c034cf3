"""The SQLite store's messages: a session's history in order, paged, by run, from its
compaction checkpoint on; appended, replaced, and the checkpoint saved."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from engine_service.core.errors import AlreadyExists, InvalidInput, SessionNotFound
from engine_service.core.events import Event
from engine_service.core.models import Message
from engine_service.core.store import Checkpoint, RunContext, RunHold
from engine_service.stores.encoding import (
    encode_messages,
    event_rows,
    message_from_dict,
    run_not_held,
)
from engine_service.stores.sqlite.events import HELD, check_held, hold_of, insert_events
from engine_service.stores.sqlite.file import SqliteFile, goes_first, off_loop
from engine_service.stores.sqlite.rows import iso, sql_limit

__all__ = ["SqliteMessages", "known_ids", "read_context"]


def read_context(
    conn: sqlite3.Connection, session_id: str
) -> tuple[Checkpoint | None, list[Message]]:
    """The session's compaction checkpoint (None without one) and the messages after it."""
    row = conn.execute(
        "SELECT position, through_id, summary, tokens FROM checkpoints WHERE session_id = ?",
        (session_id,),
    ).fetchone()
    checkpoint = None
    if row is not None:
        checkpoint = Checkpoint(row[1], row[2], row[3], covered=row[0] + 1)
    rows = conn.execute(
        "SELECT body FROM messages WHERE session_id = ? AND position > ? ORDER BY position",
        (session_id, row[0] if row is not None else -1),
    ).fetchall()
    return checkpoint, [message_from_dict(json.loads(r[0])) for r in rows]


def known_ids(conn: sqlite3.Connection, session_id: str, ids: Sequence[str]) -> set[str]:
    """Those of ``ids`` that are messages of the session."""
    found: set[str] = set()
    for start in range(0, len(ids), 500):  # under SQLite's limit of variables
        batch = ids[start : start + 500]
        rows = conn.execute(
            "SELECT id FROM messages WHERE session_id = ?"
            f" AND id IN ({', '.join('?' * len(batch))})",
            (session_id, *batch),
        ).fetchall()
        found.update(r[0] for r in rows)
    return found


def _insert_messages(
    conn: sqlite3.Connection,
    session_id: str,
    encoded: list[tuple[str, str]],
    title: str,
    stamp: str | None,
    hold: RunHold | None = None,
) -> None:
    """Append ``encoded`` messages at the end of the history (and name the session
    ``title``); ``SessionNotFound`` when it does not exist, ``InvalidInput`` when the run
    of ``hold`` no longer holds it."""
    held, fence = ("1", ()) if hold is None else (HELD, (session_id, *hold_of(hold)))
    found = conn.execute(
        "SELECT (SELECT coalesce(max(position), -1) FROM messages WHERE session_id = ?),"
        f" {held} FROM sessions WHERE id = ?",
        (session_id, *fence, session_id),
    ).fetchone()
    if found is None:
        raise SessionNotFound(session_id)
    last, holds = found
    if not holds:
        assert hold is not None
        raise run_not_held(hold.run_id)
    try:
        conn.executemany(
            "INSERT INTO messages (session_id, position, id, body) VALUES (?, ?, ?, ?)",
            [(session_id, last + 1 + i, mid, body) for i, (mid, body) in enumerate(encoded)],
        )
    except sqlite3.IntegrityError as exc:
        raise AlreadyExists("a message id already exists in the session") from exc
    if title:
        conn.execute(
            "UPDATE sessions SET title = ?, updated_at = coalesce(?, updated_at) WHERE id = ?",
            (title, stamp, session_id),
        )


class SqliteMessages(SqliteFile):
    """The messages, a part of ``SqliteSessionStore``."""

    @off_loop
    def list_messages(
        self, session_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        return self._list_messages(session_id, after_id, limit)

    def _list_messages(
        self, session_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        size = sql_limit(limit)
        with self._read() as conn:
            self._require(conn, session_id)
            after = -1
            if after_id:
                row = conn.execute(
                    "SELECT position FROM messages WHERE session_id = ? AND id = ?",
                    (session_id, after_id),
                ).fetchone()
                if row is None:
                    raise InvalidInput(f"after_id {after_id!r} is not a message of the session")
                after = row[0]
            rows = conn.execute(
                "SELECT body FROM messages WHERE session_id = ? AND position > ?"
                " ORDER BY position LIMIT ?",
                (session_id, after, size + 1 if size > 0 else -1),
            ).fetchall()
        more = 0 < size < len(rows)
        return [message_from_dict(json.loads(r[0])) for r in rows[: len(rows) - more]], more

    @off_loop
    def all_messages(self, session_id: str) -> list[Message]:
        messages, _ = self._list_messages(session_id, "", 0)
        return messages

    @off_loop
    def save_checkpoint(
        self, session_id: str, checkpoint: Checkpoint, *, hold: RunHold | None = None
    ) -> Checkpoint:
        with self._tx() as conn:
            self._require(conn, session_id)
            check_held(conn, session_id, hold)
            row = conn.execute(
                "SELECT position FROM messages WHERE session_id = ? AND id = ?",
                (session_id, checkpoint.through_id),
            ).fetchone()
            if row is None:
                raise InvalidInput(
                    f"through_id {checkpoint.through_id[:80]!r} is not a message of the session"
                )
            conn.execute(
                "INSERT INTO checkpoints (session_id, position, through_id, summary, tokens)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET"
                " position = excluded.position, through_id = excluded.through_id,"
                " summary = excluded.summary, tokens = excluded.tokens",
                (session_id, row[0], checkpoint.through_id, checkpoint.summary, checkpoint.tokens),
            )
        return replace(checkpoint, covered=row[0] + 1)

    @off_loop
    def context_messages(self, session_id: str) -> tuple[Checkpoint | None, list[Message]]:
        with self._read() as conn:
            self._require(conn, session_id)
            return read_context(conn, session_id)

    @off_loop
    @goes_first
    def run_context(self, session_id: str, ids: Sequence[str]) -> RunContext:
        # One operation, not two: under load each waits for the writer's next batch.
        with self._read() as conn:
            self._require(conn, session_id)
            return *read_context(conn, session_id), known_ids(conn, session_id, ids)

    @off_loop
    def list_run_messages(
        self, session_id: str, run_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        size = sql_limit(limit)
        # The expression is messages_by_run's, so the index finds the rows.
        with self._read() as conn:
            self._require(conn, session_id)
            after = -1
            if after_id:
                row = conn.execute(
                    "SELECT position FROM messages WHERE session_id = ? AND id = ?"
                    " AND json_extract(body, '$.run_id') = ?",
                    (session_id, after_id, run_id),
                ).fetchone()
                if row is None:
                    raise InvalidInput(f"after_message_id {after_id!r} is not a message of the run")
                after = row[0]
            rows = conn.execute(
                "SELECT body FROM messages WHERE session_id = ?"
                " AND json_extract(body, '$.run_id') = ? AND position > ?"
                " ORDER BY position LIMIT ?",
                (session_id, run_id, after, size + 1 if size > 0 else -1),
            ).fetchall()
        more = 0 < size < len(rows)
        return [message_from_dict(json.loads(r[0])) for r in rows[: len(rows) - more]], more

    @off_loop
    def recent_messages(self, session_id: str, limit: int) -> list[Message]:
        with self._read() as conn:
            self._require(conn, session_id)
            rows = conn.execute(
                "SELECT body FROM messages WHERE session_id = ? ORDER BY position DESC LIMIT ?",
                (session_id, max(limit, 0)),
            ).fetchall()
        return [message_from_dict(json.loads(r[0])) for r in reversed(rows)]

    @off_loop
    def known_message_ids(self, session_id: str, ids: Sequence[str]) -> set[str]:
        with self._read() as conn:
            self._require(conn, session_id)
            return known_ids(conn, session_id, ids)

    @off_loop
    def run_messages(
        self, session_id: str, run_ids: Sequence[str], last: int
    ) -> tuple[list[Message], bool]:
        # The expression is messages_by_run's, so the index finds the rows.
        marks = ", ".join("?" * len(run_ids))
        with self._read() as conn:
            self._require(conn, session_id)
            rows = conn.execute(
                "SELECT body FROM messages WHERE session_id = ?"
                f" AND json_extract(body, '$.run_id') IN ({marks})"
                " ORDER BY position DESC LIMIT ?",
                (session_id, *run_ids, last + 1),
            ).fetchall()
        kept = [message_from_dict(json.loads(r[0])) for r in rows[:last]]
        return kept[::-1], len(rows) > last

    @off_loop
    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        encoded = encode_messages(messages)
        stamp = iso(now, "now") if title and now is not None else None
        with self._tx() as conn:
            _insert_messages(conn, session_id, encoded, title, stamp, hold)

    @off_loop
    def append_messages_and_events(
        self,
        session_id: str,
        messages: Sequence[Message],
        events: Sequence[Event],
        *,
        reserve_through: int = 0,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        encoded = encode_messages(messages)
        stamp = iso(now, "now") if title and now is not None else None
        rows = event_rows(session_id, events)
        with self._tx() as conn:
            # What refuses the events (seqs that do not follow: the run taken over or
            # closed, ``RunHold``) refuses the messages: the transaction rolls back.
            insert_events(conn, session_id, rows, reserve_through)
            if encoded or title:
                _insert_messages(conn, session_id, encoded, title, stamp, None if rows else hold)

    @off_loop
    def replace_messages(
        self, session_id: str, messages: Sequence[Message], *, hold: RunHold | None = None
    ) -> None:
        encoded = encode_messages(messages)
        if len({message_id for message_id, _ in encoded}) != len(encoded):
            raise InvalidInput("message ids must be unique")
        with self._tx() as conn:
            self._require(conn, session_id)
            check_held(conn, session_id, hold)
            conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM checkpoints WHERE session_id = ?", (session_id,))
            conn.executemany(
                "INSERT INTO messages (session_id, position, id, body) VALUES (?, ?, ?, ?)",
                [(session_id, i, mid, body) for i, (mid, body) in enumerate(encoded)],
            )
