"""Signals between PostgreSQL stores (engines) on one database: every write heard on another
store within a second and only once committed, the listener reconnecting, payloads small,
and stores in two schemas not hearing each other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from engine_service.core import events as ev
from engine_service.core.models import RunStatus
from engine_service.core.store import Signal, SignalKind
from engine_service.stores.postgres import PostgresSessionStore
from engine_service.stores.postgres import calls as postgres_calls
from engine_service.stores.postgres.signals import decode_signal, encode_signal
from tests.postgres_server import with_schema
from tests.stores.heard import Heard

INTRANS = TransactionStatus.INTRANS
T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(seq: int, session_id: str = "s1", run_id: str = "r1") -> ev.Event:
    return ev.Event(seq, 1_700_000_000.5 + seq, session_id, run_id, ev.StepStarted(str(seq)))


async def test_a_watcher_on_one_store_hears_every_write_on_another_within_a_second(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two
    heard = Heard()
    await b.watch(heard)

    async def expect(write: Callable[[], object], wanted: Signal) -> float:
        sent = time.monotonic()
        outcome = write()
        if asyncio.iscoroutine(outcome):
            await outcome
        arrived, signal = await heard.next(1.0)
        assert signal == wanted
        return arrived - sent

    latencies = [
        await expect(
            lambda: a.begin_run("s1", "r1", at(0), create=True),
            Signal(SignalKind.BEGUN, "s1", "r1", 0),
        ),
        await expect(
            lambda: a.append_events("s1", [event(1), event(2)]),
            Signal(SignalKind.EVENTS, "s1", "r1", 2),
        ),
        await expect(
            lambda: a.signal(Signal(SignalKind.STOP, "s1", "r1")),
            Signal(SignalKind.STOP, "s1", "r1", 0),
        ),
        await expect(
            lambda: a.finish_run("s1", "r1", RunStatus.INTERRUPTED, at(1), events=[event(3)]),
            Signal(SignalKind.ENDED, "s1", "r1", 3),
        ),
    ]
    assert max(latencies) < 1.0
    # Nothing is signalled for a write that stores no events.
    await a.append_events("s1", [], reserve_through=9)
    with pytest.raises(TimeoutError):
        await heard.next(0.2)


async def test_a_signal_arrives_only_once_its_write_is_committed(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = two
    heard = Heard()
    await b.watch(heard)
    await a.begin_run("s1", "r1", at(0), create=True)
    await heard.next(1.0)  # BEGUN
    release = asyncio.Event()
    notified = asyncio.Event()
    rows = postgres_calls._rows

    async def hold_before_commit(cursor: psycopg.AsyncCursor[tuple[object, ...]]) -> object:
        # The writer reads each statement's rows after the statements ran (the NOTIFY
        # among them) and before it commits.
        if not notified.is_set() and cursor.connection.info.transaction_status == INTRANS:
            notified.set()
            await release.wait()  # the transaction stays open
        return await rows(cursor)

    monkeypatch.setattr(postgres_calls, "_rows", hold_before_commit)
    writing = asyncio.create_task(
        a.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1), events=[event(1)])
    )
    await notified.wait()
    with pytest.raises(TimeoutError):
        await heard.next(0.3)
    assert (await b.get_session("s1")).last_seq == 0

    release.set()
    await writing
    _, signal = await heard.next(1.0)
    assert signal == Signal(SignalKind.ENDED, "s1", "r1", 1)
    assert [e.seq for e in await b.read_events("s1", 0, 0)] == [1]


async def test_the_watcher_reconnects_when_its_connection_drops(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    a = PostgresSessionStore(pg_url, reconnect_delay=0.05)
    heard = Heard()
    try:
        await a.watch(heard)
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
                " AND datname = current_database()"
            ).fetchall()
        assert killed
        deadline = time.monotonic() + 5
        while True:  # signals sent while it reconnects may be lost: followers also poll
            await a.signal(Signal(SignalKind.STOP, "s1", "r1"))
            try:
                await heard.next(0.2)
                break
            except TimeoutError:
                assert time.monotonic() < deadline
        assert any("reconnecting" in r.getMessage() for r in caplog.records)
    finally:
        await a.close()


def test_signal_payloads_stay_small_and_round_trip() -> None:
    signal = Signal(SignalKind.ENDED, "é" * 128, "r" * 128, 2**62)
    payload = encode_signal(signal)
    assert len(payload.encode()) < 8000
    assert decode_signal(payload) == signal
    for junk in ("", "{}", "[1,2,3,4]", '["nope","s","r",1]', '["events","s","r","1"]'):
        assert decode_signal(junk) is None


async def test_stores_in_two_schemas_of_one_database_do_not_hear_each_other(
    pg_database: str,
) -> None:
    urls = []
    for schema in ("iso_a", "iso_b"):
        with psycopg.connect(pg_database, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        urls.append(with_schema(pg_database, schema))
    a, b = PostgresSessionStore(urls[0]), PostgresSessionStore(urls[1])
    try:
        heard = Heard()
        await b.watch(heard)
        await a.begin_run("same-id", "r1", at(0), create=True)
        with pytest.raises(TimeoutError):
            await heard.next(0.3)
        await b.begin_run("same-id", "r1", at(0), create=True)
        _, signal = await heard.next(1.0)
        assert signal == Signal(SignalKind.BEGUN, "same-id", "r1", 0)
    finally:
        await a.close()
        await b.close()
