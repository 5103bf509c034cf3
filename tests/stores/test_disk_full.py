"""The SQLite store on a real full disk: a clear error, nothing stored lost, recovery."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine_service.core.errors import StorageUnavailable
from engine_service.core.events import Event, TextMessageContent, TextMessageStart
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.stores import SqliteSessionStore
from tests.small_disk import SmallDisk, small_disk

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
MAX_WRITES = 2000


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[SmallDisk]:
    with small_disk(tmp_path / "disk") as mounted:
        yield mounted


def _message(index: int) -> Message:
    return Message(id=f"m{index}", role=Role.USER, content=[TextPart("x" * 4000)], created_at=NOW)


async def _write_until_full(store: SqliteSessionStore) -> tuple[int, StorageUnavailable]:
    """Append messages until the store refuses; how many it took, and the error."""
    for index in range(MAX_WRITES):
        try:
            await store.append_messages("s", [_message(index)])
        except StorageUnavailable as exc:
            return index, exc
    raise AssertionError(f"{MAX_WRITES} writes of 4 kB fit on a full 2 MB disk")


async def test_a_full_disk_is_a_clear_error_and_keeps_every_stored_message(
    disk: SmallDisk,
) -> None:
    store = SqliteSessionStore(disk.path / "agentik.db")
    await store.create_session("s", "kept", NOW)
    disk.fill()

    written, error = await _write_until_full(store)

    assert error.message == "storage unavailable: the disk is full"
    assert error.code == "storage_unavailable"
    with pytest.raises(StorageUnavailable, match="disk is full"):
        await store.check_writable()
    # Reads still work and nothing that was stored is lost or torn.
    messages = await store.all_messages("s")
    assert [m.id for m in messages] == [f"m{i}" for i in range(written)]
    assert (await store.get_session("s")).title == "kept"

    disk.free()
    await store.check_writable()
    await store.append_messages("s", [_message(written)])
    assert len(await store.all_messages("s")) == written + 1
    await store.close()


async def test_the_store_opens_on_a_full_disk_and_serves_reads(disk: SmallDisk) -> None:
    path = disk.path / "agentik.db"
    store = SqliteSessionStore(path)
    await store.begin_run("s", "r", NOW, create=True, reserve=64)
    await store.close()
    disk.fill()

    reopened = SqliteSessionStore(path)

    assert [r.id for r in await reopened.running_runs()] == ["r"]
    assert (await reopened.get_session("s")).reserved_seq == 64
    with pytest.raises(StorageUnavailable, match="disk is full"):
        await reopened.finish_run("s", "r", RunStatus.INTERRUPTED, NOW)
    assert (await reopened.get_run("s", "r")).status is RunStatus.RUNNING
    disk.free()
    await reopened.finish_run("s", "r", RunStatus.INTERRUPTED, NOW)
    assert await reopened.running_runs() == []
    await reopened.close()


@pytest.mark.parametrize("lanes", ["one lane", "both lanes"])
async def test_a_disk_filling_under_group_commits_stores_exactly_what_was_acknowledged(
    disk: SmallDisk, lanes: str
) -> None:
    """Many sessions appending at once, so that the writes go in the writer thread's group
    commits (each operation a savepoint of the batch's transaction), while the disk fills (here
    at a group commit's COMMIT, which refuses every write in it): every append either was
    acknowledged and is stored, or was refused and left nothing — no event lost, none
    stored twice, no last seq ahead of its events — and once there is room again every
    session takes its next event. With ``both lanes`` half the sessions append answers'
    starts, which the writer runs in its first lane, ahead of the others' appends."""
    store = SqliteSessionStore(disk.path / "agentik.db")
    sessions = [f"s{i}" for i in range(24)]
    for sid in sessions:
        await store.create_session(sid, "", NOW)
    acknowledged: dict[str, list[int]] = {sid: [] for sid in sessions}
    refused = 0
    disk.fill(leave=400_000)  # room for about a hundred events

    async def append(sid: str) -> None:
        nonlocal refused
        seq = (acknowledged[sid] or [0])[-1] + 1
        body: TextMessageContent | TextMessageStart = TextMessageContent("m", "x" * 3000)
        if lanes == "both lanes" and int(sid[1:]) % 2:
            body = TextMessageStart("m" + "x" * 3000)
        event = Event(seq, 0.0, sid, "r", body)
        try:
            await store.append_events(sid, [event])
        except StorageUnavailable:
            refused += 1
        else:
            acknowledged[sid].append(seq)

    for _ in range(MAX_WRITES // len(sessions)):
        before = refused
        await asyncio.gather(*(append(sid) for sid in sessions))
        if refused - before == len(sessions):
            break
    else:
        raise AssertionError("the disk never filled")
    assert sum(map(len, acknowledged.values())) > len(sessions)  # some went in before
    for sid in sessions:
        stored = [e.seq for e in await store.read_events(sid, 0, 0)]
        assert stored == acknowledged[sid], sid
        assert (await store.get_session(sid)).last_seq == (stored or [0])[-1], sid

    disk.free()
    await asyncio.gather(*(append(sid) for sid in sessions))
    for sid in sessions:
        assert [e.seq for e in await store.read_events(sid, 0, 0)] == acknowledged[sid]
        assert acknowledged[sid] == list(range(1, len(acknowledged[sid]) + 1))
    await store.close()
