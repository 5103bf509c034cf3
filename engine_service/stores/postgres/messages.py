"""The PostgreSQL store's conversation history: the messages of each session in order, read
by page, by run or from its checkpoint (what a run starts from), and appended in the
writer's batches, with the events that tell of them when a run starts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg
import psycopg.errors

from engine_service.core.errors import AlreadyExists, InvalidInput, SessionNotFound
from engine_service.core.events import Event
from engine_service.core.models import Message
from engine_service.core.store import Checkpoint, RunContext, RunHold
from engine_service.stores.encoding import encode_messages as _encode_messages
from engine_service.stores.encoding import message_from_dict, run_not_held
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.calls import Statement
from engine_service.stores.postgres.connections import Conn
from engine_service.stores.postgres.events import (
    HELD_ROW,
    PostgresEvents,
    check_held,
    hold_params,
)
from engine_service.stores.postgres.rows import ContextRows, context_from, sql_limit

__all__ = ["PostgresMessages"]

_APPEND_MESSAGES = """
INSERT INTO messages (session_id, position, id, body, run_id)
SELECT %(session)s,
    (SELECT coalesce(max(position), -1) FROM messages WHERE session_id = %(session)s) + u.n,
    u.id, u.body, u.run_id
FROM unnest(%(message_ids)s::text[], %(message_bodies)s::text[], %(message_runs)s::text[])
    WITH ORDINALITY AS u (id, body, run_id, n)
WHERE EXISTS (SELECT 1 FROM sessions WHERE id = %(session)s){held}
"""
"""Messages after the session's last position (its row locked by the statement before);
``held``: only while the run holds the session (``_HELD``)."""

_NAME_HELD_SESSION = """
UPDATE sessions SET title = %(title)s, updated_at = coalesce(%(stamp)s, updated_at)
WHERE id = %(session)s{held}
"""

_HELD = f"\n    AND EXISTS ({HELD_ROW})\nRETURNING 1"
"""The condition of a run's write (``RunHold``) read after the session's row was locked, and
a row for each row written: none when the run no longer holds the session."""

_APPEND_MESSAGES_AND_EVENTS = """
WITH moved AS (
    UPDATE sessions SET last_seq = %(last)s, reserved_seq = greatest(reserved_seq, %(reserve)s),
        title = CASE WHEN %(title)s = '' THEN title ELSE %(title)s END,
        updated_at = CASE WHEN %(title)s = '' THEN updated_at
            ELSE coalesce(%(stamp)s, updated_at) END
    WHERE id = %(session)s AND last_seq < %(first)s
    RETURNING id
), stored AS (
    INSERT INTO messages (session_id, position, id, body, run_id)
    SELECT moved.id,
        (SELECT coalesce(max(position), -1) FROM messages WHERE session_id = %(session)s) + u.n,
        u.id, u.body, u.run_id
    FROM moved,
        unnest(%(message_ids)s::text[], %(message_bodies)s::text[], %(message_runs)s::text[])
        WITH ORDINALITY AS u (id, body, run_id, n)
), inserted AS (
    INSERT INTO events (session_id, seq, time, run_id, body)
    SELECT moved.id, u.seq, u.time, u.run_id, u.body FROM moved,
        unnest(%(seqs)s::bigint[], %(times)s::float8[], %(runs)s::text[], %(bodies)s::text[])
        AS u (seq, time, run_id, body)
)
SELECT pg_notify(%(channel)s, %(signal)s) FROM moved
"""
"""Messages (at the end of the history), the session's title, and the events that go with
them, in one statement after the one that locked the session's row (so that the last
position is read under that lock): all of it under the events' condition
(``APPEND_EVENTS``), so that what refuses the events (another replica took the run over or
closed it: ``RunHold``) refuses the messages too. No row when refused."""


def _message_params(
    messages: Sequence[Message], encoded: list[tuple[str, str]]
) -> dict[str, list[str]]:
    return {
        "message_ids": [mid for mid, _ in encoded],
        "message_bodies": [body for _, body in encoded],
        "message_runs": [message.run_id for message in messages],
    }


class PostgresMessages(PostgresEvents):
    """The messages and checkpoints of ``PostgresSessionStore``; built on its event log,
    which a run's input is appended with."""

    async def list_messages(
        self, session_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        size = sql_limit(limit)

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            await self._require(conn, session_id)
            after = -1
            if after_id:
                row = await self._one(
                    conn,
                    "SELECT position FROM messages WHERE session_id = %s AND id = %s",
                    (session_id, after_id),
                )
                if row is None:
                    raise InvalidInput(f"after_id {after_id!r} is not a message of the session")
                after = row[0]
            return await self._all(
                conn,
                "SELECT body FROM messages WHERE session_id = %s AND position > %s"
                " ORDER BY position LIMIT %s",
                (session_id, after, size + 1 if size else None),
            )

        rows = await self._snapshot(work)
        more = size is not None and size < len(rows)
        kept = rows[:size] if more else rows
        return [message_from_dict(json.loads(r[0])) for r in kept], more

    async def all_messages(self, session_id: str) -> list[Message]:
        messages, _ = await self.list_messages(session_id, "", 0)
        return messages

    async def save_checkpoint(
        self, session_id: str, checkpoint: Checkpoint, *, hold: RunHold | None = None
    ) -> Checkpoint:
        async def work(conn: Conn) -> int:
            await self._require(conn, session_id, lock=True)
            if hold is not None:
                await check_held(conn, session_id, hold)
            row = await self._one(
                conn,
                "SELECT position FROM messages WHERE session_id = %s AND id = %s",
                (session_id, checkpoint.through_id),
            )
            if row is None:
                raise InvalidInput(
                    f"through_id {checkpoint.through_id[:80]!r} is not a message of the session"
                )
            await conn.execute(
                "INSERT INTO checkpoints (session_id, position, through_id, summary, tokens)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id) DO UPDATE SET"
                " position = excluded.position, through_id = excluded.through_id,"
                " summary = excluded.summary, tokens = excluded.tokens",
                (session_id, row[0], checkpoint.through_id, checkpoint.summary, checkpoint.tokens),
            )
            return int(row[0])

        position = await self._write(work)
        return replace(checkpoint, covered=position + 1)

    async def context_messages(self, session_id: str) -> tuple[Checkpoint | None, list[Message]]:
        async def work(conn: Conn) -> ContextRows:
            await self._require(conn, session_id)
            return await self._context_rows(conn, session_id)

        return context_from(*await self._snapshot(work))

    async def run_context(self, session_id: str, ids: Sequence[str]) -> RunContext:
        # One snapshot, not two: a round trip fewer before a run starts.
        async def work(conn: Conn) -> tuple[ContextRows, list[tuple[Any, ...]]]:
            await self._require(conn, session_id)
            rows = await self._context_rows(conn, session_id)
            known = await self._known_rows(conn, session_id, ids) if ids else []
            return rows, known

        rows, known = await self._snapshot(work)
        return *context_from(*rows), {r[0] for r in known}

    async def _context_rows(self, conn: Conn, session_id: str) -> ContextRows:
        row = await self._one(
            conn,
            "SELECT position, through_id, summary, tokens FROM checkpoints WHERE session_id = %s",
            (session_id,),
        )
        rows = await self._all(
            conn,
            "SELECT body FROM messages WHERE session_id = %s AND position > %s ORDER BY position",
            (session_id, row[0] if row is not None else -1),
        )
        return row, rows

    async def _known_rows(
        self, conn: Conn, session_id: str, ids: Sequence[str]
    ) -> list[tuple[Any, ...]]:
        return await self._all(
            conn,
            "SELECT id FROM messages WHERE session_id = %s AND id = ANY(%s)",
            (session_id, list(ids)),
        )

    async def list_run_messages(
        self, session_id: str, run_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        size = sql_limit(limit)

        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            await self._require(conn, session_id)
            after = -1
            if after_id:
                row = await self._one(
                    conn,
                    "SELECT position FROM messages WHERE session_id = %s AND id = %s"
                    " AND run_id = %s",
                    (session_id, after_id, run_id),
                )
                if row is None:
                    raise InvalidInput(f"after_message_id {after_id!r} is not a message of the run")
                after = row[0]
            return await self._all(
                conn,
                "SELECT body FROM messages WHERE session_id = %s AND run_id = %s"
                " AND position > %s ORDER BY position LIMIT %s",
                (session_id, run_id, after, size + 1 if size else None),
            )

        rows = await self._snapshot(work)
        more = size is not None and size < len(rows)
        kept = rows[:size] if more else rows
        return [message_from_dict(json.loads(r[0])) for r in kept], more

    async def recent_messages(self, session_id: str, limit: int) -> list[Message]:
        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            await self._require(conn, session_id)
            return await self._all(
                conn,
                "SELECT body FROM messages WHERE session_id = %s ORDER BY position DESC LIMIT %s",
                (session_id, max(limit, 0)),
            )

        rows = await self._snapshot(work)
        return [message_from_dict(json.loads(r[0])) for r in reversed(rows)]

    async def known_message_ids(self, session_id: str, ids: Sequence[str]) -> set[str]:
        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            await self._require(conn, session_id)
            return await self._known_rows(conn, session_id, ids)

        if not ids:
            return set()
        return {r[0] for r in await self._snapshot(work)}

    async def run_messages(
        self, session_id: str, run_ids: Sequence[str], last: int
    ) -> tuple[list[Message], bool]:
        async def work(conn: Conn) -> list[tuple[Any, ...]]:
            await self._require(conn, session_id)
            return await self._all(
                conn,
                "SELECT body FROM messages WHERE session_id = %s AND run_id = ANY(%s)"
                " ORDER BY position DESC LIMIT %s",
                (session_id, list(run_ids), last + 1),
            )

        rows = await self._snapshot(work)
        kept = [message_from_dict(json.loads(r[0])) for r in rows[:last]]
        return kept[::-1], len(rows) > last

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        try:
            rows = await self._batch.first(
                self._message_statements(session_id, messages, title, now, hold)
            )
        except psycopg.errors.UniqueViolation as exc:
            raise AlreadyExists("a message id already exists in the session") from exc
        if rows[0] is None:
            raise SessionNotFound(session_id)
        if hold is not None and len(rows) > 1 and rows[-1] is None:
            raise run_not_held(hold.run_id)

    async def append_messages_and_events(
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
        if not events:
            await super().append_messages_and_events(
                session_id,
                messages,
                events,
                reserve_through=reserve_through,
                title=title,
                now=now,
                hold=hold,
            )
            return
        rows, params = self._event_params(session_id, events, reserve_through)
        encoded = _encode_messages(messages)
        params.update(
            _message_params(messages, encoded),
            title=title,
            stamp=_utc(now, "now") if title and now is not None else None,
        )
        # One transaction, in the writer's next batch: the session's row locked, then the
        # messages and the events in one statement, under one condition (the events' seqs
        # follow the last stored one): what refuses the events, another replica having
        # taken the run over or closed it (``RunHold``), refuses the messages too.
        try:
            found, moved = await self._batch.first(
                [
                    ("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,)),
                    (_APPEND_MESSAGES_AND_EVENTS, params),
                ]
            )
        except psycopg.errors.UniqueViolation as exc:
            raise AlreadyExists("a message id already exists in the session") from exc
        if found is None:
            raise SessionNotFound(session_id)
        if moved is None:
            await self._refused_unless_held(session_id, rows)

    def _message_statements(
        self,
        session_id: str,
        messages: Sequence[Message],
        title: str,
        now: datetime | None,
        hold: RunHold | None,
    ) -> list[Statement]:
        """``append_messages``' statements; the first returns a row when the session exists,
        each of the others (with ``hold``) a row when the run holds it."""
        encoded = _encode_messages(messages)
        stamp = _utc(now, "now") if title and now is not None else None
        held = {} if hold is None else hold_params(hold)
        condition = _HELD if hold is not None else ""
        # The session row locked first; the insert, a statement of its own, then reads the
        # last position under that lock (each statement sees what committed before it).
        statements: list[Statement] = [
            ("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,))
        ]
        if encoded:
            inserted = {"session": session_id, **held, **_message_params(messages, encoded)}
            statements.append((_APPEND_MESSAGES.format(held=condition), inserted))
        if title and hold is not None:
            named = {"session": session_id, **held, "title": title, "stamp": stamp}
            statements.append((_NAME_HELD_SESSION.format(held=condition), named))
        elif title:
            statements.append(
                (
                    "UPDATE sessions SET title = %s, updated_at = coalesce(%s, updated_at)"
                    " WHERE id = %s",
                    (title, stamp, session_id),
                )
            )
        return statements

    async def replace_messages(
        self, session_id: str, messages: Sequence[Message], *, hold: RunHold | None = None
    ) -> None:
        encoded = _encode_messages(messages)
        runs = [message.run_id for message in messages]
        if len({message_id for message_id, _ in encoded}) != len(encoded):
            raise InvalidInput("message ids must be unique")

        async def work(conn: Conn) -> None:
            await self._require(conn, session_id, lock=True)
            if hold is not None:
                await check_held(conn, session_id, hold)
            await conn.execute("DELETE FROM messages WHERE session_id = %s", (session_id,))
            await conn.execute("DELETE FROM checkpoints WHERE session_id = %s", (session_id,))
            if encoded:
                async with conn.cursor() as cursor:
                    await cursor.executemany(
                        "INSERT INTO messages (session_id, position, id, body, run_id)"
                        " VALUES (%s, %s, %s, %s, %s)",
                        [
                            (session_id, i, mid, body, run_id)
                            for i, ((mid, body), run_id) in enumerate(
                                zip(encoded, runs, strict=True)
                            )
                        ],
                    )

        await self._write(work)
