"""One engine per SQLite file: the lock an engine holds on its store while it serves.

A SQLite store serves one engine process (docs/scaling.md). A second engine on the same
file would take the first one's live runs for a dead engine's and resume them, and the
first one's conversations would then fail. So the engine takes an exclusive lock on
``<file>.lock`` beside the database as it starts, and keeps it until it exits (the kernel
lets go of it when the process ends, ``kill -9`` included): a second engine on the file is
refused at start with a configuration error naming the file and the engine that holds it.

The lock is the engine's, not the store's: ``agentik migrate`` and ``agentik doctor``
open the file while an engine serves it. PostgreSQL serves several engines and needs none.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from agentik.config import ConfigError

__all__ = ["StoreLock", "lock_store"]

_SQLITE = "sqlite:///"


class StoreLock:
    """An exclusive lock on ``path``, held until :meth:`release` (or the process ends)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the file lets go of the lock


def lock_store(url: str) -> StoreLock | None:
    """Lock the SQLite file the store URL ``url`` names (None for another store, or a
    private in-memory database): ``ConfigError`` naming the file, and the process that
    holds it, when another engine serves it."""
    if not url.startswith(_SQLITE) or url[len(_SQLITE) :] in ("", ":memory:"):
        return None
    database = Path(url[len(_SQLITE) :]).resolve()  # one lock however the path is spelt
    path = database.with_name(database.name + ".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"cannot lock the SQLite store {database}: {path}: {exc.strerror}"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError(
            f"the SQLite store {database} is in use by another engine"
            f"{f' (pid {holder})' if holder else ''}, which holds {path}: a SQLite store "
            "serves one engine process. Stop that engine first, give this one another file, "
            "or use PostgreSQL for several engines (AGENTIK_STORE=postgresql://...)"
        ) from None
    except OSError as exc:
        os.close(fd)
        raise ConfigError(
            f"cannot lock the SQLite store {database}: {path}: {exc.strerror}"
        ) from None
    # Who holds it, for the next engine's error (the lock, not this text, is what counts).
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return StoreLock(path, fd)


def _holder(fd: int) -> str:
    """The pid the lock file's holder wrote into it ("" when unknown)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
