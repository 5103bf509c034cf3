"""The SQLite file under the store: :class:`SqliteFile` opens and migrates it and holds its
connection, its writer and its transactions; :func:`off_loop` makes a method of the store
an operation of that writer (see ``writer.Writer``)."""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from engine_service.core.errors import SessionNotFound
from engine_service.core.models import Session
from engine_service.stores.sqlite.errors import mapped_errors, storage_error
from engine_service.stores.sqlite.rows import SESSION_COLUMNS, to_session
from engine_service.stores.sqlite.schema import migrate_connection
from engine_service.stores.sqlite.writer import Checkpointer, Writer

__all__ = ["SqliteFile", "goes_first", "off_loop"]

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="SqliteFile")


_GOES_FIRST: set[Callable[..., Any]] = set()


def goes_first(method: Callable[P, R]) -> Callable[P, R]:
    """Mark a store operation a client waits on to start (below ``off_loop``): it goes
    in the writer's first lane (see :class:`Writer`)."""
    _GOES_FIRST.add(method)
    return method


def off_loop(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """Make a store operation run on the store's writer thread (see :class:`Writer`). An
    operation whose first parameter is ``session_id`` names that session to the writer,
    which keeps the operations on one session in the order they were asked."""
    code = method.__code__
    named = code.co_argcount > 1 and code.co_varnames[1] == "session_id"
    first = method in _GOES_FIRST

    async def call(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        session = None
        if named:
            session = args[0] if args else kwargs.get("session_id")
        return await self._writer.submit(
            functools.partial(method, self, *args, **kwargs),
            session=session if isinstance(session, str) else None,
            first=first,
        )

    call.__name__ = call.__qualname__ = method.__name__
    call.__doc__ = method.__doc__
    return call


class SqliteFile:
    """One SQLite file opened for the store: its connection (made here, used by the
    writer alone), its writer, and the transactions the store's parts (sessions,
    messages, runs, events, leases, deliveries) run their SQL in."""

    def __init__(self, path: str | Path, *, timeout: float = 5.0) -> None:
        """Open (creating it and its parent directories if needed) and migrate the file.

        ``":memory:"`` gives a private in-memory database.
        """
        in_memory = str(path) == ":memory:"
        if not in_memory:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        exclusive = False
        try:
            self._conn = self._open(path, timeout, exclusive=False)
        except sqlite3.OperationalError as exc:
            if not (exc.sqlite_errorname or "").startswith(("SQLITE_IOERR", "SQLITE_FULL")):
                raise storage_error(exc) from exc
            # WAL's shared-memory file cannot be made (a full disk does that). In exclusive
            # locking mode WAL keeps that index in memory: the engine starts and serves
            # reads; other processes cannot open the file until it restarts.
            log.warning("opening %s in exclusive mode: %s", path, storage_error(exc).message)
            with mapped_errors():
                self._conn = self._open(path, timeout, exclusive=True)
            exclusive = True
        try:
            with mapped_errors():
                self._migrate()
                self._push_sessions = {
                    row[0] for row in self._conn.execute("SELECT session_id FROM push_configs")
                }
                """Sessions that may have push configs. This engine alone writes the file
                (``shared`` is False): a session not here has none, and the A2A pusher's
                read at each run's start and end is not queued behind the writes."""
        except BaseException:
            self._conn.close()
            raise
        self._batched = False
        """True while the writer runs a batch: ``_tx`` and ``_read`` then nest in it."""
        # Another connection cannot open a file held in exclusive mode, nor a private
        # in-memory database: there the writer thread checkpoints.
        checkpointer = None if in_memory or exclusive else Checkpointer(str(path))
        self._writer = Writer(self, int(timeout * 1000), checkpointer)

    @staticmethod
    def _open(path: str | Path, timeout: float, *, exclusive: bool) -> sqlite3.Connection:
        # Made here, used by the store's writer thread alone (see Writer).
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
        try:
            if exclusive:
                conn.execute("PRAGMA locking_mode = EXCLUSIVE")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA wal_autocheckpoint = 0")  # the writer thread's (Writer)
            conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self) -> None:
        self.migrated: tuple[int, int] = migrate_connection(self._conn)

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: commit on success, roll back on any exception. Inside a
        batch (group commit) it is a savepoint of the batch's transaction."""
        undo: tuple[str, ...]
        if self._batched:
            begin, end, undo = "SAVEPOINT op", "RELEASE op", ("ROLLBACK TO op", "RELEASE op")
        else:
            begin, end, undo = "BEGIN IMMEDIATE", "COMMIT", ("ROLLBACK",)
        with mapped_errors():
            self._conn.execute(begin)
            try:
                yield self._conn
                self._conn.execute(end)
            except BaseException:
                if self._conn.in_transaction:
                    # SQLite may have rolled back itself (a full disk does that).
                    with suppress(sqlite3.Error):
                        for statement in undo:
                            self._conn.execute(statement)
                raise

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction, so several statements see one snapshot."""
        if self._batched:
            with mapped_errors():
                yield self._conn  # the batch's transaction is the snapshot
            return
        with mapped_errors():
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            finally:
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")

    def _require(
        self, conn: sqlite3.Connection, session_id: str, owner: str | None = None
    ) -> str | None:
        """The session's active run id; ``SessionNotFound`` when it does not exist (or,
        when ``owner`` is not None, belongs to another owner)."""
        row = conn.execute(
            "SELECT active_run_id, owner FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None or (owner is not None and row[1] != owner):
            raise SessionNotFound(session_id)
        active: str | None = row[0]
        return active

    def _load(self, conn: sqlite3.Connection, session_id: str) -> Session:
        row = conn.execute(
            f"SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFound(session_id)
        return to_session(row)

    @off_loop
    def check_writable(self) -> None:
        with self._tx() as conn:
            conn.execute("UPDATE write_probe SET n = n + 1 WHERE id = 1")

    async def close(self) -> None:
        await self._writer.stop()
        self._conn.close()
