"""An in-process ``SessionStore`` kept in dicts, for tests and throwaway engines.

Messages, events and state are held in their stored JSON form (the same text the
SQLite store writes), so this store accepts and rejects exactly what a durable one
does, and nothing a caller holds aliases what the store holds. No method awaits, so
each one is atomic with respect to the event loop.

``MemorySessionStore(shared=True)`` stands in for a database several engines share, for
tests of several engines in one process: it signals like a shared store (each watcher's
callback is called soon after the change, as a notification arrives after a commit) and
keeps run leases.

The store is made of parts, one module each, all on one :class:`~.dicts.MemoryDicts` (the
dicts, the signals): ``sessions``, ``messages``, ``runs``, ``events``, ``leases`` and
``deliveries``; ``entry`` holds one session.
"""

from __future__ import annotations

from engine_service.core.store import SessionStore
from engine_service.stores.memory.deliveries import MemoryDeliveries
from engine_service.stores.memory.events import MemoryEvents
from engine_service.stores.memory.leases import MemoryLeases
from engine_service.stores.memory.messages import MemoryMessages
from engine_service.stores.memory.runs import MemoryRuns
from engine_service.stores.memory.sessions import MemorySessions

__all__ = ["MemorySessionStore"]


class MemorySessionStore(
    MemorySessions,
    MemoryMessages,
    MemoryRuns,
    MemoryEvents,
    MemoryLeases,
    MemoryDeliveries,
    SessionStore,
):
    """Sessions in a dict; lost when the process ends. A limit of zero means no limit."""
