"""The memory store's messages: a session's history in order, paged, by run, from its
compaction checkpoint on; appended, replaced, and the checkpoint saved."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from engine_service.core.errors import AlreadyExists, InvalidInput
from engine_service.core.events import Event
from engine_service.core.models import Message
from engine_service.core.store import Checkpoint, RunHold
from engine_service.stores.encoding import encode_messages, message_from_dict, utc
from engine_service.stores.memory.dicts import MemoryDicts
from engine_service.stores.memory.entry import SessionEntry, check_held, index_runs, page_limit
from engine_service.stores.memory.events import follows

__all__ = ["MemoryMessages", "known_ids", "read_context"]


def read_context(entry: SessionEntry) -> tuple[Checkpoint | None, list[Message]]:
    """The session's compaction checkpoint (None without one) and the messages after it."""
    start = entry.checkpoint.covered if entry.checkpoint else 0
    rest = entry.messages[start:]
    return entry.checkpoint, [message_from_dict(json.loads(body)) for _, body in rest]


def known_ids(entry: SessionEntry, ids: Sequence[str]) -> set[str]:
    """Which of ``ids`` are messages of the session already."""
    return {message_id for message_id in ids if message_id in entry.positions}


class MemoryMessages(MemoryDicts):
    """The messages, a part of ``MemorySessionStore``."""

    async def list_messages(
        self, session_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        entry = self._entry(session_id)
        size = page_limit(limit)
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
        check_held(entry, hold)
        position = entry.positions.get(checkpoint.through_id)
        if position is None:
            raise InvalidInput(
                f"through_id {checkpoint.through_id!r} is not a message of the session"
            )
        entry.checkpoint = replace(checkpoint, covered=position + 1)
        return entry.checkpoint

    async def context_messages(self, session_id: str) -> tuple[Checkpoint | None, list[Message]]:
        return read_context(self._entry(session_id))

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
        return known_ids(self._entry(session_id), ids)

    async def run_messages(
        self, session_id: str, run_ids: Sequence[str], last: int
    ) -> tuple[list[Message], bool]:
        entry = self._entry(session_id)
        positions = sorted(p for run_id in set(run_ids) for p in entry.by_run.get(run_id, ()))
        kept = positions[-last:] if last > 0 else []
        found = [message_from_dict(json.loads(entry.messages[p][1])) for p in kept]
        return found, len(positions) > len(kept)

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
        check_held(entry, hold)
        encoded = encode_messages(messages)
        stamp = utc(now, "now") if title and now is not None else None
        taken = entry.positions
        new: set[str] = set()
        for message_id, _ in encoded:
            if message_id in taken or message_id in new:
                raise AlreadyExists(f"message {message_id!r} already exists in the session")
            new.add(message_id)
        index_runs(entry, messages, len(entry.messages))
        for offset, (message_id, _) in enumerate(encoded):
            taken[message_id] = len(entry.messages) + offset
        entry.messages.extend(encoded)
        if title:
            entry.title = title
            entry.updated_at = stamp or entry.updated_at

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
        follows(entry, events)
        hold = None if events else hold  # the events' seqs fence them (``RunHold``)
        await self.append_messages(session_id, messages, title=title, now=now, hold=hold)
        await self.append_events(session_id, events, reserve_through=reserve_through)

    async def replace_messages(
        self, session_id: str, messages: Sequence[Message], *, hold: RunHold | None = None
    ) -> None:
        entry = self._entry(session_id)
        encoded = encode_messages(messages)
        if len({message_id for message_id, _ in encoded}) != len(encoded):
            raise InvalidInput("message ids must be unique")
        check_held(entry, hold)
        entry.messages = encoded
        entry.by_run = {}
        entry.positions = {message_id: i for i, (message_id, _) in enumerate(encoded)}
        entry.checkpoint = None
        index_runs(entry, messages, 0)
