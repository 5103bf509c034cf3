"""SQLite's failures as the core's errors: :func:`storage_error` names the cause in plain
words (a full disk, a lock held, a corrupt file), :func:`mapped_errors` applies it to a block."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from engine_service.core.errors import StorageUnavailable

__all__ = ["mapped_errors", "storage_error"]

_CAUSES: dict[str, str] = {
    "SQLITE_FULL": "the disk is full",
    "SQLITE_BUSY": "the database is locked by another process",
    "SQLITE_LOCKED": "the database is locked",
    "SQLITE_READONLY": "the database is read-only",
    "SQLITE_IOERR": "the disk failed to read or write",
    "SQLITE_CANTOPEN": "the database file cannot be opened",
    "SQLITE_CORRUPT": "the database file is corrupt",
    "SQLITE_NOTADB": "the file is not a database",
    "SQLITE_PERM": "permission to the database file was denied",
}
"""SQLite's primary result code → the cause a client and an operator can act on."""


def storage_error(exc: sqlite3.Error) -> StorageUnavailable:
    """``exc`` as the core's ``StorageUnavailable``, naming the cause in plain words."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    primary = name.split("_")[:2]
    cause = _CAUSES.get("_".join(primary)) or _CAUSES.get(name)
    if cause is None:
        text = str(exc).strip() or "unknown failure"
        cause = f"the database failed ({text})"
    return StorageUnavailable(f"storage unavailable: {cause}")


@contextmanager
def mapped_errors() -> Iterator[None]:
    """Turn SQLite's operational failures into ``StorageUnavailable``.

    Integrity errors are the callers' to interpret (a taken id, a second running run)
    and pass through untouched.
    """
    try:
        yield
    except sqlite3.IntegrityError:
        raise
    except sqlite3.Error as exc:
        raise storage_error(exc) from exc
