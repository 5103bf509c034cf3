"""What the parts of the memory store share: the dicts that hold everything, a session's
entry found by id, and the signals to the watchers (``MemorySessionStore(shared=True)``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import date, datetime

from engine_service.core.deliveries import Delivery, PushConfig
from engine_service.core.errors import SessionNotFound
from engine_service.core.store import SessionStore, Signal
from engine_service.stores.memory.entry import SessionEntry

__all__ = ["MemoryDicts"]


class MemoryDicts(SessionStore):
    """The store's state, under every part of ``MemorySessionStore``. Each part is a
    ``SessionStore`` so that the parts call each other through ``self``
    (``append_messages_and_events`` calls ``append_messages`` and ``append_events``,
    ``finish_run`` calls ``add_delivery``): a subclass that overrides one sees every call."""

    def __init__(self, *, shared: bool = False) -> None:
        self._sessions: dict[str, SessionEntry] = {}
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

    def _entry(self, session_id: str) -> SessionEntry:
        entry = self._sessions.get(session_id)
        if entry is None:
            raise SessionNotFound(session_id)
        return entry

    async def check_writable(self) -> None:
        """Memory is always writable."""

    async def close(self) -> None:
        """Nothing to release; the data stays until the store is dropped."""
