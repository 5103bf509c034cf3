"""SQLite's failures as the core's errors (``engine_service.stores.sqlite.errors``): the
cause in plain words, integrity errors left to the caller."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine_service.core.errors import StorageUnavailable
from engine_service.stores.sqlite.errors import mapped_errors, storage_error


def test_a_file_that_is_not_a_database_is_named_so(tmp_path: Path) -> None:
    path = tmp_path / "not.db"
    path.write_bytes(b"not a database at all " * 100)
    conn = sqlite3.connect(path)
    try:
        with pytest.raises(StorageUnavailable) as raised, mapped_errors():
            conn.execute("SELECT * FROM sqlite_master")
    finally:
        conn.close()
    assert raised.value.message == "storage unavailable: the file is not a database"
    assert isinstance(raised.value.__cause__, sqlite3.DatabaseError)


def test_a_write_lock_held_by_another_connection_is_named_so(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    holder = sqlite3.connect(path, isolation_level=None)
    waiter = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        holder.execute("CREATE TABLE t (n INTEGER)")
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(StorageUnavailable) as raised, mapped_errors():
            waiter.execute("INSERT INTO t VALUES (1)")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        waiter.close()
    assert raised.value.message == "storage unavailable: the database is locked by another process"


def test_an_extended_result_code_is_named_by_its_primary_code() -> None:
    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorname = "SQLITE_IOERR_SHMOPEN"
    assert storage_error(exc).message == "storage unavailable: the disk failed to read or write"


def test_a_failure_of_no_known_code_quotes_sqlites_words() -> None:
    exc = sqlite3.OperationalError("something odd")
    assert storage_error(exc).message == "storage unavailable: the database failed (something odd)"


def test_an_integrity_error_passes_through_for_the_caller_to_interpret() -> None:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE t (id TEXT PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES ('a')")
        with pytest.raises(sqlite3.IntegrityError), mapped_errors():
            conn.execute("INSERT INTO t VALUES ('a')")
    finally:
        conn.close()
