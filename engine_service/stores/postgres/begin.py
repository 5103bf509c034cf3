"""How a run begins in the PostgreSQL store, with its opening (``Opening``: the input it
brings and the events that tell of it).

The usual case, a run nothing stands in the way of, is one statement in the writer's next
batch (``_BEGIN_RUN``, then ``_OPEN_RUN`` for its opening). When something stands in the
way (a run active, the id taken, the session missing or someone else's, interrupts the run
answers), or the batched write hits a race its checks missed, ``begin_run`` takes the long
way: a transaction of its own that finds out what, and raises. Either way the session row
is locked (``SELECT ... FOR UPDATE``) and a unique partial index allows one running run
per session, so the rule holds across replicas.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from datetime import datetime
from typing import Any

import psycopg
import psycopg.errors

from engine_service.core.errors import AlreadyExists, InvalidInput, SessionBusy, SessionNotFound
from engine_service.core.events import MessageStored
from engine_service.core.models import Interrupt, Session
from engine_service.core.store import Checkpoint, Lease, Opening, RunBegun, SignalKind
from engine_service.stores.encoding import decode_interrupts, message_from_dict, run_taken
from engine_service.stores.encoding import encode_messages as _encode_messages
from engine_service.stores.encoding import event_rows as _event_rows
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.calls import Statement
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.rows import SESSION_COLUMNS, session_from

__all__ = ["OPENING_BYTES", "PostgresBeginRun"]

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


class PostgresBeginRun(PostgresConnections):
    """``begin_run`` of ``PostgresSessionStore``."""

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
