"""Fixtures for the session store tests: every store, fresh per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine_service.stores import MemorySessionStore, SessionStore, SqliteSessionStore
from engine_service.stores.postgres import PostgresSessionStore
from tests.engine.conftest import llm
from tests.postgres_server import pg_database, pg_url

__all__ = ["llm", "pg_database", "pg_url", "store", "two"]


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """A fresh, empty store of each kind (the SQLite file in a not-yet-existing folder, the
    PostgreSQL store in a fresh schema of a database made for the test session)."""
    made: SessionStore
    if request.param == "memory":
        made = MemorySessionStore()
    elif request.param == "sqlite":
        made = SqliteSessionStore(tmp_path / "nested" / "sessions.db")
    else:
        made = PostgresSessionStore(request.getfixturevalue("pg_url"))
    yield made
    await made.close()


@pytest.fixture
async def two(pg_url: str) -> AsyncIterator[tuple[PostgresSessionStore, PostgresSessionStore]]:
    """Two stores on one schema, each with its own pool: two engines."""
    a, b = PostgresSessionStore(pg_url), PostgresSessionStore(pg_url)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()
