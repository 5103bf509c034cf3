"""The PostgreSQL store's schema: migrated once however many stores or ``agentik migrate``
processes open a fresh database at once, backfilled as each version needs, and refused
when it is newer than the code."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from engine_service.core.models import Message, Role, TextPart
from engine_service.stores.postgres import PostgresSessionStore
from engine_service.stores.postgres.schema import SCHEMA_VERSION, migrate
from tests.polling import wait_until
from tests.stack import free_port
from tests.stores.migrate_cli import migrate_cli
from tests.stores.old_outbox import BOB_B, assert_migrated, webhook_row, write_postgres_v8

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT version FROM agentik_schema_migrations ORDER BY 1").fetchall()
    return [r[0] for r in rows]


async def test_two_stores_opening_a_fresh_database_at_once_make_one_schema(pg_url: str) -> None:
    stores = [PostgresSessionStore(pg_url) for _ in range(4)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        await stores[0].create_session("s1", "", at(0))
        assert (await stores[3].get_session("s1")).id == "s1"
    finally:
        for s in stores:
            await s.close()
    assert versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


async def test_the_run_index_migration_reads_run_ids_of_messages_holding_nul(
    pg_url: str,
) -> None:
    store = PostgresSessionStore(pg_url)
    try:
        await store.create_session("s1", "", at(0))
        odd = Message(id="m1", role=Role.USER, content=[TextPart('a\x00 "run_id":"x"')])
        odd.run_id = "r1"
        plain = Message(id="m2", role=Role.USER, content=[TextPart("b")])
        await store.append_messages("s1", [odd, plain])
    finally:
        await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to schema version 2
        conn.execute("DROP TABLE checkpoints")
        conn.execute("DROP INDEX messages_by_run")
        conn.execute("ALTER TABLE messages DROP COLUMN run_id")
        conn.execute("DELETE FROM agentik_schema_migrations WHERE version >= 3")
        conn.execute("DROP TABLE token_usage")  # and what version 4 added
        conn.execute("DROP TABLE push_configs")  # and version 5 (the webhook outbox)
        conn.execute("DROP TABLE deliveries")
        conn.execute("ALTER TABLE sessions DROP COLUMN webhook_url")
        for table in ("sessions", "runs"):
            for column in ("input_tokens", "output_tokens", "cached_tokens"):
                conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute("ALTER TABLE sessions DROP COLUMN agent")  # and what version 6 added
        conn.execute("DROP TABLE replicas")  # and what version 7 added
        conn.execute("ALTER TABLE runs DROP COLUMN kept")
    again = PostgresSessionStore(pg_url)
    try:
        found, _ = await again.run_messages("s1", ["r1"], 5)
        assert [m.id for m in found] == ["m1"]
        assert [m.id for m in (await again.run_messages("s1", [""], 5))[0]] == ["m2"]
    finally:
        await again.close()
    assert versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))


def test_two_migrate_processes_on_a_fresh_database_both_succeed(pg_url: str) -> None:
    procs = [migrate_cli(pg_url) for _ in range(2)]
    outputs = [p.communicate(timeout=30) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    said = sorted(out for out, _ in outputs)
    assert said[0].endswith(f"schema version 0 -> {SCHEMA_VERSION}\n") or said[1].endswith(
        f"schema version 0 -> {SCHEMA_VERSION}\n"
    )
    assert versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))
    again = migrate_cli(pg_url)
    out, _ = again.communicate(timeout=30)
    assert (again.returncode, out.strip().endswith(f"version {SCHEMA_VERSION}, up to date")) == (
        0,
        True,
    )


def test_migrate_exits_2_on_an_unreachable_database_without_the_password() -> None:
    url = f"postgresql://agent:s3cretpw@127.0.0.1:{free_port()}/agentik"
    proc = migrate_cli(url)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "the database is unreachable" in err
    assert "s3cretpw" not in out + err


async def test_a_database_from_a_newer_schema_is_refused(pg_url: str) -> None:
    first = PostgresSessionStore(pg_url)
    await first.open()
    await first.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO agentik_schema_migrations (version) VALUES (%s)", (SCHEMA_VERSION + 1,)
        )
    later = PostgresSessionStore(pg_url)
    try:
        with pytest.raises(RuntimeError, match="newer"):
            await later.get_session("s1")
    finally:
        await later.close()
    proc = migrate_cli(pg_url)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "newer" in err


async def test_the_outbox_migration_ties_rows_to_their_conversations_as_they_say(
    pg_url: str,
) -> None:
    """Version 9 ties each delivery to its conversation, by what the row carries (its
    payload's conversation, its id's incarnation), never by a run id alone; rows whose
    conversation is gone are deleted, as deleting it deletes them now."""
    first = PostgresSessionStore(pg_url)
    await first.open()
    await first.close()
    write_postgres_v8(pg_url)
    again = PostgresSessionStore(pg_url)
    try:
        await assert_migrated(again)
    finally:
        await again.close()
    assert versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))
    assert _session_key_valid(pg_url)


def test_agentik_migrate_ties_the_outbox_rows_the_same_way(pg_url: str) -> None:
    migrate(pg_url)
    write_postgres_v8(pg_url)
    assert migrate(pg_url) == (8, SCHEMA_VERSION)
    assert _session_key_valid(pg_url)

    async def check() -> None:
        store = PostgresSessionStore(pg_url)
        try:
            await assert_migrated(store)
        finally:
            await store.close()

    asyncio.run(check())


def test_the_outbox_migration_waits_for_a_run_end_of_an_older_engine_without_deadlock(
    pg_url: str,
) -> None:
    """An engine of schema 8 is storing a run's end as the migration starts: it updated
    the conversation and adds the run's webhook next. The migration locks the
    conversations first, as that engine does, so it waits for that end, which gets
    through, and ties its row. (Taking the outbox first, then the conversations for the
    key, made a deadlock, which PostgreSQL breaks by failing one of the two.)"""
    migrate(pg_url)
    write_postgres_v8(pg_url)
    late = webhook_row(BOB_B, "r1", 22, "pending", "B", old=True)
    outcome: list[object] = []

    def migrating() -> None:
        try:
            outcome.append(migrate(pg_url))
        except Exception as exc:
            outcome.append(exc)

    with psycopg.connect(pg_url) as older:  # a transaction, as a run's end is
        older.execute("UPDATE sessions SET updated_at = now() WHERE id = 'B'")
        thread = threading.Thread(target=migrating)
        thread.start()
        _wait_blocked_by(pg_url, older.info.backend_pid)
        older.execute(
            "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
            " next_attempt_at, status) VALUES (%s, 'run', 'https://h.example.com/', '{}',"
            " %s, %s, %s, 'pending')",
            (late.id, late.payload, late.created_at, late.created_at),
        )
        older.commit()
    thread.join(30)
    assert outcome == [(8, SCHEMA_VERSION)]
    with psycopg.connect(pg_url) as conn:
        found = conn.execute("SELECT session_id FROM deliveries WHERE id = %s", (late.id,))
        assert found.fetchone() == ("B",)


def _wait_blocked_by(url: str, pid: int) -> None:
    """Until a session of the database waits for a lock ``pid`` holds (at most 10 s)."""
    with psycopg.connect(url, autocommit=True) as conn:

        def waiting() -> bool:
            (count,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (pid,),
            ).fetchone() or (0,)
            return bool(count)

        wait_until(waiting, 10, "the migration waiting for the lock")


def _session_key_valid(url: str) -> bool:
    """Whether the deliveries' key on their conversation is there and validated."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'deliveries_session_id_fkey'"
        ).fetchone()
    return row == (True,)
