"""The PostgreSQL store's writer: every run's small writes in one transaction (group
commit), each write still isolated from the others of its batch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from agentik.config import ConfigError, load_settings
from engine_service.core import events as ev
from engine_service.core.errors import AlreadyExists, InvalidInput, SessionBusy, SessionNotFound
from engine_service.core.models import Interrupt, Message, Role, RunStatus, TextPart
from engine_service.stores import open_store
from engine_service.stores.postgres import PostgresSessionStore

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
RUNS = 16


def event(seq: int, session_id: str, run_id: str = "r") -> ev.Event:
    return ev.Event(seq, 1_700_000_000.5 + seq, session_id, run_id, ev.StepStarted(str(seq)))


def message(message_id: str) -> Message:
    return Message(message_id, Role.USER, [TextPart("hi")], created_at=T0, run_id="r")


def commits(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PostgresSessionStore]:
    made = PostgresSessionStore(pg_url)
    await made.open()
    yield made
    await made.close()


async def sessions(store: PostgresSessionStore, count: int) -> list[str]:
    ids = [f"s{i}" for i in range(count)]
    for i, session_id in enumerate(ids):
        await store.create_session(session_id, "", T0)
        await store.begin_run(session_id, f"r{i}", T0, create=False, reserve=64)
    return ids


async def test_many_runs_writes_go_in_fewer_transactions_than_runs(
    store: PostgresSessionStore, pg_url: str
) -> None:
    ids = await sessions(store, RUNS)
    before_tx, before_commits = store._batch.transactions, commits(pg_url)
    await asyncio.gather(
        *(store.append_events(s, [event(1, s), event(2, s), event(3, s)]) for s in ids)
    )
    await asyncio.sleep(0.7)  # the statistics are flushed at most once a second
    batched = store._batch.transactions - before_tx
    assert batched < RUNS / 2, batched
    assert commits(pg_url) - before_commits < RUNS, "one commit per run's write"
    for s in ids:
        assert [e.seq for e in await store.read_events(s, 0, 0)] == [1, 2, 3]
        assert (await store.get_session(s)).last_seq == 3


async def test_a_fenced_run_in_a_batch_is_refused_and_the_healthy_one_stored(
    store: PostgresSessionStore, pg_url: str
) -> None:
    healthy, fenced = await sessions(store, 2)
    # Another replica took the fenced run over and stored its closing events after the
    # seqs this store handed out.
    other = PostgresSessionStore(pg_url)
    try:
        await other.append_events(fenced, [event(65, fenced)])
    finally:
        await other.close()
    before = store._batch.transactions
    results = await asyncio.gather(
        store.append_events(healthy, [event(1, healthy), event(2, healthy)]),
        store.append_events(fenced, [event(1, fenced), event(2, fenced)]),
        return_exceptions=True,
    )
    assert store._batch.transactions - before == 1  # one batch held both
    assert results[0] is None
    assert isinstance(results[1], InvalidInput), results[1]
    assert [e.seq for e in await store.read_events(healthy, 0, 0)] == [1, 2]
    assert [e.seq for e in await store.read_events(fenced, 0, 0)] == [65]


async def test_a_failing_write_fails_alone_and_the_rest_of_its_batch_is_stored(
    store: PostgresSessionStore,
) -> None:
    first, second, third = await sessions(store, 3)
    await store.append_messages(first, [message("m1")])
    results = await asyncio.gather(
        store.append_events(second, [event(1, second)]),
        store.append_messages(first, [message("m1")]),  # the id is taken
        store.append_messages("nowhere", [message("m2")]),
        store.append_messages(third, [message("m1"), message("m2")]),
        return_exceptions=True,
    )
    assert results[0] is None and results[3] is None
    assert isinstance(results[1], AlreadyExists), results[1]
    assert isinstance(results[2], SessionNotFound), results[2]
    assert [e.seq for e in await store.read_events(second, 0, 0)] == [1]
    assert [m.id for m in await store.all_messages(first)] == ["m1"]
    assert [m.id for m in await store.all_messages(third)] == ["m1", "m2"]


async def test_a_batch_holds_at_most_store_batch_max_writes(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text("[engine]\nstore_batch_max = 2\n")
    settings = load_settings(str(path), {})
    assert settings.engine.store_batch_max == 2
    made = open_store(pg_url, batch_max=settings.engine.store_batch_max)
    assert isinstance(made, PostgresSessionStore)
    try:
        ids = await sessions(made, 6)
        before = made._batch.transactions
        await asyncio.gather(*(made.append_events(s, [event(1, s)]) for s in ids))
        assert made._batch.transactions - before >= 3
    finally:
        await made.close()
    path.write_text("[engine]\nstore_batch_max = 0\n")
    with pytest.raises(ConfigError, match="store_batch_max"):
        load_settings(str(path), {})


async def test_a_write_queued_when_the_store_closes_is_stored_first(pg_url: str) -> None:
    made = PostgresSessionStore(pg_url)
    (session_id,) = await sessions(made, 1)
    write = asyncio.ensure_future(made.append_events(session_id, [event(1, session_id)]))
    await asyncio.sleep(0)
    await made.close()
    await write
    again = PostgresSessionStore(pg_url)
    try:
        assert [e.seq for e in await again.read_events(session_id, 0, 0)] == [1]
    finally:
        await again.close()


async def test_a_store_dropped_without_close_closes_its_own_connections(pg_url: str) -> None:
    """As a pool does for its connections: the writer's and the reader's connections of a
    store nobody closed are closed when it goes, with no ResourceWarning (which pytest here
    turns into an error in whatever test runs when the garbage is collected)."""
    import gc
    import warnings

    made = PostgresSessionStore(pg_url)
    await made.open()
    [dropped] = await sessions(made, 1)
    await made.append_events(dropped, [event(1, dropped)])
    await made.get_session(dropped)
    writer = made._batch._conn
    reader = made._reads._conn  # None when the reads went another way
    assert writer is not None and not writer.closed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del made
        gc.collect()
    assert writer.closed and (reader is None or reader.closed)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], caught


async def test_runs_begin_in_the_writers_batches_and_a_refused_one_the_long_way(
    store: PostgresSessionStore,
) -> None:
    seen: list[list[Interrupt]] = []
    before_tx, before_writes = store._batch.transactions, store._batch.writes
    begun = await asyncio.gather(
        *(
            store.begin_run(f"n{i}", f"r{i}", T0, create=True, reserve=64, admit=seen.append)
            for i in range(RUNS)
        )
    )
    assert store._batch.writes - before_writes == RUNS
    assert store._batch.transactions - before_tx < RUNS / 2
    assert seen == [[]] * RUNS
    for i, run in enumerate(begun):
        assert run.created and run.session.active_run_id == f"r{i}"
        assert (run.session.last_seq, run.session.reserved_seq) == (0, 64)
        [record] = await store.list_runs(f"n{i}")
        assert (record.id, record.status, record.start_seq) == (f"r{i}", RunStatus.RUNNING, 1)
    before_writes = store._batch.writes
    with pytest.raises(SessionBusy):
        await store.begin_run("n0", "other", T0, create=True)
    with pytest.raises(AlreadyExists):
        await store.begin_run("elsewhere", "r1", T0, create=True)
    assert store._batch.writes - before_writes == 2  # tried batched, wrote nothing
    assert [r.id for r in await store.list_runs("n0")] == ["r0"]
    with pytest.raises(SessionNotFound):
        await store.get_session("elsewhere")


async def test_the_writer_prepares_each_statement_once_on_its_connection(
    store: PostgresSessionStore,
) -> None:
    async def prepared() -> list[str]:
        conn = store._batch._conn
        assert conn is not None
        cursor = await conn.execute("SELECT statement FROM pg_prepared_statements")
        return sorted(row[0] for row in await cursor.fetchall())

    ids = await sessions(store, 4)
    await asyncio.gather(*(store.append_events(s, [event(1, s)]) for s in ids))
    first = await prepared()
    assert any("INSERT INTO events" in statement for statement in first)
    await asyncio.gather(*(store.append_events(s, [event(2, s), event(3, s)]) for s in ids))
    await asyncio.gather(*(store.append_messages(s, [message("m1")]) for s in ids))
    again = await prepared()
    assert len(again) == len(set(again)) == len(first) + 1  # the message append's insert
    for s in ids:
        assert [e.seq for e in await store.read_events(s, 0, 0)] == [1, 2, 3]


async def test_a_transaction_left_failed_on_the_writers_connection_is_rolled_back_first(
    store: PostgresSessionStore,
) -> None:
    (session_id,) = await sessions(store, 1)
    conn = store._batch._conn
    assert conn is not None
    with pytest.raises(psycopg.errors.DivisionByZero):
        await conn.execute("BEGIN; SELECT 1 / 0")
    assert conn.info.transaction_status is psycopg.pq.TransactionStatus.INERROR
    await store.append_events(session_id, [event(1, session_id)])
    assert store._batch._conn is conn
    assert [e.seq for e in await store.read_events(session_id, 0, 0)] == [1]
