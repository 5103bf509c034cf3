"""Fixtures for the session store tests: every store, fresh per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine_service.stores import MemorySessionStore, SessionStore, SqliteSessionStore


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """A fresh, empty store of each kind (the SQLite file in a not-yet-existing folder)."""
    made: SessionStore
    if request.param == "memory":
        made = MemorySessionStore()
    else:
        made = SqliteSessionStore(tmp_path / "nested" / "sessions.db")
    yield made
    await made.close()
