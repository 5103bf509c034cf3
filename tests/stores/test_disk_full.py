"""The SQLite store on a real full disk: a clear error, nothing stored lost, recovery."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine_service.core.errors import StorageUnavailable
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
