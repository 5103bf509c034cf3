"""The SQLite store's schema (``engine_service.stores.sqlite.schema``): a file of an older
version is migrated and keeps what it holds; one of a newer version is refused."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine_service.stores.sqlite import SCHEMA_VERSION, SqliteSessionStore
from engine_service.stores.sqlite.schema import _MIGRATIONS, _SCHEMA_V1

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


async def test_a_version_11_outbox_learns_which_conversation_each_run_webhook_belongs_to(
    tmp_path: Path,
) -> None:
    """Version 12 ties each delivery to its conversation, so deleting the conversation
    deletes them: a run's webhook finds it by the run id in its delivery id; an A2A push
    (a hashed id) and a webhook whose run is gone stay without one."""
    path = tmp_path / "v11.db"
    stamp = T0.isoformat()
    with sqlite3.connect(path) as conn:
        for script in _MIGRATIONS[:11]:
            conn.executescript(script)
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES ('s1', '', ?, ?)",
            (stamp, stamp),
        )
        conn.execute(
            "INSERT INTO runs (session_id, id, status, started_at)"
            " VALUES ('s1', 'r.1', 'succeeded', ?)",
            (stamp,),
        )
        for delivery_id, kind in (
            ("run_r.1.0123456789abcdef", "run"),
            ("run_gone.0123456789abcdef", "run"),
            ("push_0123456789abcdef0123456789abcdef", "a2a"),
        ):
            conn.execute(
                "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
                " next_attempt_at, status) VALUES (?, ?, 'https://h.example.com/', '{}', '{}',"
                " ?, ?, 'pending')",
                (delivery_id, kind, stamp, stamp),
            )
        conn.execute("PRAGMA user_version = 11")
    conn.close()

    store = SqliteSessionStore(path)
    try:
        webhook = await store.get_delivery("run_r.1.0123456789abcdef")
        assert webhook is not None and webhook.session_id == "s1"
        await store.delete_session("s1")
        assert await store.get_delivery("run_r.1.0123456789abcdef") is None
        for kept in ("run_gone.0123456789abcdef", "push_0123456789abcdef0123456789abcdef"):
            found = await store.get_delivery(kept)
            assert found is not None and found.session_id == ""
    finally:
        await store.close()
