"""An in-process ``SessionStore`` kept in dicts, for tests and throwaway engines.

Messages, events and state are held in their stored JSON form (the same text the
SQLite store writes), so this store accepts and rejects exactly what a durable one
does, and nothing a caller holds aliases what the store holds. No method awaits, so
each one is atomic with respect to the event loop.

``MemorySessionStore(shared=True)`` stands in for a database several engines share, for
tests of several engines in one process: it signals like a shared store (each watcher's
callback is called soon after the change, as a notification arrives after a commit) and
keeps run leases.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime

from engine_service.core.deliveries import Delivery, DeliveryStatus, PushConfig
from engine_service.core.errors import (
    AlreadyExists,
    InvalidInput,
    RunNotFound,
    SessionBusy,
    SessionNotFound,
)
from engine_service.core.events import Event, Usage
from engine_service.core.models import JSON, Interrupt, Message, RunRecord, RunStatus, Session
from engine_service.core.store import (
    Checkpoint,
    Lease,
    Opening,
    RunBegun,
    RunContext,
    RunHold,
    SessionStore,
    Signal,
    SignalKind,
)
from engine_service.stores.encoding import (
    decode_interrupts,
    encode_interrupts,
    event_from_dict,
    event_to_dict,
    message_from_dict,
    run_not_held,
    run_taken,
)
from engine_service.stores.encoding import dumps as _dumps
from engine_service.stores.encoding import encode_messages as _encode_messages
from engine_service.stores.encoding import utc as _utc

__all__ = ["MemorySessionStore"]


def _copy(run: RunRecord) -> RunRecord:
    return replace(
        run,
        pending_tool_call_ids=list(run.pending_tool_call_ids),
        interrupts=decode_interrupts(encode_interrupts(run.interrupts)),
    )


@dataclass(slots=True)
class _Entry:
    """One session and everything it holds."""

    id: str
    title: str
    created_at: datetime
    updated_at: datetime
    state: str = "null"
    last_seq: int = 0
    reserved_seq: int = 0
    active_run_id: str = ""
    owner: str = ""
    interrupts: str | None = None
    """The pending interrupts, encoded (``encoding.encode_interrupts``)."""
    messages: list[tuple[str, str]] = field(default_factory=list)
    """(message id, stored JSON) in history order."""
    by_run: dict[str, list[int]] = field(default_factory=dict)
    """Run id → the positions of its messages in ``messages``, ascending."""
    positions: dict[str, int] = field(default_factory=dict)
    """Message id → its position in ``messages``."""
    checkpoint: Checkpoint | None = None
    """The compaction the runs start from (``core.context``); ``covered`` is its position + 1."""
    runs: dict[str, RunRecord] = field(default_factory=dict)
    """By id, in the order they began."""
    kept: dict[str, str] = field(default_factory=dict)
    """Run id → what the run kept of its request (``begin_run``'s ``kept``); it goes with
    the session, as the SQL stores' column goes with the run's row."""
    events: list[tuple[int, float, str, str]] = field(default_factory=list)
    """(seq, time, run id, stored JSON body) ascending by seq."""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    webhook_url: str = ""
    agent: str = ""

    def session(self) -> Session:
        return Session(
            id=self.id,
            title=self.title,
            created_at=self.created_at,
            updated_at=self.updated_at,
            message_count=len(self.messages),
            state=json.loads(self.state),
            last_seq=self.last_seq,
            active_run_id=self.active_run_id,
            reserved_seq=max(self.reserved_seq, self.last_seq),
            owner=self.owner,
            interrupts=decode_interrupts(self.interrupts),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            agent=self.agent,
            cached_tokens=self.cached_tokens,
            webhook_url=self.webhook_url,
        )


def _index_runs(entry: _Entry, messages: Sequence[Message], start: int) -> None:
    """Record the positions of ``messages``, stored from ``start`` on, by their run."""
    for offset, message in enumerate(messages):
        entry.by_run.setdefault(message.run_id, []).append(start + offset)


def _held(entry: _Entry, hold: RunHold | None) -> None:
    """``InvalidInput`` when the run of ``hold`` no longer holds it (``RunHold``)."""
    if hold is not None:
        _holding(entry, hold)


def _holding(entry: _Entry, hold: RunHold) -> RunRecord:
    """The run of ``hold``, RUNNING on its replica; else ``InvalidInput``."""
    run = entry.runs.get(hold.run_id)
    if run is None or run.status is not RunStatus.RUNNING or run.replica != hold.replica:
        raise run_not_held(hold.run_id)
    return run


def _follows(entry: _Entry, events: Sequence[Event]) -> None:
    """``InvalidInput`` when ``events`` do not follow the session's last seq."""
    if events and events[0].seq <= entry.last_seq:
        raise InvalidInput(f"event seq {events[0].seq} does not follow {entry.last_seq}")


def _copy_delivery(delivery: Delivery) -> Delivery:
    return replace(delivery, headers=dict(delivery.headers))


def _page_limit(limit: int) -> int | None:
    """A page size, where zero means no limit."""
    if limit < 0:
        raise InvalidInput("limit must not be negative")
    return limit or None


class MemorySessionStore(SessionStore):
    """Sessions in a dict; lost when the process ends. A limit of zero means no limit."""

    def __init__(self, *, shared: bool = False) -> None:
        self._sessions: dict[str, _Entry] = {}
        self._run_ids: set[str] = set()
        """Every stored run's id: they are unique in the store."""
        self._shared = shared
        self._watchers: list[Callable[[Signal], None]] = []
        self._tokens: dict[str, dict[date, int]] = {}
        """Tokens counted per principal per UTC day; days before yesterday are dropped."""
        self._deliveries: dict[str, tuple[Delivery, str, datetime | None]] = {}
        """The outbox: each delivery with the replica holding it and its lease's end."""
        self._push: dict[tuple[str, str], PushConfig] = {}
        """Push configs by (task id, config id), in the order they were added."""
        self._alive: dict[str, datetime] = {}
        """Each replica and until when it is alive (``note_alive``)."""

    # -- several engines ------------------------------------------------------------

    @property
    def shared(self) -> bool:
        return self._shared

    async def watch(self, on_signal: Callable[[Signal], None]) -> None:
        self._watchers.append(on_signal)

    async def signal(self, signal: Signal) -> None:
        self._send(signal)

    def _send(self, signal: Signal) -> None:
        if not self._watchers:
            return
        loop = asyncio.get_running_loop()
        for watcher in list(self._watchers):
            loop.call_soon(watcher, signal)

    async def note_usage(
        self, session_id: str, run_id: str, usage: Usage, *, replica: str = ""
    ) -> None:
        run = _holding(self._entry(session_id), RunHold(run_id, replica))
        run.input_tokens = usage.input_tokens
        run.output_tokens = usage.output_tokens
        run.cached_tokens = usage.cached_tokens

    async def renew_leases(self, replica: str, until: datetime) -> int:
        until = _utc(until, "until")
        held = 0
        for entry in self._sessions.values():
            for run in entry.runs.values():
                if run.status is RunStatus.RUNNING and run.replica == replica:
                    run.lease_until = until
                    held += 1
        return held

    async def note_alive(self, replica: str, until: datetime) -> None:
        self._alive[replica] = _utc(until, "until")

    async def replicas_alive(self, now: datetime) -> list[str]:
        now = _utc(now, "now")
        return sorted(r for r, until in self._alive.items() if until > now)

    async def claim_expired_runs(
        self, replica: str, now: datetime, until: datetime
    ) -> list[RunRecord]:
        now, until = _utc(now, "now"), _utc(until, "until")
        claimed = []
        for entry in self._sessions.values():
            for run in entry.runs.values():
                expired = run.lease_until is None or run.lease_until < now
                if run.status is RunStatus.RUNNING and expired:
                    if run.replica != replica:  # its old replica's events are refused
                        entry.last_seq = max(entry.last_seq, entry.reserved_seq)
                    run.replica, run.lease_until = replica, until
                    claimed.append(_copy(run))
        claimed.sort(key=lambda r: (r.session_id, r.started_at))
        return claimed

    def _entry(self, session_id: str) -> _Entry:
        entry = self._sessions.get(session_id)
        if entry is None:
            raise SessionNotFound(session_id)
        return entry

    async def create_session(
        self, session_id: str, title: str, now: datetime, *, owner: str = "", agent: str = ""
    ) -> Session:
        now = _utc(now, "now")
        if not session_id:
            raise InvalidInput("session id must not be empty")
        if session_id in self._sessions:
            raise AlreadyExists(f"session {session_id!r} already exists")
        entry = _Entry(session_id, title, now, now, owner=owner, agent=agent)
        self._sessions[session_id] = entry
        return entry.session()

    async def get_session(self, session_id: str) -> Session:
        return self._entry(session_id).session()

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
        size = _page_limit(limit)
        mine = [
            e
            for e in self._sessions.values()
            if (owner is None or e.owner == owner) and (agents is None or e.agent in agents)
        ]
        ordered = sorted(mine, key=lambda e: e.id)
        ordered.sort(key=lambda e: e.updated_at, reverse=True)
        page = ordered[offset : None if size is None else offset + size]
        return [e.session() for e in page], len(ordered)

    async def rename_session(self, session_id: str, title: str, now: datetime) -> Session:
        now = _utc(now, "now")
        entry = self._entry(session_id)
        entry.title = title
        entry.updated_at = now
        return entry.session()

    async def set_session_webhook(self, session_id: str, url: str, now: datetime) -> Session:
        now = _utc(now, "now")
        entry = self._entry(session_id)
        entry.webhook_url = url
        entry.updated_at = now
        return entry.session()

    async def delete_session(self, session_id: str) -> None:
        entry = self._entry(session_id)
        if entry.active_run_id:
            raise SessionBusy(session_id, entry.active_run_id)
        del self._sessions[session_id]
        self._run_ids.difference_update(entry.runs)
        for key in [k for k, c in self._push.items() if c.session_id == session_id]:
            del self._push[key]
        gone = [d.id for d, _, _ in self._deliveries.values() if d.session_id == session_id]
        for delivery_id in gone:
            del self._deliveries[delivery_id]

    async def list_messages(
        self, session_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        entry = self._entry(session_id)
        size = _page_limit(limit)
        start = 0
        if after_id:
            if after_id not in entry.positions:
                raise InvalidInput(f"after_id {after_id!r} is not a message of the session")
            start = entry.positions[after_id] + 1
        rest = entry.messages[start:]
        page = rest if size is None else rest[:size]
        return [message_from_dict(json.loads(body)) for _, body in page], len(rest) > len(page)

    async def all_messages(self, session_id: str) -> list[Message]:
        entry = self._entry(session_id)
        return [message_from_dict(json.loads(body)) for _, body in entry.messages]

    async def save_checkpoint(
        self, session_id: str, checkpoint: Checkpoint, *, hold: RunHold | None = None
    ) -> Checkpoint:
        entry = self._entry(session_id)
        _held(entry, hold)
        position = entry.positions.get(checkpoint.through_id)
        if position is None:
            raise InvalidInput(
                f"through_id {checkpoint.through_id!r} is not a message of the session"
            )
        entry.checkpoint = replace(checkpoint, covered=position + 1)
        return entry.checkpoint

    async def context_messages(self, session_id: str) -> tuple[Checkpoint | None, list[Message]]:
        return self._context(self._entry(session_id))

    @staticmethod
    def _context(entry: _Entry) -> tuple[Checkpoint | None, list[Message]]:
        start = entry.checkpoint.covered if entry.checkpoint else 0
        rest = entry.messages[start:]
        return entry.checkpoint, [message_from_dict(json.loads(body)) for _, body in rest]

    async def list_run_messages(
        self, session_id: str, run_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        entry = self._entry(session_id)
        positions = entry.by_run.get(run_id, [])
        if after_id:
            at = entry.positions.get(after_id)
            if at is None or at not in positions:
                raise InvalidInput(f"after_message_id {after_id!r} is not a message of the run")
            positions = positions[positions.index(at) + 1 :]
        page = positions[:limit] if limit > 0 else positions
        found = [message_from_dict(json.loads(entry.messages[p][1])) for p in page]
        return found, len(positions) > len(page)

    async def recent_messages(self, session_id: str, limit: int) -> list[Message]:
        entry = self._entry(session_id)
        rest = entry.messages[-limit:] if limit > 0 else []
        return [message_from_dict(json.loads(body)) for _, body in rest]

    async def known_message_ids(self, session_id: str, ids: Sequence[str]) -> set[str]:
        return self._known(self._entry(session_id), ids)

    @staticmethod
    def _known(entry: _Entry, ids: Sequence[str]) -> set[str]:
        return {message_id for message_id in ids if message_id in entry.positions}

    async def run_messages(
        self, session_id: str, run_ids: Sequence[str], last: int
    ) -> tuple[list[Message], bool]:
        entry = self._entry(session_id)
        positions = sorted(p for run_id in set(run_ids) for p in entry.by_run.get(run_id, ()))
        kept = positions[-last:] if last > 0 else []
        found = [message_from_dict(json.loads(entry.messages[p][1])) for p in kept]
        return found, len(positions) > len(kept)

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
        now = _utc(now, "now")
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
            entry = _Entry(session_id, "", now, now, owner=owner, agent=agent)
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
                context = (*self._context(entry), self._known(entry, ids))
                opening = opening.after(context[2])
            encoded = _encode_messages(opening.messages)  # what it refuses writes nothing
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
            lease_until=_utc(lease.until, "lease") if lease else None,
            parent_run_id=parent_run_id,
        )
        self._run_ids.add(run_id)
        if kept:
            entry.kept[run_id] = kept
        entry.active_run_id = run_id
        entry.updated_at = now
        if opening is not None and opened:
            first = len(entry.messages)
            _index_runs(entry, opening.messages, first)
            entry.positions.update(
                (message_id, first + i) for i, (message_id, _) in enumerate(encoded)
            )
            entry.messages.extend(encoded)
            if opening.title and not entry.title:
                entry.title = opening.title
            self._append(entry, session_id, opened, 0)
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
        delivery: Delivery | None = None,
    ) -> None:
        now = _utc(now, "now")
        if status is RunStatus.RUNNING:
            raise InvalidInput("a run cannot finish with status RUNNING")
        asked = encode_interrupts(interrupts)
        entry = self._entry(session_id)
        run = entry.runs.get(run_id)
        if run is None:
            raise RunNotFound(run_id)
        _held(entry, hold)
        self._append(entry, session_id, events, 0)
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
            if delivery is not None:
                await self.add_delivery(replace(delivery, session_id=session_id))
        if entry.active_run_id == run_id:
            entry.active_run_id = ""
        self._send(Signal(SignalKind.ENDED, session_id, run_id, entry.last_seq))

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
        now = _utc(now, "now")
        source = self._sessions.get(source_id)
        if source is None or (source_owner is not None and source.owner != source_owner):
            raise SessionNotFound(source_id)
        ids = [message_id for message_id, _ in source.messages]
        if up_to_message_id not in ids:
            raise InvalidInput(
                f"up_to_message_id {up_to_message_id!r} is not a message of the session"
            )
        if not new_id:
            raise InvalidInput("session id must not be empty")
        if new_id in self._sessions:
            raise AlreadyExists(f"session {new_id!r} already exists")
        entry = _Entry(new_id, title, now, now, state=source.state, owner=owner, agent=source.agent)
        entry.messages = source.messages[: ids.index(up_to_message_id) + 1]
        for run_id, positions in source.by_run.items():
            kept = [p for p in positions if p < len(entry.messages)]
            if kept:
                entry.by_run[run_id] = kept
        self._sessions[new_id] = entry
        return entry.session()

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

    async def resolve_interrupts(self, session_id: str, run_id: str, *, replica: str = "") -> None:
        entry = self._entry(session_id)
        _held(entry, RunHold(run_id, replica))
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
        return _copy(run)

    async def list_runs(self, session_id: str) -> list[RunRecord]:
        runs = [_copy(r) for r in self._entry(session_id).runs.values()]
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
        return _copy(max(found, key=lambda r: r.started_at))

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
        return [_copy(r) for r in page], len(runs)

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        entry = self._entry(session_id)
        _held(entry, hold)
        encoded = _encode_messages(messages)
        stamp = _utc(now, "now") if title and now is not None else None
        taken = entry.positions
        new: set[str] = set()
        for message_id, _ in encoded:
            if message_id in taken or message_id in new:
                raise AlreadyExists(f"message {message_id!r} already exists in the session")
            new.add(message_id)
        _index_runs(entry, messages, len(entry.messages))
        for offset, (message_id, _) in enumerate(encoded):
            taken[message_id] = len(entry.messages) + offset
        entry.messages.extend(encoded)
        if title:
            entry.title = title
            entry.updated_at = stamp or entry.updated_at

    async def replace_messages(
        self, session_id: str, messages: Sequence[Message], *, hold: RunHold | None = None
    ) -> None:
        entry = self._entry(session_id)
        encoded = _encode_messages(messages)
        if len({message_id for message_id, _ in encoded}) != len(encoded):
            raise InvalidInput("message ids must be unique")
        _held(entry, hold)
        entry.messages = encoded
        entry.by_run = {}
        entry.positions = {message_id: i for i, (message_id, _) in enumerate(encoded)}
        entry.checkpoint = None
        _index_runs(entry, messages, 0)

    async def set_state(self, session_id: str, state: JSON, *, hold: RunHold | None = None) -> None:
        entry = self._entry(session_id)
        _held(entry, hold)
        entry.state = _dumps(state, "state")

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
        # What refuses the events refuses the messages: the events' check first (it
        # changes nothing when it fails), as one transaction would.
        entry = self._entry(session_id)
        _follows(entry, events)
        hold = None if events else hold  # the events' seqs fence them (``RunHold``)
        await self.append_messages(session_id, messages, title=title, now=now, hold=hold)
        await self.append_events(session_id, events, reserve_through=reserve_through)

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        entry = self._entry(session_id)
        self._append(entry, session_id, events, reserve_through)
        if events:
            self._send(Signal(SignalKind.EVENTS, session_id, events[-1].run_id, entry.last_seq))

    def _append(
        self, entry: _Entry, session_id: str, events: Sequence[Event], reserve_through: int
    ) -> None:
        rows = []
        last = entry.last_seq
        for event in events:
            if event.session_id != session_id:
                raise InvalidInput(
                    f"the event is of session {event.session_id!r}, not {session_id!r}"
                )
            if event.seq <= last:
                raise InvalidInput(f"event seq {event.seq} does not follow {last}")
            last = event.seq
            rows.append(
                (event.seq, event.time, event.run_id, _dumps(event_to_dict(event), "event"))
            )
        entry.events.extend(rows)
        entry.last_seq = last
        entry.reserved_seq = max(entry.reserved_seq, reserve_through)

    async def read_events(self, session_id: str, after_seq: int, limit: int) -> list[Event]:
        entry = self._entry(session_id)
        size = _page_limit(limit)
        out: list[Event] = []
        for seq, time, run_id, body in entry.events:
            if seq <= after_seq:
                continue
            if size is not None and len(out) >= size:
                break
            out.append(event_from_dict(seq, time, session_id, run_id, json.loads(body)))
        return out

    async def prune_events(self, before: datetime) -> int:
        cutoff = _utc(before, "before").timestamp()
        gone = 0
        for entry in self._sessions.values():
            kept = [row for row in entry.events if row[1] >= cutoff]
            gone += len(entry.events) - len(kept)
            entry.events = kept
        done = [
            key
            for key, (d, _, _) in self._deliveries.items()
            if d.status is DeliveryStatus.DELIVERED and (d.updated_at or d.created_at) < before
        ]
        for key in done:
            del self._deliveries[key]
        return gone

    async def running_runs(self) -> list[RunRecord]:
        runs = [
            _copy(run)
            for entry in sorted(self._sessions.values(), key=lambda e: e.id)
            for run in sorted(entry.runs.values(), key=lambda r: r.started_at)
            if run.status is RunStatus.RUNNING
        ]
        return runs

    # -- the delivery outbox -------------------------------------------------------

    async def add_delivery(self, delivery: Delivery) -> None:
        if delivery.session_id and delivery.session_id not in self._sessions:
            return  # its conversation is gone, and its deliveries with it
        if delivery.id not in self._deliveries:
            self._deliveries[delivery.id] = (_copy_delivery(delivery), "", None)

    async def claim_deliveries(
        self, replica: str, now: datetime, until: datetime, limit: int
    ) -> list[Delivery]:
        now, until = _utc(now, "now"), _utc(until, "until")
        due = [
            held
            for held, _, lease in self._deliveries.values()
            if held.status is DeliveryStatus.PENDING
            and held.next_attempt_at <= now
            and (lease is None or lease < now)
        ]
        due.sort(key=lambda d: (d.next_attempt_at, d.created_at, d.id))
        claimed = due[: _page_limit(limit)]
        for delivery in claimed:
            delivery.attempts += 1  # the claim counts the attempt
            self._deliveries[delivery.id] = (delivery, replica, until)
        return [_copy_delivery(delivery) for delivery in claimed]

    async def settle_delivery(self, replica: str, delivery: Delivery, now: datetime) -> bool:
        held = self._deliveries.get(delivery.id)
        if held is None or held[1] != replica:
            return False
        settled = _copy_delivery(delivery)
        settled.updated_at = _utc(now, "now")
        self._deliveries[delivery.id] = (settled, "", None)
        return True

    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        held = self._deliveries.get(delivery_id)
        return _copy_delivery(held[0]) if held else None

    async def failed_deliveries(self, offset: int, limit: int) -> tuple[list[Delivery], int]:
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        failed = [d for d, _, _ in self._deliveries.values() if d.status is DeliveryStatus.FAILED]
        failed.sort(key=lambda d: (d.updated_at or d.created_at, d.id), reverse=True)
        end = offset + limit if _page_limit(limit) else None
        return [_copy_delivery(d) for d in failed[offset:end]], len(failed)

    async def add_push_config(self, config: PushConfig, limit: int) -> PushConfig:
        self._entry(config.session_id)
        key = (config.task_id, config.id)
        if key not in self._push and len(await self.push_configs(config.task_id)) >= limit:
            raise InvalidInput(f"the task has {limit} push notification configs, the most it may")
        self._push.pop(key, None)
        self._push[key] = config
        return config

    async def push_configs(self, task_id: str) -> list[PushConfig]:
        return [c for (task, _), c in self._push.items() if task == task_id]

    async def session_push_configs(self, session_id: str) -> list[PushConfig]:
        return [c for c in self._push.values() if c.session_id == session_id]

    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        return self._push.pop((task_id, config_id), None) is not None

    async def check_writable(self) -> None:
        """Memory is always writable."""

    async def close(self) -> None:
        """Nothing to release; the data stays until the store is dropped."""
