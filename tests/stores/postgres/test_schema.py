"""The PostgreSQL store's schema: migrated once however many stores or ``agentik migrate``
processes open a fresh database at once, backfilled as each version needs, and refused
when it is newer than the code."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.stores.postgres import PostgresSessionStore
from engine_service.stores.postgres.schema import SCHEMA_VERSION
from tests.stack import free_port
from tests.stores.migrate_cli import migrate_cli

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


async def test_the_outbox_migration_ties_each_run_webhook_to_its_conversation(
    pg_url: str,
) -> None:
    """Version 9 ties each delivery to its conversation, so deleting the conversation
    deletes them: a run's webhook finds it by the run id in its delivery id; an A2A push
    (a hashed id) and a webhook whose run is gone stay without one."""
    store = PostgresSessionStore(pg_url)
    try:
        await store.begin_run("s1", "r.1", at(0), create=True)
        await store.finish_run("s1", "r.1", RunStatus.SUCCEEDED, at(1))
    finally:
        await store.close()
    ids = ("run_r.1.0123456789abcdef", "run_gone.0123456789abcdef", "push_0123456789abcdef")
    with psycopg.connect(pg_url, autocommit=True) as conn:  # back to schema version 8
        conn.execute("DROP INDEX deliveries_session")
        conn.execute("ALTER TABLE deliveries DROP COLUMN session_id")
        conn.execute("DELETE FROM agentik_schema_migrations WHERE version >= 9")
        for delivery_id in ids:
            conn.execute(
                "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
                " next_attempt_at, status) VALUES (%s, %s, 'https://h.example.com/', '{}',"
                " '{}', now(), now(), 'pending')",
                (delivery_id, "a2a" if delivery_id.startswith("push") else "run"),
            )
    again = PostgresSessionStore(pg_url)
    try:
        webhook = await again.get_delivery(ids[0])
        assert webhook is not None and webhook.session_id == "s1"
        await again.delete_session("s1")
        assert await again.get_delivery(ids[0]) is None
        for kept in ids[1:]:
            found = await again.get_delivery(kept)
            assert found is not None and found.session_id == ""
    finally:
        await again.close()
    assert versions(pg_url) == list(range(1, SCHEMA_VERSION + 1))
