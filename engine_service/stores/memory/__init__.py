"""An in-process ``SessionStore`` kept in dicts, for tests and throwaway engines:
:class:`MemorySessionStore`, made of parts, one module each (``store`` says which), on the
dicts of ``dicts.MemoryDicts``."""

from __future__ import annotations

from engine_service.stores.memory.store import MemorySessionStore

__all__ = ["MemorySessionStore"]
