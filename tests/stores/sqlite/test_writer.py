"""The SQLite store's writer (``engine_service.stores.sqlite.writer``): an operation asked
while the store is idle runs at once on the loop's thread; one asked while others wait
queues for the writer thread; the loop never waits for another connection's write lock;
the WAL is checkpointed beside the writes, on a thread and connection of its own."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from engine_service.core.clock import utc_now
from engine_service.core.errors import StorageUnavailable
from engine_service.core.events import Event, TextMessageContent, TextMessageStart
from engine_service.stores.sqlite import SqliteSessionStore
from engine_service.stores.sqlite import writer as sqlite_writer
from tests.polling import until


def _events(first: int, count: int, session_id: str = "s") -> list[Event]:
    return [
        Event(seq, 0.0, session_id, "r", TextMessageContent("m", f"w{seq}"))
        for seq in range(first, first + count)
    ]


async def test_an_operation_asked_while_the_store_is_idle_runs_on_the_callers_thread(
    tmp_path: Path,
) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    try:
        writer = store._writer
        here = threading.get_ident()
        assert await writer.submit(threading.get_ident) == here
        # While one waits on the writer thread, the next queues behind it, in order.
        release = threading.Event()
        order: list[str] = []

        def slow() -> int:
            release.wait(5)
            order.append("slow")
            return threading.get_ident()

        def after() -> int:
            order.append("after")
            return threading.get_ident()

        writer._outstanding += 1  # as if an operation were in flight: the next one queues
        first = asyncio.ensure_future(writer.submit(slow))
        await asyncio.sleep(0)
        writer._outstanding -= 1
        second = asyncio.ensure_future(writer.submit(after))
        await asyncio.sleep(0.05)
        assert not second.done()  # it did not run at once, past the one queued before it
        release.set()
        slow_thread, after_thread = await asyncio.gather(first, second)
        assert slow_thread == after_thread != here
        assert order == ["slow", "after"]
        assert await writer.submit(threading.get_ident) == here  # idle again
    finally:
        await store.close()


async def test_one_operation_runs_at_once_per_turn_of_the_loop(tmp_path: Path) -> None:
    """Runs that write at about the same time share the thread's group commit: after one
    operation ran at once, the next in the same turn of the loop queues."""
    store = SqliteSessionStore(tmp_path / "s.db")
    try:
        writer = store._writer
        here = threading.get_ident()
        await asyncio.sleep(0)
        first = await writer.submit(threading.get_ident)  # at once: nothing yields
        second = await writer.submit(threading.get_ident)  # the same turn: queued
        await asyncio.sleep(0)
        third = await writer.submit(threading.get_ident)
        assert (first, third) == (here, here)
        assert second != here
    finally:
        await store.close()


async def test_a_batch_of_queued_operations_wakes_the_loop_once(tmp_path: Path) -> None:
    """The thread answers every operation of a batch with one wake-up of the loop (a
    write to its self-pipe), not one per operation: under load they are most of a batch."""
    store = SqliteSessionStore(tmp_path / "s.db")
    writer = store._writer
    loop = asyncio.get_running_loop()
    gate = threading.Event()
    wakes: list[int] = []
    plain = loop.call_soon_threadsafe

    def counted(callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.Handle:
        if threading.get_ident() != here:
            wakes.append(len(args[0]) if args and isinstance(args[0], list) else 1)
        return plain(callback, *args, **kwargs)

    here = threading.get_ident()
    loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
    try:
        # Started in one turn of the loop: the first runs at once, the blocker queues.
        entered = threading.Event()

        def block() -> None:
            entered.set()
            gate.wait()

        first = asyncio.ensure_future(writer.submit(lambda: None))
        blocker = asyncio.ensure_future(writer.submit(block))
        assert await asyncio.to_thread(entered.wait, 5)  # the thread now waits in gate.wait
        assert first.done() and not blocker.done()
        queued = [
            asyncio.ensure_future(writer.submit(functools.partial(int, i))) for i in range(40)
        ]
        await asyncio.sleep(0)  # each submit's first step queues its operation
        assert writer._queue.qsize() == 40
        gate.set()
        async with asyncio.timeout(5):
            assert await asyncio.gather(*queued) == list(range(40))
            await blocker
        assert len(wakes) <= 3, wakes  # the blocker's batch, then one for the forty
        assert sum(wakes) >= 41
    finally:
        del loop.call_soon_threadsafe
        await store.close()


async def test_a_write_while_another_connection_holds_the_lock_waits_off_the_loop(
    tmp_path: Path,
) -> None:
    """Another process's write transaction: the write waits for it on the writer thread
    (up to the connection timeout), while the loop goes on serving."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    try:
        await store.create_session("s", "", utc_now())
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.create_task(tick())
        write = asyncio.ensure_future(store.rename_session("s", "renamed", utc_now()))
        await asyncio.sleep(0.3)
        assert not write.done()
        assert ticks >= 10  # the loop was not blocked on the lock
        other.execute("COMMIT")
        other.close()
        async with asyncio.timeout(5):
            renamed = await write
        ticker.cancel()
        assert renamed.title == "renamed"
        assert (await store.get_session("s")).title == "renamed"
        await asyncio.sleep(0)  # the next turn of the loop
        assert await store._writer.submit(threading.get_ident) == threading.get_ident()
    finally:
        await store.close()


async def test_operations_run_at_once_set_the_busy_timeout_once_not_each_time(
    tmp_path: Path,
) -> None:
    """The loop's operations need ``busy_timeout`` 0 and the thread's the connection
    timeout: it is changed when the other side takes the connection, not set and restored
    around every operation (two statements each, every one a GIL hand-off)."""
    store = SqliteSessionStore(tmp_path / "s.db")
    statements: list[str] = []
    try:
        await store.create_session("s", "", utc_now())
        store._conn.set_trace_callback(statements.append)
        for index in range(10):
            await asyncio.sleep(0)  # a turn each: every one runs at once
            await store.rename_session("s", f"t{index}", utc_now())
        assert [s for s in statements if "busy_timeout" in s] == []
        # The thread takes the connection back with its own timeout, once.
        writer = store._writer
        writer._outstanding += 1  # as if an operation were in flight: the next one queues
        queued = asyncio.ensure_future(store.rename_session("s", "queued", utc_now()))
        await asyncio.sleep(0)
        writer._outstanding -= 1
        async with asyncio.timeout(5):
            await queued
        timeouts = [s for s in statements if "busy_timeout" in s]
        assert timeouts == ["PRAGMA busy_timeout = 5000"], timeouts
        await asyncio.sleep(0)
        assert await writer.submit(threading.get_ident) == threading.get_ident()
        assert [s for s in statements if "busy_timeout" in s][1:] == ["PRAGMA busy_timeout = 0"]
    finally:
        store._conn.set_trace_callback(None)
        await store.close()


async def _one_batch(
    store: SqliteSessionStore, writes: list[Callable[[], Any]]
) -> tuple[list[Any], list[str]]:
    """Run ``writes`` (each a call making a store coroutine) in one group commit of the
    writer thread: their outcomes (a result or the exception) and the statements run."""
    writer = store._writer
    entered, gate = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        gate.wait(5)

    statements: list[str] = []
    try:
        await asyncio.sleep(0)
        first = asyncio.ensure_future(writer.submit(lambda: None))  # at once
        blocker = asyncio.ensure_future(writer.submit(block))  # the thread, held
        assert await asyncio.to_thread(entered.wait, 5)
        futures = [asyncio.ensure_future(write()) for write in writes]
        await asyncio.sleep(0)
        assert writer._queue.qsize() == len(writes)  # they go in one batch
        store._conn.set_trace_callback(statements.append)
        gate.set()
        async with asyncio.timeout(5):
            await asyncio.gather(first, blocker)
            outcomes = await asyncio.gather(*futures, return_exceptions=True)
    finally:
        gate.set()
        store._conn.set_trace_callback(None)
    return outcomes, statements


def _kinds_of(statements: list[str]) -> list[str]:
    return [s.split()[0].upper() for s in statements]


async def test_an_operation_that_fails_after_changing_rows_undoes_only_itself(
    tmp_path: Path,
) -> None:
    """An insert that fails after the last seq moved, between two other writes of one group
    commit: its savepoint takes its changes back, the writes before and after it are
    stored once, and the failed one leaves nothing."""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    try:
        for sid in ("a", "s", "c"):
            await store.create_session(sid, "", utc_now())
        other = sqlite3.connect(path, isolation_level=None)
        other.execute(
            "INSERT INTO events (session_id, seq, time, run_id, body) VALUES ('s', 3, 0, 'r', '{}')"
        )
        other.close()
        outcomes, statements = await _one_batch(
            store,
            [
                functools.partial(store.append_events, "a", _events(1, 2, "a")),
                functools.partial(store.append_events, "s", _events(1, 3, "s")),
                functools.partial(store.append_events, "c", _events(1, 2, "c")),
            ],
        )
        assert outcomes[0] is None and outcomes[2] is None
        assert isinstance(outcomes[1], sqlite3.IntegrityError)
        kinds = _kinds_of(statements)
        assert kinds.count("BEGIN") == 1 and kinds.count("COMMIT") == 1, statements
        assert (await store.get_session("s")).last_seq == 0
        for sid in ("a", "c"):
            assert (await store.get_session(sid)).last_seq == 2
            assert [e.seq for e in await store.read_events(sid, 0, 0)] == [1, 2]
    finally:
        await store.close()


async def test_a_transaction_sqlite_rolled_back_mid_batch_is_reported_to_every_write_in_it(
    tmp_path: Path,
) -> None:
    """When SQLite rolls the whole transaction back under an operation (a full disk can),
    the writes before it in the batch are gone too: each is answered with the error, none
    is stored; the operations after it run each in a transaction of its own."""
    store = SqliteSessionStore(tmp_path / "s.db")
    try:
        for sid in ("a", "c"):
            await store.create_session(sid, "", utc_now())

        def rolled_back() -> None:
            store._conn.execute("ROLLBACK")  # as SQLite does on SQLITE_FULL
            raise StorageUnavailable("storage unavailable: the disk is full")

        outcomes, statements = await _one_batch(
            store,
            [
                functools.partial(store.append_events, "a", _events(1, 2, "a")),
                functools.partial(store._writer.submit, rolled_back),
                functools.partial(store.append_events, "c", _events(1, 2, "c")),
            ],
        )
        assert isinstance(outcomes[0], StorageUnavailable)
        assert outcomes[0].message == "storage unavailable: the disk is full"  # its cause
        assert isinstance(outcomes[1], StorageUnavailable)
        assert outcomes[2] is None
        assert await store.read_events("a", 0, 0) == []
        assert (await store.get_session("a")).last_seq == 0
        assert [e.seq for e in await store.read_events("c", 0, 0)] == [1, 2]
        assert _kinds_of(statements).count("BEGIN") == 2  # the batch's, then c's own
    finally:
        await store.close()


async def test_the_wal_is_checkpointed_every_checkpoint_every_operations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's own checkpoint (which may fsync, inside a commit on the loop) is off; the
    store checkpoints every ``CHECKPOINT_EVERY`` operations, so the WAL's pages reach the
    database file."""
    monkeypatch.setattr(sqlite_writer, "CHECKPOINT_EVERY", 20)
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    try:
        assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        await store.begin_run("s", "r", utc_now(), create=True, reserve=1000)
        size = path.stat().st_size
        for index in range(40):
            await store.append_events("s", _events(1 + index * 50, 50))
        async with asyncio.timeout(5):
            while True:
                if path.stat().st_size > size:  # the checkpoint copied the pages over
                    break
                await asyncio.sleep(0.01)
        assert len(await store.read_events("s", 0, 0)) == 2000
    finally:
        await store.close()


async def test_a_checkpoint_under_way_holds_up_no_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint copies pages and fsyncs (9 ms at the median, up to 42 ms, at 256
    streams): it runs on a thread and connection of its own while the writes go on. Here
    one is held until forty writes after it are done; done by the writer thread, as it
    was, it held up every one of them."""
    monkeypatch.setattr(sqlite_writer, "CHECKPOINT_EVERY", 5)
    release = threading.Event()
    checkpoints: list[str] = []
    real = sqlite_writer._checkpoint_wal

    def held(conn: sqlite3.Connection) -> None:
        checkpoints.append(threading.current_thread().name)
        release.wait(10)
        real(conn)

    monkeypatch.setattr(sqlite_writer, "_checkpoint_wal", held)
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    try:
        await store.begin_run("s", "r", utc_now(), create=True, reserve=10_000)
        for index in range(5):
            await store.append_events("s", _events(1 + index * 10, 10))
        await until(lambda: bool(checkpoints))
        assert checkpoints == ["agentik-sqlite-checkpoint"]
        size = path.stat().st_size
        # Many at once, so that most go to the writer thread's batches.
        async with asyncio.timeout(5):
            await asyncio.gather(
                *(store.append_events("s", _events(51 + i * 10, 10)) for i in range(40))
            )
        assert (await store.get_session("s")).last_seq == 450
        assert path.stat().st_size == size  # the held checkpoint has not copied a page yet
        release.set()
        await until(lambda: path.stat().st_size > size)  # it goes on, and copies them over
    finally:
        release.set()
        await store.close()
    assert not any(t.name == "agentik-sqlite-checkpoint" for t in threading.enumerate())


async def test_a_file_in_exclusive_mode_is_checkpointed_by_the_writer_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When WAL's shared memory cannot be made (a full disk) the file is opened in
    exclusive locking mode, which no second connection can open: the writer thread
    checkpoints between its batches, as before."""
    monkeypatch.setattr(sqlite_writer, "CHECKPOINT_EVERY", 5)
    real_open = SqliteSessionStore._open

    def refusing_shared(path: str | Path, timeout: float, *, exclusive: bool) -> sqlite3.Connection:
        if not exclusive:
            exc = sqlite3.OperationalError("disk I/O error")
            exc.sqlite_errorname = "SQLITE_IOERR_SHMOPEN"
            raise exc
        return real_open(path, timeout, exclusive=True)

    monkeypatch.setattr(SqliteSessionStore, "_open", staticmethod(refusing_shared))
    checkpoints: list[str] = []
    real = sqlite_writer._checkpoint_wal

    def noted(conn: sqlite3.Connection) -> None:
        checkpoints.append(threading.current_thread().name)
        real(conn)

    monkeypatch.setattr(sqlite_writer, "_checkpoint_wal", noted)
    store = SqliteSessionStore(tmp_path / "s.db")
    try:
        assert store._conn.execute("PRAGMA locking_mode").fetchone()[0] == "exclusive"
        await store.begin_run("s", "r", utc_now(), create=True, reserve=10_000)
        await asyncio.gather(*(store.append_events("s", _events(1 + i * 10, 10)) for i in range(2)))
        for index in range(2, 12):
            await store.append_events("s", _events(1 + index * 10, 10))
        await until(lambda: bool(checkpoints))
        assert set(checkpoints) == {"agentik-sqlite"}
        assert (await store.get_session("s")).last_seq == 120
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def _held(store: SqliteSessionStore) -> AsyncIterator[None]:
    """The writer thread held in an operation while the block runs: what the block asks
    queues, and the thread takes it all at once when let go."""
    writer = store._writer
    entered, gate = threading.Event(), threading.Event()

    def block() -> None:
        entered.set()
        gate.wait(5)

    at_once = asyncio.ensure_future(writer.submit(lambda: None))
    blocker = asyncio.ensure_future(writer.submit(block))  # the same turn: queued
    assert await asyncio.to_thread(entered.wait, 5)
    await at_once
    try:
        yield
        await asyncio.sleep(0)  # each submit's first step queues its operation
    finally:
        gate.set()
        async with asyncio.timeout(5):
            await blocker


def _note(answered: list[str], name: str, _: object) -> None:
    answered.append(name)


async def test_what_a_client_waits_on_to_start_goes_before_the_streaming_writes(
    tmp_path: Path,
) -> None:
    """A run's begin and an answer's first token, asked after ten streaming appends, are
    committed and answered before them."""
    store = SqliteSessionStore(tmp_path / "s.db")
    sessions = [f"s{index}" for index in range(10)]
    try:
        for session_id in [*sessions, "t"]:
            await store.create_session(session_id, "", utc_now())
        answered: list[str] = []
        async with _held(store):
            asked: list[tuple[str, Coroutine[Any, Any, object]]] = [
                (session_id, store.append_events(session_id, _events(1, 2, session_id)))
                for session_id in sessions
            ]
            answer = [Event(1, 0.0, "t", "r", TextMessageStart("m")), *_events(2, 1, "t")]
            asked.append(("begin", store.begin_run("new", "r1", utc_now(), create=True)))
            asked.append(("first token", store.append_events("t", answer)))
            futures = []
            for name, call in asked:
                future = asyncio.ensure_future(call)
                future.add_done_callback(functools.partial(_note, answered, name))
                futures.append(future)
        async with asyncio.timeout(5):
            await asyncio.gather(*futures)
        assert sorted(answered[:2]) == ["begin", "first token"], answered
        assert sorted(answered[2:]) == sessions
    finally:
        await store.close()


async def test_an_operation_never_passes_one_asked_before_it_about_its_session(
    tmp_path: Path,
) -> None:
    """An answer's start asked while an append to its session waits in the queue goes
    after it (passing it, its seqs would be stored first and the earlier ones refused); so
    does one asked while an operation naming no session waits."""
    store = SqliteSessionStore(tmp_path / "s.db")
    try:
        await store.create_session("a", "", utc_now())
        await store.create_session("b", "", utc_now())
        statements: list[str] = []
        store._conn.set_trace_callback(statements.append)
        async with _held(store):
            plain = asyncio.ensure_future(store.append_events("a", _events(1, 2, "a")))
            start = [Event(3, 0.0, "a", "r", TextMessageStart("m")), *_events(4, 1, "a")]
            first = asyncio.ensure_future(store.append_events("a", start))
            unnamed = asyncio.ensure_future(
                store._writer.submit(lambda: store._conn.execute("SELECT 'unnamed'"))
            )
            begin = asyncio.ensure_future(store.begin_run("b", "r2", utc_now(), create=False))
        async with asyncio.timeout(5):
            await asyncio.gather(plain, first, unnamed, begin)
        store._conn.set_trace_callback(None)
        assert [e.seq for e in await store.read_events("a", 0, 10)] == [1, 2, 3, 4]
        ran = [s for s in statements if "'unnamed'" in s or s.startswith("INSERT INTO runs")]
        assert ran[0] == "SELECT 'unnamed'", ran
    finally:
        await store.close()
