"""The SQLite file under the store (``engine_service.stores.sqlite.file``): two stores on
one file share its rules, since they hold within the file's transactions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine_service.core.errors import SessionBusy
from engine_service.core.models import RunStatus
from engine_service.stores.sqlite import SqliteSessionStore

T0 = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def test_two_sqlite_stores_on_one_file_share_the_one_active_run_rule(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    one, two = SqliteSessionStore(path), SqliteSessionStore(path)
    try:
        await one.begin_run("s1", "r1", at(0), create=True)
        with pytest.raises(SessionBusy):
            await two.begin_run("s1", "r2", at(1), create=True)
        await one.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(2))
        assert (await two.begin_run("s1", "r2", at(3), create=False)).session.last_seq == 0
    finally:
        await one.close()
        await two.close()
