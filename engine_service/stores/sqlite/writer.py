"""The SQLite store's writer: the thread that owns the store's connection and runs its
operations one at a time, a batch in one transaction (group commit), and the WAL
checkpointer beside it (see :class:`Writer`)."""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from engine_service.core.errors import StorageUnavailable
from engine_service.stores.sqlite.errors import mapped_errors, storage_error

__all__ = ["CHECKPOINT_EVERY", "MAX_BATCH", "Checkpointer", "Writer"]

log = logging.getLogger(__name__)

R = TypeVar("R")


class _Store(Protocol):
    """What the writer uses of its store: the connection, and the flag that makes the
    store's transactions savepoints of the batch's while it runs one."""

    _conn: sqlite3.Connection
    _batched: bool


MAX_BATCH = 256
"""Operations one transaction may carry (group commit)."""

CHECKPOINT_EVERY = 256
"""Operations between two WAL checkpoints (SQLite's automatic checkpoint, which may fsync,
is off: it would run inside whichever commit crossed the threshold, on the loop too). A
checkpoint runs on a connection and thread of its own (:class:`Checkpointer`), beside the
writes; with the file in exclusive locking mode, on the writer thread."""


@dataclass(slots=True)
class _Op:
    run: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    session: str | None = None
    """The session the operation names (its ``session_id``); None: none named."""


_WAKE = object()
"""Queued for an operation that went to the first lane: wakes the writer thread."""


_CHECKPOINT = object()
"""Queued to make the writer thread checkpoint the WAL (exclusive locking mode only)."""


def _checkpoint_wal(conn: sqlite3.Connection) -> None:
    """Copy the WAL's committed pages into the database file (PASSIVE: waits for nobody);
    a failure is logged and the next checkpoint tries again, writes going on meanwhile."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.Error as exc:
        log.warning("WAL checkpoint failed: %s", storage_error(exc).message)


class Checkpointer:
    """Checkpoints the WAL on a connection and a thread of its own, so that the writes go on
    meanwhile. A checkpoint copies pages into the database file and fsyncs it: at 256 AG-UI
    streams on this box 9 ms at the median and up to 42 ms, each of them holding up every
    write (and so every run's next event) while the writer thread did it.

    The connection is opened at the first checkpoint (an engine that never writes much
    holds none) and closed by :meth:`stop`."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._wanted = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def want(self) -> None:
        """Checkpoint soon (one checkpoint for however many asks came meanwhile)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._serve, name="agentik-sqlite-checkpoint", daemon=True
            )
            self._thread.start()
        self._wanted.set()

    def stop(self) -> None:
        """Let a checkpoint under way finish, then close the connection (from any thread)."""
        self._stopping = True
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()

    def _serve(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wanted.wait()
                self._wanted.clear()
                if self._stopping:
                    return
                if conn is None:
                    try:
                        conn = sqlite3.connect(
                            self._path, isolation_level=None, check_same_thread=False
                        )
                    except sqlite3.Error as exc:
                        log.warning("WAL checkpoint failed: %s", storage_error(exc).message)
                        continue
                _checkpoint_wal(conn)
        finally:
            if conn is not None:
                conn.close()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # its caller went away (cancelled); the operation ran all the same
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


_Reply = tuple[_Op, Any, BaseException | None]


def _settle_all(replies: list[_Reply]) -> None:
    for op, result, error in replies:
        _settle(op.future, result, error)


class _Busy(Exception):
    """An operation run at once found the file's write lock held: it goes to the thread."""


def _busy(exc: StorageUnavailable) -> bool:
    """Whether ``exc`` is SQLite's "another connection holds the lock" (nothing was done:
    every write is one transaction, rolled back when it raises)."""
    cause = exc.__cause__
    name = getattr(cause, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))


def _lost() -> StorageUnavailable:
    return StorageUnavailable("storage unavailable: the database rolled the write back")


class Writer:
    """Runs the store's operations one at a time; those on one session in the order they
    were asked.

    An operation asked while none is queued or running runs at once on the caller's
    thread (the event loop's), in a transaction of its own, without waiting for another
    connection's lock (``busy_timeout`` 0 for it; when busy it is queued instead); at most
    one per turn of the loop, so that runs writing together still share a commit. The
    others queue for the thread that owns the connection the rest of the time: it runs
    every batch that queued meanwhile in one transaction — one commit for many runs'
    writes (group commit) — each operation keeping its own atomicity through a savepoint;
    a caller gets its result only once the batch is committed. Every
    :data:`CHECKPOINT_EVERY` operations the WAL is checkpointed: by ``checkpointer``,
    beside the writes, or (without one) by the writer thread between two batches.

    **Starts go first.** Under load the thread is busy all the time with the runs' streaming
    writes, and a run's begin, a later run's read of its history and the write of an
    answer's first token (what a client waits for: ``first``) waited behind a batch of
    them each. Those operations queue in a lane of their own: the thread runs what waits
    there as a batch of its own, committed and answered before the streaming writes that
    queued meanwhile. An operation never passes one asked before it about the same session
    or about no session named: while one of those waits in the queue, it queues behind it.
    """

    def __init__(
        self,
        store: _Store,
        busy_timeout_ms: int,
        checkpointer: Checkpointer | None = None,
    ) -> None:
        self._store = store
        self._busy_timeout_ms = busy_timeout_ms
        self._checkpointer = checkpointer
        self._queue: queue.SimpleQueue[_Op | object | None] = queue.SimpleQueue()
        self._count = threading.Lock()
        self._outstanding = 0
        """Operations (and checkpoints) asked and not finished: one runs at once only at 0."""
        self._connection = threading.Lock()
        """Held while an operation uses the connection."""
        self._since_checkpoint = 0
        self._turn_taken = False
        """An operation ran at once in this turn of the loop."""
        self._impatient = False
        """The connection's ``busy_timeout`` is 0 (set for operations run at once, and left
        so until the thread needs its own: two statements fewer per operation)."""
        self._replies: list[_Reply] = []
        """The writer thread's answers to the batch it runs."""
        self._first: list[_Op] = []
        """The first lane: operations the thread runs before the others queued."""
        self._queued: dict[str | None, int] = {}
        """Operations waiting in the queue (not the first lane), by session."""
        self._thread = threading.Thread(target=self._serve, name="agentik-sqlite", daemon=True)
        self._thread.start()

    async def submit(
        self,
        run: Callable[[], R],
        *,
        session: str | None = None,
        first: bool = False,
    ) -> R:
        """Run ``run`` (an operation on ``session``; ``first``: one a client waits on to
        start, see the class doc) and give its result."""
        with self._count:
            at_once = self._outstanding == 0 and not self._turn_taken
            self._outstanding += 1
            self._since_checkpoint += 1
            checkpoint = self._since_checkpoint >= CHECKPOINT_EVERY
            if checkpoint:
                self._since_checkpoint = 0
                if self._checkpointer is not None:
                    self._checkpointer.want()
                    checkpoint = False
                else:
                    self._outstanding += 1
        loop = asyncio.get_running_loop()
        try:
            if at_once:
                # One operation at once per turn of the loop: when several runs write at
                # about the same time, the others go to the thread's group commit.
                self._turn_taken = True
                loop.call_soon(self._next_turn)
                with suppress(_Busy):
                    return self._at_once(run)
            future: asyncio.Future[R] = loop.create_future()
            self._enqueue(_Op(run, loop, future, session), first)
            at_once = False  # the thread counts it done
            return await future
        finally:
            if at_once:
                self._finished(1)
            if checkpoint:
                self._queue.put(_CHECKPOINT)

    def _enqueue(self, op: _Op, first: bool) -> None:
        """Queue ``op``: in the first lane when it is ``first`` and nothing asked before it
        about its session (or about none named) waits in the queue (see the class doc).
        The first lane runs before the queue, so nothing asked later passes it."""
        queued = self._queued
        with self._count:
            if (
                first
                and op.session is not None
                and not (queued.get(op.session) or queued.get(None))
            ):
                self._first.append(op)
                self._queue.put(_WAKE)
            else:
                queued[op.session] = queued.get(op.session, 0) + 1
                self._queue.put(op)

    def _take(self, item: object) -> tuple[list[_Op], list[_Op], int, bool]:
        """Everything queued now, ``item`` (the queue's first) included: the first lane,
        the other lane's operations (at most :data:`MAX_BATCH`), the checkpoints asked, and
        whether the writer stops after them. Taken under the lock submitters hold to queue,
        so that what one batch holds and what waits for the next are never reordered."""
        batch: list[_Op] = []
        checkpoints = 0
        stopping = False
        with self._count:
            first, self._first = self._first, []
            while True:
                if isinstance(item, _Op):
                    batch.append(item)
                elif item is _CHECKPOINT:
                    checkpoints += 1
                if len(batch) >= MAX_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
            queued = self._queued
            for op in batch:
                left = queued[op.session] - 1
                if left:
                    queued[op.session] = left
                else:
                    del queued[op.session]
        return first, batch, checkpoints, stopping

    def _next_turn(self) -> None:
        self._turn_taken = False

    def _at_once(self, run: Callable[[], R]) -> R:
        """Run ``run`` now without waiting for another connection's lock; ``_Busy`` when
        that lock is held (nothing was done)."""
        with self._connection:
            if not self._impatient:
                try:
                    self._store._conn.execute("PRAGMA busy_timeout = 0")
                except sqlite3.Error:
                    raise _Busy from None  # the thread runs it, and maps the error
                self._impatient = True
            try:
                return run()
            except StorageUnavailable as exc:
                if _busy(exc):
                    raise _Busy from None
                raise

    def _patient(self) -> None:
        """Give the connection its ``busy_timeout`` back before the thread uses it (held
        ``_connection``): the thread waits for another connection's lock, the loop never."""
        if self._impatient:
            with suppress(sqlite3.Error):  # else the next batch tries again
                self._store._conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
                self._impatient = False

    def _finished(self, count: int) -> None:
        with self._count:
            self._outstanding -= count

    async def stop(self) -> None:
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.stop)

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            first, batch, checkpoints, stopping = self._take(item)
            if first:
                self._run_batch(first, 0)
            if batch or checkpoints:
                self._run_batch(batch, checkpoints)
            if stopping:
                return

    def _run_batch(self, batch: list[_Op], checkpoints: int) -> None:
        """Run ``batch`` (one transaction), then the checkpoints, and answer."""
        with self._connection:
            self._patient()
            if len(batch) == 1:
                self._alone(batch[0])
            elif batch:
                self._together(batch)
            if checkpoints:
                self._checkpoint()
        # Counted done before the callers hear of it: the next operation they ask
        # then finds the store idle and runs at once.
        self._finished(len(batch) + checkpoints)
        replies, self._replies = self._replies, []
        # One wake-up of each waiting loop per batch, not one per operation.
        loops: dict[asyncio.AbstractEventLoop, list[_Reply]] = {}
        for reply in replies:
            loops.setdefault(reply[0].loop, []).append(reply)
        for loop, answers in loops.items():
            with suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle_all, answers)

    def _checkpoint(self) -> None:
        _checkpoint_wal(self._store._conn)

    def _reply(self, op: _Op, result: Any, error: BaseException | None) -> None:
        """Answer ``op`` once its batch is done (``_serve``)."""
        self._replies.append((op, result, error))

    def _alone(self, op: _Op) -> None:
        try:
            result = op.run()
        except BaseException as exc:
            self._reply(op, None, exc)
        else:
            self._reply(op, result, None)

    def _together(self, batch: list[_Op]) -> None:
        store = self._store
        conn = store._conn
        try:
            with mapped_errors():
                conn.execute("BEGIN IMMEDIATE")
        except StorageUnavailable:
            for op in batch:  # each on its own: each gets its own answer
                self._alone(op)
            return
        store._batched = True
        done: list[tuple[_Op, Any]] = []
        try:
            for index, op in enumerate(batch):
                try:
                    done.append((op, op.run()))
                except BaseException as exc:
                    self._reply(op, None, exc)  # its savepoint was rolled back
                    if not conn.in_transaction:
                        # SQLite rolled the whole transaction back (a full disk does that):
                        # what the batch did so far is gone too.
                        lost = exc if isinstance(exc, StorageUnavailable) else _lost()
                        for earlier, _ in done:
                            self._reply(earlier, None, lost)
                        done = []
                        store._batched = False
                        for rest in batch[index + 1 :]:
                            self._alone(rest)
                        return
            try:
                with mapped_errors():
                    conn.execute("COMMIT")
            except StorageUnavailable as exc:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                for op, _ in done:
                    self._reply(op, None, exc)
                return
            for op, result in done:
                self._reply(op, result, None)
        finally:
            store._batched = False
