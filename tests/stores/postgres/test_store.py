"""The PostgreSQL store as a whole: ``open_store`` makes it for both URL schemes, ``agentik
migrate`` applies the SQLite schema as it does PostgreSQL's, and failures are named in plain
words, never with the URL. What each part of the store does is tested beside it
(``test_begin.py``, ``test_signals.py``, …)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import psycopg.errors
import pytest

from engine_service.core.errors import InvalidInput
from engine_service.core.models import RunStatus
from engine_service.stores import open_store
from engine_service.stores.postgres import PostgresSessionStore, storage_error
from engine_service.stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA_VERSION
from tests.stores.migrate_cli import migrate_cli

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# Opening and migrating


async def test_open_store_makes_a_postgres_store_for_both_schemes(pg_url: str) -> None:
    for url in (pg_url, "postgres" + pg_url.removeprefix("postgresql")):
        store = open_store(url)
        try:
            assert isinstance(store, PostgresSessionStore)
            assert store.shared
            await store.create_session("s1", "", at(0))
            assert (await store.get_session("s1")).id == "s1"
            await store.delete_session("s1")
        finally:
            await store.close()


def test_migrate_applies_the_sqlite_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'agentik.db'}"
    first = migrate_cli(url)
    out, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert out.endswith(f"schema version 0 -> {SQLITE_SCHEMA_VERSION}\n")
    second = migrate_cli(url)
    out, _ = second.communicate(timeout=30)
    assert out.endswith(f"schema version {SQLITE_SCHEMA_VERSION}, up to date\n")


# Failures


async def test_a_value_the_database_refuses_is_invalid_input_and_the_store_goes_on(
    pg_url: str,
) -> None:
    store = PostgresSessionStore(pg_url)
    try:
        with pytest.raises(InvalidInput, match="NUL"):
            await store.create_session("s1", "a\x00b", at(0))
        await store.create_session("s1", "ok", at(0))
        with pytest.raises(InvalidInput, match="NUL"):
            await store.rename_session("s1", "\x00", at(1))
        assert (await store.get_session("s1")).title == "ok"
        await store.begin_run("s1", "r1", at(2), create=False)
        await store.finish_run("s1", "r1", RunStatus.FAILED, at(3), "llm_error", "said \x00")
        assert (await store.get_run("s1", "r1")).error_message == "said \ufffd"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (psycopg.errors.DiskFull("could not extend file"), "the disk is full"),
        (
            psycopg.errors.AdminShutdown("terminating"),
            "the database server ended the connection (an administrator, or a shutdown)",
        ),
        (psycopg.errors.TooManyConnections("sorry"), "the database server has too many"),
        (psycopg.errors.ReadOnlySqlTransaction("no"), "the database is read-only"),
        (psycopg.errors.InvalidPassword("for user x"), "the database refused the login"),
        (
            psycopg.errors.DeadlockDetected("deadlock detected"),
            "the database found two writes waiting for each other (a deadlock)",
        ),
        (
            psycopg.errors.SerializationFailure("could not serialize"),
            "the database undid a write that conflicted",
        ),
        (
            psycopg.OperationalError('connection to server at "db.internal" failed'),
            "the database is unreachable",
        ),
    ],
)
def test_server_failures_are_named_in_plain_words(error: psycopg.Error, cause: str) -> None:
    message = storage_error(error).message
    assert message.startswith(f"storage unavailable: {cause}")
    assert "db.internal" not in message


def test_a_connection_dropped_mid_call_is_named_lost_and_one_never_made_unreachable() -> None:
    dropped = psycopg.OperationalError("consuming input failed: server closed the connection")
    assert storage_error(dropped, connected=True).message == (
        "storage unavailable: the connection to the database was lost"
    )
    assert storage_error(dropped).message == "storage unavailable: the database is unreachable"
