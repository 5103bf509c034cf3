"""The SQLite store's event log (``engine_service.stores.sqlite.events``): the update that
moves a session's last seq and the insert of its events stand or fall together."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from engine_service.core.clock import utc_now
from engine_service.core.events import Event, TextMessageContent
from engine_service.stores.sqlite import SqliteSessionStore


def _events(first: int, count: int, session_id: str = "s") -> list[Event]:
    return [
        Event(seq, 0.0, session_id, "r", TextMessageContent("m", f"w{seq}"))
        for seq in range(first, first + count)
    ]


async def test_events_whose_insert_fails_in_a_batch_leave_the_last_seq_where_it_was(
    tmp_path: Path,
) -> None:
    """The update that moves a session's last seq runs before the events' insert: when the
    insert then fails inside a group commit, the operation's savepoint takes the update back
    too, and the batch's other writes are stored. (A row at seq 3 that the session's last
    seq does not count stands for any failure of the insert.)"""
    path = tmp_path / "s.db"
    store = SqliteSessionStore(path)
    writer = store._writer
    entered, gate = threading.Event(), threading.Event()
    try:
        await store.create_session("s", "", utc_now())
        await store.create_session("t", "", utc_now())
        other = sqlite3.connect(path, isolation_level=None)
        other.execute(
            "INSERT INTO events (session_id, seq, time, run_id, body) VALUES ('s', 3, 0, 'r', '{}')"
        )
        other.close()

        def block() -> None:
            entered.set()
            gate.wait(5)

        await asyncio.sleep(0)
        first = asyncio.ensure_future(writer.submit(lambda: None))  # at once
        blocker = asyncio.ensure_future(writer.submit(block))  # the thread, held
        assert await asyncio.to_thread(entered.wait, 5)
        failing = asyncio.ensure_future(store.append_events("s", _events(1, 3)))
        fine = asyncio.ensure_future(
            store.append_events("t", [Event(1, 0.0, "t", "r", TextMessageContent("m", "x"))])
        )
        await asyncio.sleep(0)
        assert writer._queue.qsize() == 2  # the two go in one batch
        gate.set()
        async with asyncio.timeout(5):
            await asyncio.gather(first, blocker)
            with pytest.raises(sqlite3.IntegrityError):
                await failing
            await fine
        assert (await store.get_session("s")).last_seq == 0
        assert (await store.get_session("t")).last_seq == 1
        assert [e.seq for e in await store.read_events("t", 0, 0)] == [1]
        # Nothing of the failed write stayed: the seqs can be written again once free.
        with sqlite3.connect(path) as fix:
            fix.execute("DELETE FROM events WHERE session_id = 's'")
        await store.append_events("s", _events(1, 3))
        assert [e.seq for e in await store.read_events("s", 0, 0)] == [1, 2, 3]
    finally:
        gate.set()
        await store.close()
