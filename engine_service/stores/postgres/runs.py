"""The PostgreSQL store's runs after they began: a run's end (its last events, status and
usage in one statement), the interrupts that wait for a person, what a run keeps for a
resume, the reads of runs, and the tokens each principal used per day.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from typing import Any

from engine_service.core.deliveries import Delivery
from engine_service.core.errors import InvalidInput, RunNotFound, SessionNotFound
from engine_service.core.events import Event, Usage
from engine_service.core.models import Interrupt, RunRecord, RunStatus
from engine_service.core.store import RunHold, SignalKind
from engine_service.stores.encoding import (
    decode_interrupts,
    encode_interrupts,
    run_not_held,
    runs_filter,
)
from engine_service.stores.encoding import dumps as _dumps
from engine_service.stores.encoding import event_rows as _event_rows
from engine_service.stores.encoding import utc as _utc
from engine_service.stores.postgres.connections import Conn, PostgresConnections
from engine_service.stores.postgres.events import check_held
from engine_service.stores.postgres.rows import RUN_COLUMNS, run_from, sql_limit

__all__ = ["PostgresRuns"]

_FINISH_RUN = """
WITH s AS (
    SELECT id, last_seq FROM sessions WHERE id = %(session)s FOR UPDATE
), r AS (
    SELECT status, %(replica)s::text IS NULL
        OR (status = 'running' AND replica = %(replica)s::text) AS held
    FROM runs WHERE session_id = %(session)s AND id = %(run)s FOR UPDATE
), ok AS (
    SELECT s.id, r.status = 'running' AS running,
        coalesce(%(last)s::bigint, s.last_seq) AS last
    FROM s, r WHERE (%(first)s::bigint IS NULL OR s.last_seq < %(first)s::bigint) AND r.held
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
), delivered AS (
    INSERT INTO deliveries (id, kind, url, headers, payload, created_at, attempts,
        next_attempt_at, status, last_error, session_id)
    SELECT d.*, ok.id FROM ok, unnest(%(d_id)s::text[], %(d_kind)s::text[], %(d_url)s::text[],
        %(d_headers)s::text[], %(d_payload)s::text[], %(d_created)s::timestamptz[],
        %(d_attempts)s::integer[], %(d_next)s::timestamptz[], %(d_status)s::text[],
        %(d_error)s::text[]) AS d
    WHERE ok.running
    ON CONFLICT (id) DO NOTHING
)
SELECT (SELECT last_seq FROM s), EXISTS (SELECT 1 FROM r),
    (SELECT count(pg_notify(%(channel)s,
        json_build_array(%(kind)s::text, %(session)s::text, %(run)s::text, ended.last)::text))
     FROM ended),
    (SELECT held FROM r)
"""
"""A run's end in one statement: its last events stored after the session's last seq, the
run closed (when it still runs: with its status, error, usage and interrupts, added to the
session's), the session let go and the other replicas told (``ENDED``). Nothing is written
when the session or the run is gone, the first seq does not follow the last stored one, or
(given a ``replica``: a ``RunHold``) the run is no longer RUNNING on that replica; the
first two columns and the last tell which. A run that ends here adds the outbox rows of
its end (its webhook, its A2A push updates: the ``d_`` arrays) in the same statement. The
run's row is locked (``FOR UPDATE``), so another replica's claim of the run waits for this
end, or this end for the claim."""


def _delivery_params(deliveries: Sequence[Delivery]) -> dict[str, Any]:
    """``_FINISH_RUN``'s parameters of the outbox rows it adds: one array per column."""
    return {
        "d_id": [d.id for d in deliveries],
        "d_kind": [d.kind for d in deliveries],
        "d_url": [d.url for d in deliveries],
        "d_headers": [_dumps(d.headers, "headers") for d in deliveries],
        "d_payload": [d.payload for d in deliveries],
        "d_created": [_utc(d.created_at, "created_at") for d in deliveries],
        "d_attempts": [d.attempts for d in deliveries],
        "d_next": [_utc(d.next_attempt_at, "next_attempt_at") for d in deliveries],
        "d_status": [d.status.value for d in deliveries],
        "d_error": [d.last_error for d in deliveries],
    }


class PostgresRuns(PostgresConnections):
    """The runs of ``PostgresSessionStore`` once begun (the begin: ``begin``)."""

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
        hold: RunHold | None = None,
        deliveries: Sequence[Delivery] = (),
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
            "replica": hold.replica if hold is not None else None,
            **_delivery_params(deliveries),
        }
        (row,) = await self._batch.first([(_FINISH_RUN, params)])
        stored_last, run_found, _, held = row if row is not None else (None, False, 0, None)
        if stored_last is None:
            raise SessionNotFound(session_id)
        if run_found and not held:
            raise run_not_held(run_id)
        if seqs and seqs[0] <= stored_last:
            raise InvalidInput(f"event seq {seqs[0]} does not follow {stored_last}")
        if not run_found:
            raise RunNotFound(run_id)

    async def resolve_interrupts(self, session_id: str, run_id: str, *, replica: str = "") -> None:
        async def work(conn: Conn) -> None:
            pending = await self._one(
                conn, "SELECT interrupts FROM sessions WHERE id = %s FOR UPDATE", (session_id,)
            )
            if pending is None:
                raise SessionNotFound(session_id)
            await check_held(conn, session_id, RunHold(run_id, replica))
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

    # -- tokens per principal -------------------------------------------------------

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
