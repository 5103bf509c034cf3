"""A ``SessionStore`` in PostgreSQL, which several engine replicas may share.

Built on psycopg 3 rather than asyncpg: psycopg delivers LISTEN/NOTIFY as an async
iterator (``conn.notifies()``), which is how replicas hear about each other's writes; it
comes with a maintained async connection pool (``psycopg_pool``); the same library runs
the migrations synchronously for ``agentik migrate``; and its parameters are plain SQL
``%s`` placeholders bound server-side.

Every write is one transaction on a pooled connection (autocommit outside explicit
transactions). Each call runs through ``postgres_calls.CallRunner``: a connection that
dies under it is replaced and the call run again where that is safe (reads, and writes
that did not commit), for up to ``retry_seconds``.

The "one active run per session" rule holds across replicas twice over: ``begin_run``
locks the session row (``SELECT ... FOR UPDATE``) and a unique partial index allows one
running run per session. Event appends lock the session row too, so ``last_seq`` and
``reserved_seq`` never go back whatever the number of writers.

Signals travel by ``pg_notify`` on one channel, sent inside the writing transaction so a
watcher hears of a change only once it is committed. The payload is a compact JSON array
``[kind, session_id, run_id, last_seq]``: ids are at most 128 characters, so it stays far
below PostgreSQL's 8000-byte limit. ``watch`` listens on a dedicated connection (outside
the pool) and reconnects with backoff when it drops; followers poll as well, so a gap
only delays them.

JSON (state, messages, events) is stored as ``text``, exactly as the other stores write
it (``jsonb`` would reorder keys and renormalise numbers); times as ``timestamptz``; event
times as ``double precision`` epoch seconds, as the events carry them. Id columns use
the "C" collation so that ordering by id matches the SQLite store (bytewise).

The pool opens lazily, on the first call, and the schema is migrated then (see
:func:`migrate`): ``open_store`` stays synchronous and an engine started while the
database is down serves ``StorageUnavailable`` until it comes back. ``open()`` does the
same eagerly.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import replace
from datetime import date, datetime, timedelta
from typing import Any, TypeVar

import psycopg
import psycopg.errors

from engine_service.core.errors import (
    AlreadyExists,
    InvalidInput,
    RunNotFound,
    SessionBusy,
    SessionNotFound,
)
from engine_service.core.events import Event, MessageStored, Usage
from engine_service.core.models import JSON, Interrupt, RunRecord, RunStatus, Session
from engine_service.core.store import Checkpoint, Lease, Opening, RunBegun, SignalKind
from engine_service.stores.encoding import (
    decode_interrupts,
    encode_interrupts,
    message_from_dict,
    run_taken,
    runs_filter,
    session_filter,
)
from engine_service.stores.encoding import dumps as _dumps
from engine_service.stores.encoding import encode_messages as _encode_messages
from engine_service.stores.encoding import event_rows as _event_rows
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres_calls import Statement, data_error, storage_error
from engine_service.stores.postgres_connections import IDLE_IN_TRANSACTION, WRITER_NAME, Conn
from engine_service.stores.postgres_deliveries import PostgresDeliveries
from engine_service.stores.postgres_dsn import CHANNEL, channel_for, check_dsn
from engine_service.stores.postgres_events import PostgresEvents
from engine_service.stores.postgres_messages import PostgresMessages
from engine_service.stores.postgres_replicas import PostgresReplicas
from engine_service.stores.postgres_rows import (
    RUN_COLUMNS,
    SESSION_COLUMNS,
    run_from,
    session_from,
    sql_limit,
)
from engine_service.stores.postgres_schema import SCHEMA_VERSION, migrate
from engine_service.stores.postgres_signals import decode_signal, encode_signal

__all__ = [
    "OPENING_BYTES",
    "WRITER_NAME",
    "CHANNEL",
    "IDLE_IN_TRANSACTION",
    "channel_for",
    "SCHEMA_VERSION",
    "PostgresSessionStore",
    "decode_signal",
    "encode_signal",
    "check_dsn",
    "migrate",
    "data_error",
    "storage_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# -- the store ------------------------------------------------------------------------


_FINISH_RUN = """
WITH s AS (
    SELECT id, last_seq FROM sessions WHERE id = %(session)s FOR UPDATE
), r AS (
    SELECT status FROM runs WHERE session_id = %(session)s AND id = %(run)s FOR UPDATE
), ok AS (
    SELECT s.id, r.status = 'running' AS running,
        coalesce(%(last)s::bigint, s.last_seq) AS last
    FROM s, r WHERE %(first)s::bigint IS NULL OR s.last_seq < %(first)s::bigint
), inserted AS (
    INSERT INTO events (session_id, seq, time, run_id, body)
    SELECT ok.id, u.seq, u.time, u.run_id, u.body FROM ok,
        unnest(%(seqs)s::bigint[], %(times)s::float8[], %(runs)s::text[], %(bodies)s::text[])
        AS u (seq, time, run_id, body)
), finished AS (
    UPDATE runs SET status = %(status)s, finished_at = %(stamp)s, error_code = %(code)s,
        error_message = %(message)s, pending = %(pending)s, interrupts = %(asked)s,
        input_tokens = CASE WHEN %(usage)s THEN %(input)s ELSE input_tokens END,
        output_tokens = CASE WHEN %(usage)s THEN %(output)s ELSE output_tokens END,
        cached_tokens = CASE WHEN %(usage)s THEN %(cached)s ELSE cached_tokens END
    FROM ok WHERE ok.running AND runs.session_id = %(session)s AND runs.id = %(run)s
), ended AS (
    UPDATE sessions SET last_seq = ok.last,
        active_run_id = CASE WHEN active_run_id = %(run)s THEN NULL ELSE active_run_id END,
        updated_at = CASE WHEN ok.running THEN %(stamp)s ELSE updated_at END,
        interrupts = CASE WHEN ok.running THEN coalesce(%(asked)s, interrupts)
            ELSE interrupts END,
        input_tokens = input_tokens + CASE WHEN ok.running THEN %(input)s ELSE 0 END,
        output_tokens = output_tokens + CASE WHEN ok.running THEN %(output)s ELSE 0 END,
        cached_tokens = cached_tokens + CASE WHEN ok.running THEN %(cached)s ELSE 0 END
    FROM ok WHERE sessions.id = ok.id
    RETURNING ok.last
)
SELECT (SELECT last_seq FROM s), EXISTS (SELECT 1 FROM r),
    (SELECT count(pg_notify(%(channel)s,
        json_build_array(%(kind)s::text, %(session)s::text, %(run)s::text, ended.last)::text))
     FROM ended)
"""
"""A run's end in one statement: its last events stored after the session's last seq, the
run closed (when it still runs: with its status, error, usage and interrupts, added to the
session's), the session let go and the other replicas told (``ENDED``). Nothing is written
when the session or the run is gone or the first seq does not follow the last stored one;
the first two columns tell which."""

_BEGIN_COLUMNS = """
    {s}id, {s}title, {s}created_at, {s}updated_at, {s}state, {s}last_seq, {s}active_run_id,
    {count}, {s}reserved_seq, {s}owner, {s}interrupts, {s}input_tokens, {s}output_tokens,
    {s}cached_tokens, {s}webhook_url, {s}agent
"""
_MADE_COLUMNS = _BEGIN_COLUMNS.format(s="", count="0")
_TAKEN_COLUMNS = _BEGIN_COLUMNS.format(
    s="s.",
    count="(SELECT coalesce(max(m.position) + 1, 0) FROM messages m WHERE m.session_id = s.id)",
)

_BEGIN_RUN = f"""
WITH cur AS (
    SELECT id FROM sessions WHERE id = %(session)s AND active_run_id IS NULL
        AND (NOT %(gate)s OR interrupts IS NULL)
        AND (NOT %(require_owner)s OR owner = %(owner)s)
), fresh AS (
    SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM runs WHERE id = %(run)s)
        AND NOT EXISTS (SELECT 1 FROM runs WHERE session_id = %(session)s AND status = 'running')
), made AS (
    INSERT INTO sessions (id, title, created_at, updated_at, owner, agent, active_run_id,
        reserved_seq)
    SELECT %(session)s, '', %(stamp)s, %(stamp)s, %(owner)s, %(agent)s, %(run)s, %(reserve)s
    FROM fresh WHERE %(create)s AND NOT EXISTS (SELECT 1 FROM sessions WHERE id = %(session)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING {_MADE_COLUMNS}, true
), taken AS (
    UPDATE sessions s SET active_run_id = %(run)s, updated_at = %(stamp)s,
        reserved_seq = s.last_seq + %(reserve)s
    FROM cur, fresh WHERE s.id = cur.id AND s.active_run_id IS NULL
        AND (NOT %(gate)s OR s.interrupts IS NULL)
    RETURNING {_TAKEN_COLUMNS}, false
), began AS (
    SELECT * FROM made UNION ALL SELECT * FROM taken
), inserted AS (
    INSERT INTO runs (session_id, id, status, started_at, start_seq, replica, lease_until,
        parent_run_id, kept)
    SELECT began.id, %(run)s, 'running', %(stamp)s, began.last_seq + 1, %(replica)s,
        %(lease)s, %(parent)s, %(kept)s
    FROM began
)
SELECT began.*, pg_notify(%(channel)s, json_build_array(%(kind)s::text, %(session)s::text,
    %(run)s::text, began.last_seq)::text)
FROM began WHERE set_config('agentik.begun', %(run)s, true) IS NOT NULL
"""
"""A run begun in one statement, when nothing stands in its way: the session made (with
``create``, when there is none) or taken (when no run is active, it waits for no person
with ``gate``, and it is the caller's with ``require_owner``), the run inserted and the
other replicas told (``BEGUN``). It follows ``SELECT ... FOR UPDATE`` of the session and
the lock of the run id in the same transaction, so what it reads is current. It writes
nothing and returns no row when something stands in the way (a run active, the id taken,
the session missing or someone else's, a session being made by another call at the same
moment): ``begin_run`` then finds out which, and raises, the long way. The row: the
session's columns (``SESSION_COLUMNS``) as the run left it, and whether it was made. A
run it began is named in the transaction's ``agentik.begun`` setting (``_OPEN_RUN``)."""

_NAME_BEGUN = "SELECT set_config('agentik.begun', %s, true)"
"""Names the run the transaction began for ``_OPEN_RUN`` ("": none yet)."""

_OPEN_RUN = """
WITH ok AS (
    SELECT s.id, s.last_seq, (SELECT coalesce(max(m.position), -1) FROM messages m
        WHERE m.session_id = s.id) AS last_position
    FROM sessions s
    WHERE s.id = %(session)s AND s.active_run_id = %(run)s AND s.state = 'null'
        AND s.interrupts IS NULL AND s.agent = %(agent)s
        AND current_setting('agentik.begun', true) = %(run)s
), known AS (
    SELECT m.id FROM ok JOIN messages m ON m.session_id = ok.id AND m.id = ANY(%(ids)s::text[])
), fresh AS (
    SELECT u.id, u.body, u.run_id, row_number() OVER (ORDER BY u.n) AS k
    FROM unnest(%(ids)s::text[], %(bodies)s::text[], %(runs)s::text[]) WITH ORDINALITY
        AS u (id, body, run_id, n)
    WHERE NOT EXISTS (SELECT 1 FROM known WHERE known.id = u.id)
), messages_in AS (
    INSERT INTO messages (session_id, position, id, body, run_id)
    SELECT ok.id, (ok.last_position + fresh.k)::integer, fresh.id, fresh.body, fresh.run_id
    FROM ok, fresh
), opened AS (
    SELECT e.body, row_number() OVER (ORDER BY e.n) AS k
    FROM unnest(%(events)s::text[], %(of)s::text[]) WITH ORDINALITY AS e (body, message_id, n)
    WHERE NOT EXISTS (SELECT 1 FROM known WHERE known.id = e.message_id)
), events_in AS (
    INSERT INTO events (session_id, seq, time, run_id, body)
    SELECT ok.id, ok.last_seq + opened.k, %(time)s::double precision, %(run)s, opened.body
    FROM ok, opened
), counted AS (
    SELECT ok.id, ok.last_seq + (SELECT count(*) FROM opened) AS last FROM ok
), moved AS (
    UPDATE sessions s SET last_seq = counted.last,
        reserved_seq = greatest(s.reserved_seq, counted.last),
        title = CASE WHEN s.title = '' AND ok.last_position < 0 THEN %(title)s ELSE s.title END
    FROM ok, counted WHERE s.id = ok.id
), cp AS (
    SELECT c.position, c.through_id, c.summary, c.tokens
    FROM ok JOIN checkpoints c ON c.session_id = ok.id
)
SELECT ok.last_seq, ok.last_position, ARRAY(SELECT id FROM known),
    (SELECT position FROM cp), (SELECT through_id FROM cp), (SELECT summary FROM cp),
    (SELECT tokens FROM cp),
    CASE WHEN ok.last_position >= 0 THEN ARRAY(SELECT m.body FROM messages m
        WHERE m.session_id = ok.id AND m.position > coalesce((SELECT position FROM cp), -1)
        ORDER BY m.position) END,
    pg_notify(%(channel)s, json_build_array(%(kind)s::text, %(session)s::text,
        %(run)s::text, counted.last)::text)
FROM ok, counted
"""
"""A run's opening (``Opening``), stored right after the run began, in its transaction:
only when the statement before began it (``agentik.begun``, which a write with an opening
clears first: never the opening of a call that found its run id active already), and the
session it took fits (``Opening.fits``: no state, no pending interrupts, the run's agent).
The messages the session does not hold yet are appended after its last, their events
(with RUN_STARTED) numbered after its last seq and the seqs moved past them, the title
given to a session with no messages and no title, and the other replicas told
(``EVENTS``). Its one row: the last seq and the last message position before them, which
of the opening's message ids the session held, and, for a session that had messages, what
the run starts from as it was before (the checkpoint's position, id, summary and tokens,
the bodies of the messages after it: one snapshot, the statement's). No row: it did not
fit, and nothing was written."""

OPENING_BYTES = 64 * 1024
"""The most an opening's messages may hold (encoded) for this store to take it. Which of
them a conversation holds already is known only inside ``_OPEN_RUN``, so every one is
sent with it, twice (as a message and in its MESSAGE_STORED): an AG-UI client sends the
whole history every run, and a long one would cost every later run its size in
parameters. Beyond this the run reads which it holds (ids only) and stores the new ones
itself, as a store that declines openings does."""


def _begun(
    session: Session,
    created: bool,
    opened: list[tuple[Any, ...] | None],
    session_id: str,
    run_id: str,
    now: datetime,
    opening: Opening | None,
) -> RunBegun:
    """``RunBegun`` from the batched begin's session row (as the begin left it) and
    ``_OPEN_RUN``'s row (none: not stored)."""
    begun = RunBegun(session, created)
    if not opened or opened[0] is None or opening is None:
        return begun
    stored = _opened(begun, opened[0], session_id, run_id, now, opening)
    last = begun.opened[-1].seq
    begun.session = replace(
        session,
        last_seq=last,
        reserved_seq=max(session.reserved_seq, last),
        message_count=session.message_count + len(stored.messages),
        title=session.title or stored.title,
    )
    return begun


def _opened(
    begun: RunBegun,
    row: tuple[Any, ...],
    session_id: str,
    run_id: str,
    now: datetime,
    opening: Opening,
) -> Opening:
    """Set ``begun``'s events and context from ``_OPEN_RUN``'s ``row``; the opening as
    stored (without the messages the session held)."""
    before, last_position, known = row[0], row[1], set(row[2])
    if last_position >= 0:  # a later run: what it starts from, read before its messages
        checkpoint = None
        if row[3] is not None:
            checkpoint = Checkpoint(row[4], row[5], row[6], covered=row[3] + 1)
        history = [message_from_dict(json.loads(body)) for body in row[7]]
        begun.context = (checkpoint, history, known)
        opening = opening.after(known)
    begun.opened = opening.numbered(session_id, run_id, before, now)
    return opening


class PostgresSessionStore(PostgresMessages, PostgresEvents, PostgresReplicas, PostgresDeliveries):
    """Sessions in PostgreSQL. A limit of zero means no limit."""

    # -- sessions -------------------------------------------------------------------

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

    async def set_state(self, session_id: str, state: JSON) -> None:
        text = _dumps(state, "state")

        (found,) = await self._batch.first(
            [("UPDATE sessions SET state = %s WHERE id = %s RETURNING 1", (text, session_id))]
        )
        if found is None:
            raise SessionNotFound(session_id)

    # -- runs -----------------------------------------------------------------------

    async def begin_run(
        self,
        session_id: str,
        run_id: str,
        now: datetime,
        *,
        create: bool,
        reserve: int = 0,
        owner: str = "",
        require_owner: bool = False,
        lease: Lease | None = None,
        parent_run_id: str = "",
        admit: Callable[[list[Interrupt]], None] | None = None,
        agent: str = "",
        kept: str = "",
        opening: Opening | None = None,
    ) -> RunBegun:
        stamp = _utc(now, "now")
        lease_until = _utc(lease.until, "lease") if lease else None
        if reserve < 0:
            raise InvalidInput("reserve must not be negative")
        if not run_id:
            raise InvalidInput("run id must not be empty")

        # The usual case, a run nothing stands in the way of, goes in the writer's next
        # batch. ``admit`` is asked first with no pending interrupt (what a session
        # waiting for nobody has), and the batched write gated on the session having none:
        # a run that brings answers to interrupts takes the long way.
        batched = True
        if admit is not None:
            try:
                admit([])
            except Exception:
                batched = False
        if batched:
            params = {
                "session": session_id,
                "run": run_id,
                "stamp": stamp,
                "reserve": reserve,
                "owner": owner,
                "require_owner": require_owner,
                "gate": admit is not None,
                "create": create and bool(session_id),
                "agent": agent,
                "replica": lease.replica if lease else "",
                "lease": lease_until,
                "parent": parent_run_id,
                "kept": kept,
                "channel": self._channel,
                "kind": SignalKind.BEGUN.value,
            }
            opens = self._opening_statements(session_id, run_id, now, agent, opening)
            with suppress(psycopg.IntegrityError):  # a race the checks missed: the long way
                rows = await self._batch.first(
                    [
                        ("SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", (session_id,)),
                        ("SELECT pg_advisory_xact_lock(hashtext(%s))", (run_id,)),
                        *([(_NAME_BEGUN, ("",))] if opens else []),
                        (_BEGIN_RUN, params),
                        *opens,
                    ]
                )
                begun, *opened = rows[3:] if opens else rows[2:]
                if begun is not None:
                    return _begun(
                        session_from(begun[:-2]),
                        bool(begun[-2]),
                        opened,
                        session_id,
                        run_id,
                        now,
                        opening,
                    )

        # The long way: two round trips before the commit (psycopg's pipeline mode): the
        # checks' reads first, then the writes with the session as it now is; what a check
        # refuses raises, and the transaction, with whatever was queued, rolls back.
        async def work(conn: Conn) -> RunBegun:
            async with conn.pipeline():
                made = None
                if create:
                    if not session_id:
                        raise InvalidInput("session id must not be empty")
                    made = await conn.execute(
                        "INSERT INTO sessions (id, title, created_at, updated_at, owner, agent)"
                        " VALUES (%s, '', %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING"
                        " RETURNING 1",
                        (session_id, stamp, stamp, owner, agent),
                    )
                held = await conn.execute(
                    "SELECT active_run_id, owner, interrupts FROM sessions WHERE id = %s"
                    " FOR UPDATE",
                    (session_id,),
                )
                # Run ids are unique in the store: two sessions starting the same id at
                # once queue on this lock, and the second finds the first's run.
                await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (run_id,))
                taken = await conn.execute("SELECT 1 FROM runs WHERE id = %s", (run_id,))
                created = made is not None and await made.fetchone() is not None
                row = await held.fetchone()
                if row is None or (require_owner and not created and row[1] != owner):
                    raise SessionNotFound(session_id)
                if row[0]:
                    raise SessionBusy(session_id, row[0])
                if await taken.fetchone() is not None:
                    raise AlreadyExists(run_taken(run_id))
                if admit is not None:
                    admit(decode_interrupts(row[2]))
                # The index is the last word: a run it refuses inserts nothing.
                inserted = await conn.execute(
                    "INSERT INTO runs (session_id, id, status, started_at, start_seq,"
                    " replica, lease_until, parent_run_id, kept)"
                    " SELECT %s, %s, 'running', %s, last_seq + 1, %s, %s, %s, %s"
                    " FROM sessions WHERE id = %s ON CONFLICT DO NOTHING RETURNING 1",
                    (
                        session_id,
                        run_id,
                        stamp,
                        lease.replica if lease else "",
                        lease_until,
                        parent_run_id,
                        kept,
                        session_id,
                    ),
                )
                await conn.execute(
                    "UPDATE sessions SET active_run_id = %s, updated_at = %s,"
                    " reserved_seq = last_seq + %s WHERE id = %s",
                    (run_id, stamp, reserve, session_id),
                )
                signal = await conn.execute(
                    "SELECT pg_notify(%s, json_build_array(%s::text, %s::text, %s::text,"
                    " last_seq)::text) FROM sessions WHERE id = %s",
                    (self._channel, SignalKind.BEGUN.value, session_id, run_id, session_id),
                )
                # A run this transaction inserted (if not, it raises below and rolls back).
                opening_statements = self._opening_statements(
                    session_id, run_id, now, agent, opening
                )
                if opening_statements:
                    await conn.execute(_NAME_BEGUN, (run_id,))
                opens = [await conn.execute(sql, values) for sql, values in opening_statements]
                loaded = await conn.execute(
                    f"SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = %s", (session_id,)
                )
                if await inserted.fetchone() is None:
                    running = await self._one(
                        conn,
                        "SELECT id FROM runs WHERE session_id = %s AND status = 'running'",
                        (session_id,),
                    )
                    if running is not None:
                        raise SessionBusy(session_id, running[0])
                    raise AlreadyExists(run_taken(run_id))
                await signal.fetchone()
                opened = [await cursor.fetchone() for cursor in opens]
                session = await loaded.fetchone()
            assert session is not None
            begun = RunBegun(session_from(session), created)  # read after the opening
            if opened and opened[0] is not None and opening is not None:
                _opened(begun, opened[0], session_id, run_id, now, opening)
            return begun

        try:
            return await self._write(work)
        except psycopg.errors.UniqueViolation as exc:  # the opening's messages
            raise AlreadyExists("a message id already exists in the session") from exc

    def _opening_statements(
        self,
        session_id: str,
        run_id: str,
        now: datetime,
        agent: str,
        opening: Opening | None,
    ) -> list[Statement]:
        """``_OPEN_RUN`` with ``opening``'s values (none without one, or for one whose
        messages are more than ``OPENING_BYTES``: the store declines it)."""
        if opening is None:
            return []
        encoded = _encode_messages(opening.messages)
        if sum(len(body) for _, body in encoded) > OPENING_BYTES:
            return []
        bodies = [
            row[4] for row in _event_rows(session_id, opening.numbered(session_id, run_id, 0, now))
        ]
        values = {
            "session": session_id,
            "run": run_id,
            "agent": agent,
            "ids": [mid for mid, _ in encoded],
            "bodies": [body for _, body in encoded],
            "runs": [message.run_id for message in opening.messages],
            "time": now.timestamp(),
            "events": bodies,
            "of": [
                body.message.id if isinstance(body, MessageStored) else ""
                for body in opening.events
            ],
            "title": opening.title,
            "channel": self._channel,
            "kind": SignalKind.EVENTS.value,
        }
        return [(_OPEN_RUN, values)]

    async def finish_run(
        self,
        session_id: str,
        run_id: str,
        status: RunStatus,
        now: datetime,
        error_code: str = "",
        error_message: str = "",
        pending_tool_call_ids: Sequence[str] = (),
        events: Sequence[Event] = (),
        interrupts: Sequence[Interrupt] = (),
        usage: Usage | None = None,
    ) -> None:
        stamp = _utc(now, "now")
        if status is RunStatus.RUNNING:
            raise InvalidInput("a run cannot finish with status RUNNING")
        rows = _event_rows(session_id, events)
        seqs = [row[1] for row in rows]
        for before, after in itertools.pairwise(seqs):
            if after <= before:
                raise InvalidInput(f"event seq {after} does not follow {before}")
        counts = (
            (usage.input_tokens, usage.output_tokens, usage.cached_tokens)
            if usage is not None
            else (0, 0, 0)
        )
        params = {
            "session": session_id,
            "run": run_id,
            "first": seqs[0] if seqs else None,
            "last": seqs[-1] if seqs else None,
            "seqs": seqs,
            "times": [row[2] for row in rows],
            "runs": [row[3] for row in rows],
            "bodies": [row[4] for row in rows],
            "status": status.value,
            "stamp": stamp,
            "code": error_code,
            # The one raw text the engine writes that may quote a model or a tool;
            # PostgreSQL text cannot hold NUL.
            "message": error_message.replace("\x00", "\ufffd"),
            "pending": json.dumps(list(pending_tool_call_ids)),
            "asked": encode_interrupts(interrupts),
            "usage": usage is not None,
            "input": counts[0],
            "output": counts[1],
            "cached": counts[2],
            "channel": self._channel,
            "kind": SignalKind.ENDED.value,
        }
        (row,) = await self._batch.first([(_FINISH_RUN, params)])
        stored_last, run_found = row[:2] if row is not None else (None, False)
        if stored_last is None:
            raise SessionNotFound(session_id)
        if seqs and seqs[0] <= stored_last:
            raise InvalidInput(f"event seq {seqs[0]} does not follow {stored_last}")
        if not run_found:
            raise RunNotFound(run_id)

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

    async def add_tokens(self, principal: str, day: date, tokens: int) -> int:
        if tokens < 0:
            raise InvalidInput("tokens must not be negative")

        async def work(conn: Conn) -> int:
            row = await self._one(
                conn,
                "INSERT INTO token_usage AS t (principal, day, tokens) VALUES (%s, %s, %s)"
                " ON CONFLICT (principal, day) DO UPDATE SET tokens = t.tokens + excluded.tokens"
                " RETURNING tokens, xmax = 0",
                (principal, day, tokens),
            )
            assert row is not None
            if row[1]:
                # The principal's first count of the day: drop its older days (only today's
                # and yesterday's matter), so the table holds a row or two a principal.
                await conn.execute(
                    "DELETE FROM token_usage WHERE principal = %s AND day < %s",
                    (principal, day - timedelta(days=1)),
                )
            return int(row[0])

        return await self._write(work)

    async def tokens_used(self, principal: str, day: date) -> int:
        async def work(conn: Conn) -> int:
            row = await self._one(
                conn,
                "SELECT tokens FROM token_usage WHERE principal = %s AND day = %s",
                (principal, day),
            )
            return int(row[0]) if row else 0

        return await self._read(work)

    async def resolve_interrupts(self, session_id: str, run_id: str) -> None:
        async def work(conn: Conn) -> None:
            pending = await self._one(
                conn, "SELECT interrupts FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
            )
            if pending is None:
                raise SessionNotFound(session_id)
            asked_by = sorted({i.run_id for i in decode_interrupts(pending[0])})
            if asked_by:
                await conn.execute(
                    "UPDATE runs SET resumed_by = %s WHERE session_id = %s AND id = ANY(%s)",
                    (run_id, session_id, asked_by),
                )
            await conn.execute("UPDATE sessions SET interrupts = NULL WHERE id = %s", (session_id,))

        await self._write(work)

    async def cancel_interrupts(self, session_id: str) -> list[str]:
        async def work(conn: Conn) -> list[str]:
            row = await self._one(
                conn,
                "SELECT interrupts, active_run_id FROM sessions WHERE id = %s FOR UPDATE",
                (session_id,),
            )
            if row is None:
                raise SessionNotFound(session_id)
            if row[1]:
                return []  # a run in flight: it is the one to interrupt
            asked_by = sorted({i.run_id for i in decode_interrupts(row[0])})
            if asked_by:
                await conn.execute(
                    "UPDATE runs SET status = 'interrupted' WHERE session_id = %s"
                    " AND id = ANY(%s) AND status = 'input_required'",
                    (session_id, asked_by),
                )
            await conn.execute("UPDATE sessions SET interrupts = NULL WHERE id = %s", (session_id,))
            return asked_by

        return await self._write(work)

    async def kept_input(self, session_id: str, run_id: str) -> str:
        async def work(conn: Conn) -> tuple[Any, ...] | None:
            await self._require(conn, session_id)
            query = "SELECT kept FROM runs WHERE session_id = %s AND id = %s"
            return await self._one(conn, query, (session_id, run_id))

        row = await self._snapshot(work)
        return str(row[0]) if row is not None else ""

    async def get_run(self, session_id: str, run_id: str) -> RunRecord:
        async def work(conn: Conn) -> tuple[Any, ...] | None:
            await self._require(conn, session_id)
            return await self._one(
                conn,
                f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = %s AND id = %s",
                (session_id, run_id),
            )

        row = await self._snapshot(work)
        if row is None:
            raise RunNotFound(run_id)
        return run_from(row)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        async def work(conn: Conn) -> list[RunRecord]:
            await self._require(conn, session_id)
            rows = await self._all(
                conn,
                f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = %s ORDER BY started_at, n",
                (session_id,),
            )
            return [run_from(row) for row in rows]

        return await self._snapshot(work)

    async def find_run(self, run_id: str, *, owner: str | None = None) -> RunRecord:
        mine = (
            "" if owner is None else " AND session_id IN (SELECT id FROM sessions WHERE owner = %s)"
        )
        args = (run_id,) if owner is None else (run_id, owner)

        async def work(conn: Conn) -> tuple[Any, ...] | None:
            return await self._one(
                conn,
                f"SELECT {RUN_COLUMNS} FROM runs WHERE id = %s{mine}"
                " ORDER BY started_at DESC, n DESC LIMIT 1",
                args,
            )

        row = await self._read(work)
        if row is None:
            raise RunNotFound(run_id)
        return run_from(row)

    async def page_runs(
        self,
        session_id: str,
        offset: int,
        limit: int,
        *,
        owner: str | None = None,
        agents: Sequence[str] | None = None,
    ) -> tuple[list[RunRecord], int]:
        if offset < 0 or limit < 0:
            raise InvalidInput("offset and limit must not be negative")
        where, args = runs_filter("%s", session_id, owner, agents)

        async def work(conn: Conn) -> tuple[list[RunRecord], int]:
            if session_id:
                await self._require(conn, session_id)
            total = await self._one(conn, f"SELECT count(*) FROM runs {where}", args)
            rows = await self._all(
                conn,
                f"SELECT {RUN_COLUMNS} FROM runs {where}"
                " ORDER BY started_at DESC, n DESC LIMIT %s OFFSET %s",
                (*args, sql_limit(limit), offset),
            )
            return [run_from(row) for row in rows], int(total[0]) if total else 0

        return await self._snapshot(work)

    async def running_runs(self) -> list[RunRecord]:
        async def work(conn: Conn) -> list[RunRecord]:
            rows = await self._all(
                conn,
                f"SELECT {RUN_COLUMNS} FROM runs WHERE status = 'running'"
                " ORDER BY session_id, started_at, n",
            )
            return [run_from(row) for row in rows]

        return await self._read(work)
