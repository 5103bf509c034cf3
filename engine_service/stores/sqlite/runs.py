"""The SQLite store's runs: a run begun (one active run per session, its opening stored with
it) and finished, with its usage and the interrupts it asked; runs read, found and paged;
the tokens each principal used per day."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import date, datetime

from engine_service.core.deliveries import Delivery
from engine_service.core.errors import (
    AlreadyExists,
    InvalidInput,
    RunNotFound,
    SessionBusy,
    SessionNotFound,
)
from engine_service.core.events import Event, Usage
from engine_service.core.models import Interrupt, RunRecord, RunStatus
from engine_service.core.store import Lease, Opening, RunBegun, RunContext, RunHold
from engine_service.stores.encoding import (
    decode_interrupts,
    encode_interrupts,
    encode_messages,
    event_rows,
    run_not_held,
    run_taken,
    runs_filter,
)
from engine_service.stores.sqlite.deliveries import insert_delivery
from engine_service.stores.sqlite.errors import mapped_errors
from engine_service.stores.sqlite.events import check_held, insert_events
from engine_service.stores.sqlite.file import SqliteFile, goes_first, off_loop
from engine_service.stores.sqlite.messages import known_ids, read_context
from engine_service.stores.sqlite.rows import RUN_COLUMNS, iso, sql_limit, to_run

__all__ = ["SqliteRuns"]


class SqliteRuns(SqliteFile):
    """The runs, a part of ``SqliteSessionStore``."""

    @off_loop
    @goes_first
    def begin_run(
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
        stamp = iso(now, "now")
        lease_until = iso(lease.until, "lease") if lease else None
        if reserve < 0:
            raise InvalidInput("reserve must not be negative")
        if not run_id:
            raise InvalidInput("run id must not be empty")
        with self._tx() as conn:
            created = False
            # The session, its pending interrupts and whether the run id is taken in one
            # statement (under load each statement waits for the GIL again: Writer).
            found = conn.execute(
                "SELECT active_run_id, owner, interrupts,"
                " EXISTS (SELECT 1 FROM runs WHERE id = ?), last_seq, state = 'null' AND agent = ?,"
                " (SELECT coalesce(max(position), -1) FROM messages m"
                " WHERE m.session_id = sessions.id)"
                " FROM sessions WHERE id = ?",
                (run_id, agent, session_id),
            ).fetchone()
            if found is None:
                if not create:
                    raise SessionNotFound(session_id)
                if not session_id:
                    raise InvalidInput("session id must not be empty")
                conn.execute(
                    "INSERT INTO sessions (id, title, created_at, updated_at, owner, agent)"
                    " VALUES (?, '', ?, ?, ?, ?)",
                    (session_id, stamp, stamp, owner, agent),
                )
                taken = conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone()
                created, active, pending, before, fits, last_position = True, None, None, 0, 1, -1
            else:
                active, session_owner, pending, taken, before, fits, last_position = found
                if require_owner and session_owner != owner:
                    raise SessionNotFound(session_id)
            if active:
                raise SessionBusy(session_id, active)
            if taken:
                raise AlreadyExists(run_taken(run_id))
            interrupts = decode_interrupts(pending)
            if admit is not None:
                admit(interrupts)
            try:
                conn.execute(
                    "INSERT INTO runs (session_id, id, status, started_at, start_seq, replica,"
                    " lease_until, parent_run_id, kept)"
                    " SELECT ?, ?, ?, ?, last_seq + 1, ?, ?, ?, ? FROM sessions WHERE id = ?",
                    (
                        session_id,
                        run_id,
                        RunStatus.RUNNING.value,
                        stamp,
                        lease.replica if lease else "",
                        lease_until,
                        parent_run_id,
                        kept,
                        session_id,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                running = conn.execute(
                    "SELECT id FROM runs WHERE session_id = ? AND status = 'running'",
                    (session_id,),
                ).fetchone()
                if running is not None:
                    raise SessionBusy(session_id, running[0]) from exc
                raise AlreadyExists(
                    f"run {run_id!r} already exists in session {session_id!r}"
                ) from exc
            opened: list[Event] = []
            context: RunContext | None = None
            # ``Opening.fits``: the state and the agent asked in the first SELECT.
            if opening is not None and fits and not interrupts:
                if last_position >= 0:  # a later run: what it starts from, its new messages
                    ids = [m.id for m in opening.messages]
                    context = (*read_context(conn, session_id), known_ids(conn, session_id, ids))
                    opening = opening.after(context[2])
                opened = opening.numbered(session_id, run_id, before, now)
                try:
                    conn.executemany(
                        "INSERT INTO messages (session_id, position, id, body) VALUES (?, ?, ?, ?)",
                        [
                            (session_id, last_position + 1 + i, mid, body)
                            for i, (mid, body) in enumerate(encode_messages(opening.messages))
                        ],
                    )
                except sqlite3.IntegrityError as exc:
                    raise AlreadyExists("a message id already exists in the session") from exc
                conn.executemany(
                    "INSERT INTO events (session_id, seq, time, run_id, body)"
                    " VALUES (?, ?, ?, ?, ?)",
                    event_rows(session_id, opened),
                )
            last = before + len(opened)
            conn.execute(
                "UPDATE sessions SET active_run_id = ?, updated_at = ?, last_seq = ?,"
                " reserved_seq = ?, title = CASE WHEN title = '' THEN ? ELSE title END"
                " WHERE id = ?",
                (
                    run_id,
                    stamp,
                    last,
                    max(before + reserve, last),
                    opening.title if opened and opening is not None else "",
                    session_id,
                ),
            )
            return RunBegun(self._load(conn, session_id), created, opened, context)

    @off_loop
    def finish_run(
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
        stamp = iso(now, "now")
        if status is RunStatus.RUNNING:
            raise InvalidInput("a run cannot finish with status RUNNING")
        rows = event_rows(session_id, events)
        asked = encode_interrupts(interrupts)
        with self._tx() as conn:
            insert_events(conn, session_id, rows, hold=hold)
            row = conn.execute(
                "SELECT status FROM runs WHERE session_id = ? AND id = ?", (session_id, run_id)
            ).fetchone()
            if row is None:
                raise RunNotFound(run_id)
            if row[0] != RunStatus.RUNNING.value:
                conn.execute(
                    "UPDATE sessions SET active_run_id = NULL WHERE id = ? AND active_run_id = ?",
                    (session_id, run_id),
                )
                return
            # One statement per table (each statement waits for the GIL again under load):
            # no usage keeps the run's noted tokens and adds none to the session's.
            counts = (
                (usage.input_tokens, usage.output_tokens, usage.cached_tokens)
                if usage is not None
                else (None, None, None)
            )
            conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, error_code = ?,"
                " error_message = ?, pending = ?, interrupts = ?,"
                " input_tokens = coalesce(?, input_tokens),"
                " output_tokens = coalesce(?, output_tokens),"
                " cached_tokens = coalesce(?, cached_tokens)"
                " WHERE session_id = ? AND id = ?",
                (
                    status.value,
                    stamp,
                    error_code,
                    error_message,
                    json.dumps(list(pending_tool_call_ids)),
                    asked,
                    *counts,
                    session_id,
                    run_id,
                ),
            )
            conn.execute(
                "UPDATE sessions SET updated_at = ?,"
                " input_tokens = input_tokens + coalesce(?, 0),"
                " output_tokens = output_tokens + coalesce(?, 0),"
                " cached_tokens = cached_tokens + coalesce(?, 0),"
                " interrupts = coalesce(?, interrupts),"
                " active_run_id = CASE WHEN active_run_id = ? THEN NULL ELSE active_run_id END"
                " WHERE id = ?",
                (stamp, *counts, asked, run_id, session_id),
            )
            for delivery in deliveries:
                insert_delivery(conn, replace(delivery, session_id=session_id))

    @off_loop
    def note_usage(self, session_id: str, run_id: str, usage: Usage, *, replica: str = "") -> None:
        counts = (usage.input_tokens, usage.output_tokens, usage.cached_tokens)
        with self._tx() as conn:
            noted = conn.execute(
                "UPDATE runs SET input_tokens = ?, output_tokens = ?, cached_tokens = ?"
                " WHERE session_id = ? AND id = ? AND status = 'running' AND replica = ?"
                " RETURNING 1",
                (*counts, session_id, run_id, replica),
            ).fetchall()
        if not noted:
            raise run_not_held(run_id)

    @off_loop
    def resolve_interrupts(self, session_id: str, run_id: str, *, replica: str = "") -> None:
        with self._tx() as conn:
            self._require(conn, session_id)
            check_held(conn, session_id, RunHold(run_id, replica))
            (pending,) = conn.execute(
                "SELECT interrupts FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            asked_by = sorted({i.run_id for i in decode_interrupts(pending)})
            conn.executemany(
                "UPDATE runs SET resumed_by = ? WHERE session_id = ? AND id = ?",
                [(run_id, session_id, asker) for asker in asked_by],
            )
            conn.execute("UPDATE sessions SET interrupts = NULL WHERE id = ?", (session_id,))

    @off_loop
    def cancel_interrupts(self, session_id: str) -> list[str]:
        with self._tx() as conn:
            if self._require(conn, session_id):
                return []  # a run in flight: it is the one to interrupt
            (pending,) = conn.execute(
                "SELECT interrupts FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            asked_by = sorted({i.run_id for i in decode_interrupts(pending)})
            conn.executemany(
                "UPDATE runs SET status = 'interrupted'"
                " WHERE session_id = ? AND id = ? AND status = 'input_required'",
                [(session_id, asker) for asker in asked_by],
            )
            conn.execute("UPDATE sessions SET interrupts = NULL WHERE id = ?", (session_id,))
            return asked_by

    @off_loop
    def kept_input(self, session_id: str, run_id: str) -> str:
        with self._read() as conn:
            self._require(conn, session_id)
            row = conn.execute(
                "SELECT kept FROM runs WHERE session_id = ? AND id = ?", (session_id, run_id)
            ).fetchone()
        return str(row[0]) if row is not None else ""

    @off_loop
    def get_run(self, session_id: str, run_id: str) -> RunRecord:
        with self._read() as conn:
            self._require(conn, session_id)
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? AND id = ?",
                (session_id, run_id),
            ).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return to_run(row)

    @off_loop
    def list_runs(self, session_id: str) -> list[RunRecord]:
        with self._read() as conn:
            self._require(conn, session_id)
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ? ORDER BY started_at, rowid",
                (session_id,),
            ).fetchall()
        return [to_run(row) for row in rows]

    @off_loop
    def find_run(self, run_id: str, *, owner: str | None = None) -> RunRecord:
        mine = (
            "" if owner is None else " AND session_id IN (SELECT id FROM sessions WHERE owner = ?)"
        )
        args = (run_id,) if owner is None else (run_id, owner)
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE id = ?{mine}"
                " ORDER BY started_at DESC LIMIT 1",
                args,
            ).fetchone()
        if row is None:
            raise RunNotFound(run_id)
        return to_run(row)

    @off_loop
    def page_runs(
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
        where, args = runs_filter("?", session_id, owner, agents)
        with self._read() as conn:
            if session_id:
                self._require(conn, session_id)
            total = conn.execute(f"SELECT count(*) FROM runs {where}", args).fetchone()[0]
            rows = conn.execute(
                f"SELECT {RUN_COLUMNS} FROM runs {where}"
                " ORDER BY started_at DESC, rowid DESC LIMIT ? OFFSET ?",
                (*args, sql_limit(limit), offset),
            ).fetchall()
        return [to_run(row) for row in rows], int(total)

    @off_loop
    def add_tokens(self, principal: str, day: date, tokens: int) -> int:
        if tokens < 0:
            raise InvalidInput("tokens must not be negative")
        with self._tx() as conn:
            # Only today's and yesterday's counts matter: the table stays one row or two a
            # principal.
            yesterday = date.fromordinal(day.toordinal() - 1).isoformat()
            conn.execute(
                "DELETE FROM token_usage WHERE principal = ? AND day < ?", (principal, yesterday)
            )
            (total,) = conn.execute(
                "INSERT INTO token_usage (principal, day, tokens) VALUES (?, ?, ?)"
                " ON CONFLICT (principal, day) DO UPDATE SET tokens = tokens + excluded.tokens"
                " RETURNING tokens",
                (principal, day.isoformat(), tokens),
            ).fetchone()
        return int(total)

    @off_loop
    def tokens_used(self, principal: str, day: date) -> int:
        with mapped_errors():
            row = self._conn.execute(
                "SELECT tokens FROM token_usage WHERE principal = ? AND day = ?",
                (principal, day.isoformat()),
            ).fetchone()
        return int(row[0]) if row else 0
