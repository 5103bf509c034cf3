"""The SQLite store's schema (``engine_service.stores.sqlite.schema``): a file of an older
version is migrated and keeps what it holds; one of a newer version is refused."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine_service.core.errors import StorageUnavailable
from engine_service.stores.sqlite import SCHEMA_VERSION, SqliteSessionStore, schema
from engine_service.stores.sqlite.schema import _SCHEMA_V1
from tests.stores.old_outbox import ROWS, assert_migrated, write_sqlite_v11

T0 = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


def at(seconds: int) -> datetime:
    """A time ``seconds`` after T0 (keeping T0's microseconds)."""
    return T0 + timedelta(seconds=seconds)


async def test_a_version_1_database_is_migrated_and_keeps_its_numbering(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(_SCHEMA_V1)
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at, last_seq)"
            " VALUES ('s1', 'old', ?, ?, 7)",
            (T0.isoformat(), T0.isoformat()),
        )
        conn.execute("PRAGMA user_version = 1")
    conn.close()

    store = SqliteSessionStore(path)
    session = await store.get_session("s1")
    await store.check_writable()
    begun = await store.begin_run("s1", "r1", at(1), create=False, reserve=5)
    await store.close()

    assert (session.title, session.last_seq, session.reserved_seq) == ("old", 7, 7)
    assert (begun.session.reserved_seq, (await _start_seq(path))) == (12, 8)


async def _start_seq(path: Path) -> int:
    store = SqliteSessionStore(path)
    try:
        return (await store.get_run("s1", "r1")).start_seq
    finally:
        await store.close()


async def test_a_database_from_a_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(RuntimeError, match="newer"):
        SqliteSessionStore(path)


async def test_a_version_11_outbox_is_tied_to_its_conversations_as_it_says_and_loses_the_gone(
    tmp_path: Path,
) -> None:
    """Version 12 ties each delivery to its conversation, by what the row carries (its
    payload's conversation, its id's incarnation), never by a run id alone; rows whose
    conversation is gone are deleted, as deleting it deletes them now."""
    path = tmp_path / "v11.db"
    write_sqlite_v11(path)
    store = SqliteSessionStore(path)
    try:
        await assert_migrated(store)
    finally:
        await store.close()


async def test_a_backfill_cut_short_leaves_the_file_at_version_11_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill is in the migration's transaction: an error after its deletes (a full
    disk, a kill) leaves every row, and the version, as they were."""
    path = tmp_path / "v11.db"
    write_sqlite_v11(path)
    backfill = schema._BACKFILLS[12]

    def cut(conn: sqlite3.Connection) -> None:
        backfill(conn)
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setitem(schema._BACKFILLS, 12, cut)
    with pytest.raises(StorageUnavailable, match="disk is full"):
        SqliteSessionStore(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (11,)
        assert conn.execute("SELECT count(*) FROM deliveries").fetchone() == (len(ROWS),)
    conn.close()
