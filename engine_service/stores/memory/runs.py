"""The memory store's runs: a run begun (one active run per session, its opening stored with
it) and finished, with its usage and the interrupts it asked; runs read, found and paged;
the tokens each principal used per day."""

from __future__ import annotations

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
from engine_service.core.store import (
    Lease,
    Opening,
    RunBegun,
    RunContext,
    RunHold,
    Signal,
    SignalKind,
)
from engine_service.stores.encoding import (
    decode_interrupts,
    encode_interrupts,
    encode_messages,
    run_taken,
    utc,
)
from engine_service.stores.memory.dicts import MemoryDicts
from engine_service.stores.memory.entry import (
    SessionEntry,
    check_held,
    copy_run,
    holding_run,
    index_runs,
)
from engine_service.stores.memory.events import event_rows, insert_events
from engine_service.stores.memory.messages import known_ids, read_context

__all__ = ["MemoryRuns"]


class MemoryRuns(MemoryDicts):
    """The runs, a part of ``MemorySessionStore``."""

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
        now = utc(now, "now")
        if reserve < 0:
            raise InvalidInput("reserve must not be negative")
        if not run_id:
            raise InvalidInput("run id must not be empty")
        created = False
        entry = self._sessions.get(session_id)
        if entry is not None and require_owner and entry.owner != owner:
            raise SessionNotFound(session_id)
        if entry is None:
            if not create:
                raise SessionNotFound(session_id)
            if not session_id:
                raise InvalidInput("session id must not be empty")
            entry = SessionEntry(session_id, "", now, now, owner=owner, agent=agent)
            created = True
        elif entry.active_run_id:
            raise SessionBusy(session_id, entry.active_run_id)
        if run_id in self._run_ids:
            raise AlreadyExists(run_taken(run_id))
        pending = decode_interrupts(entry.interrupts)
        if admit is not None:
            admit(pending)
        before = entry.last_seq
        opened: list[Event] = []
        encoded: list[tuple[str, str]] = []
        context: RunContext | None = None
        if opening is not None and Opening.fits(
            has_state=entry.state != "null",
            has_interrupts=bool(pending),
            session_agent=entry.agent,
            agent=agent,
        ):
            if entry.messages:  # a later run: what it starts from, then its new messages
                ids = [m.id for m in opening.messages]
                context = (*read_context(entry), known_ids(entry, ids))
                opening = opening.after(context[2])
            encoded = encode_messages(opening.messages)  # what it refuses writes nothing
            if len({message_id for message_id, _ in encoded}) != len(encoded):
                raise AlreadyExists("a message id already exists in the session")
            opened = opening.numbered(session_id, run_id, before, now)
        self._sessions[session_id] = entry
        entry.runs[run_id] = RunRecord(
            run_id,
            session_id,
            RunStatus.RUNNING,
            now,
            start_seq=entry.last_seq + 1,
            replica=lease.replica if lease else "",
            lease_until=utc(lease.until, "lease") if lease else None,
            parent_run_id=parent_run_id,
        )
        self._run_ids.add(run_id)
        if kept:
            entry.kept[run_id] = kept
        entry.active_run_id = run_id
        entry.updated_at = now
        if opening is not None and opened:
            first = len(entry.messages)
            index_runs(entry, opening.messages, first)
            entry.positions.update(
                (message_id, first + i) for i, (message_id, _) in enumerate(encoded)
            )
            entry.messages.extend(encoded)
            if opening.title and not entry.title:
                entry.title = opening.title
            insert_events(entry, session_id, opened, 0)
        entry.reserved_seq = max(before + reserve, entry.last_seq)
        self._send(Signal(SignalKind.BEGUN, session_id, run_id, before))
        if opened:  # as PostgreSQL's: begun, then its first events stored
            self._send(Signal(SignalKind.EVENTS, session_id, run_id, entry.last_seq))
        return RunBegun(entry.session(), created, opened, context)

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
        now = utc(now, "now")
        if status is RunStatus.RUNNING:
            raise InvalidInput("a run cannot finish with status RUNNING")
        asked = encode_interrupts(interrupts)
        entry = self._entry(session_id)
        run = entry.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        check_held(entry, hold)
        event_rows(entry, session_id, events)  # refused before anything is stored
        if run.status is RunStatus.RUNNING:
            # Added first: one that fails leaves the run as it was, its end not stored (a
            # database stores both in one transaction). Nothing below awaits.
            for delivery in deliveries:
                await self.add_delivery(replace(delivery, session_id=session_id))
        check_held(entry, hold)  # again: the adds may have let another write in
        insert_events(entry, session_id, events, 0)
        if run.status is RunStatus.RUNNING:
            run.status = status
            run.finished_at = now
            run.error_code = error_code
            run.error_message = error_message
            run.pending_tool_call_ids = list(pending_tool_call_ids)
            run.interrupts = decode_interrupts(asked)
            entry.updated_at = now
            if asked is not None:
                entry.interrupts = asked
            if usage is not None:
                run.input_tokens = usage.input_tokens
                run.output_tokens = usage.output_tokens
                run.cached_tokens = usage.cached_tokens
                entry.input_tokens += usage.input_tokens
                entry.output_tokens += usage.output_tokens
                entry.cached_tokens += usage.cached_tokens
        if entry.active_run_id == run_id:
            entry.active_run_id = ""
        self._send(Signal(SignalKind.ENDED, session_id, run_id, entry.last_seq))

    async def note_usage(
        self, session_id: str, run_id: str, usage: Usage, *, replica: str = ""
    ) -> None:
        run = holding_run(self._entry(session_id), RunHold(run_id, replica))
        run.input_tokens = usage.input_tokens
        run.output_tokens = usage.output_tokens
        run.cached_tokens = usage.cached_tokens

    async def resolve_interrupts(self, session_id: str, run_id: str, *, replica: str = "") -> None:
        entry = self._entry(session_id)
        check_held(entry, RunHold(run_id, replica))
        for interrupt in decode_interrupts(entry.interrupts):
            asker = entry.runs.get(interrupt.run_id)
            if asker is not None:
                asker.resumed_by = run_id
        entry.interrupts = None

    async def cancel_interrupts(self, session_id: str) -> list[str]:
        entry = self._entry(session_id)
        if entry.active_run_id:
            return []
        asked_by = sorted({i.run_id for i in decode_interrupts(entry.interrupts)})
        for asker in asked_by:
            run = entry.runs.get(asker)
            if run is not None and run.status is RunStatus.INPUT_REQUIRED:
                run.status = RunStatus.INTERRUPTED
        entry.interrupts = None
        return asked_by

    async def kept_input(self, session_id: str, run_id: str) -> str:
        return self._entry(session_id).kept.get(run_id, "")

    async def get_run(self, session_id: str, run_id: str) -> RunRecord:
        run = self._entry(session_id).runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return copy_run(run)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        runs = [copy_run(r) for r in self._entry(session_id).runs.values()]
        runs.sort(key=lambda r: r.started_at)
        return runs

    async def find_run(self, run_id: str, *, owner: str | None = None) -> RunRecord:
        found = [
            e.runs[run_id]
            for e in self._sessions.values()
            if run_id in e.runs and (owner is None or e.owner == owner)
        ]
        if not found:
            raise RunNotFound(run_id)
        return copy_run(max(found, key=lambda r: r.started_at))

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
        entries = [self._entry(session_id)] if session_id else list(self._sessions.values())
        if not session_id and owner is not None:
            entries = [e for e in entries if e.owner == owner]
        if agents is not None:
            entries = [e for e in entries if e.agent in agents]
        runs = [r for e in entries for r in e.runs.values()]
        runs.sort(key=lambda r: r.started_at, reverse=True)
        page = runs[offset : offset + limit] if limit else runs[offset:]
        return [copy_run(r) for r in page], len(runs)

    async def add_tokens(self, principal: str, day: date, tokens: int) -> int:
        if tokens < 0:
            raise InvalidInput("tokens must not be negative")
        days = self._tokens.setdefault(principal, {})
        if day not in days:  # only today's and yesterday's counts matter
            for old in [d for d in days if (day - d).days > 1]:
                del days[old]
        days[day] = days.get(day, 0) + tokens
        return days[day]

    async def tokens_used(self, principal: str, day: date) -> int:
        return self._tokens.get(principal, {}).get(day, 0)
