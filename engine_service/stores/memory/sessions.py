"""The memory store's sessions: made, read, listed newest first, renamed, forked at a
message, deleted with all they hold; their state and webhook."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engine_service.core.errors import AlreadyExists, InvalidInput, SessionBusy, SessionNotFound
from engine_service.core.models import JSON, Session
from engine_service.core.store import RunHold
from engine_service.stores.encoding import dumps, utc
from engine_service.stores.memory.dicts import MemoryDicts
from engine_service.stores.memory.entry import SessionEntry, check_held, page_limit

__all__ = ["MemorySessions"]


class MemorySessions(MemoryDicts):
    """The sessions, a part of ``MemorySessionStore``."""

    async def create_session(
        self, session_id: str, title: str, now: datetime, *, owner: str = "", agent: str = ""
    ) -> Session:
        now = utc(now, "now")
        if not session_id:
            raise InvalidInput("session id must not be empty")
        if session_id in self._sessions:
            raise AlreadyExists(f"session {session_id!r} already exists")
        entry = SessionEntry(session_id, title, now, now, owner=owner, agent=agent)
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
        size = page_limit(limit)
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
        now = utc(now, "now")
        entry = self._entry(session_id)
        entry.title = title
        entry.updated_at = now
        return entry.session()

    async def set_session_webhook(self, session_id: str, url: str, now: datetime) -> Session:
        now = utc(now, "now")
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
        now = utc(now, "now")
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
        entry = SessionEntry(
            new_id, title, now, now, state=source.state, owner=owner, agent=source.agent
        )
        entry.messages = source.messages[: ids.index(up_to_message_id) + 1]
        for run_id, positions in source.by_run.items():
            kept = [p for p in positions if p < len(entry.messages)]
            if kept:
                entry.by_run[run_id] = kept
        self._sessions[new_id] = entry
        return entry.session()

    async def set_state(self, session_id: str, state: JSON, *, hold: RunHold | None = None) -> None:
        entry = self._entry(session_id)
        check_held(entry, hold)
        entry.state = dumps(state, "state")
