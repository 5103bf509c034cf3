"""Group commit for the PostgreSQL store: one writer task sends the store's frequent small
writes, every run's at once, in one transaction.

Each run stores its events one write at a time, each as soon as the previous one is done;
with many runs that was one transaction (a pooled connection, a round trip, a synchronous
commit) per run per write, and each round trip costs the engine's loop as much CPU as the
rest of a short run. Here a write is a few statements with no decision between them (the
conditions are in the SQL: an append whose first seq no longer follows the session's last
one writes nothing and says so). The writer takes every write queued meanwhile, up to
``max_batch``, and sends them in one transaction as one query string (``EXECUTE`` of
statements prepared once on its connection, values written in: ``literals``): two
round trips and one commit for the lot. Runs begin in these batches too (``begin_run``).
A caller learns its result only once that transaction is committed, so a client still
sees an event only once it is stored.

Isolation: a write that its own conditions refuse (a run another replica took over) is a
row missing from its result, not an error, so it never fails the others. A statement
that fails (a duplicate message id, a value the database refuses) fails the transaction:
the writer then runs each write of that batch on its own, so each gets its own answer,
exactly as without batching. A failure of the database itself (unreachable, disk full)
fails every write of the batch with the same ``StorageUnavailable``; a connection lost
while committing is settled as for any write (``CallRunner``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from engine_service.core.errors import StorageUnavailable
from engine_service.stores.postgres.calls import CallRunner, Statement

__all__ = ["DEFAULT_MAX_BATCH", "WriteBatcher"]

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH = 256
"""Writes per transaction, at most (``[engine] store_batch_max``)."""

Result = list[list[tuple[Any, ...]]]
_Conn = psycopg.AsyncConnection[TupleRow]


@dataclass(slots=True, eq=False)
class _Write:
    statements: Sequence[Statement]
    future: asyncio.Future[Result] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class WriteBatcher:
    """Runs queued writes in batches, one batch at a time, on ``calls``, over a connection
    of its own that ``connect(timeout)`` opens (and opens again once it is lost: a pool
    replacing connections a failover ended backs off for seconds; the writer must not)."""

    def __init__(
        self,
        calls: CallRunner,
        connect: Callable[[float], Awaitable[_Conn]],
        *,
        max_batch: int = DEFAULT_MAX_BATCH,
        atomic: bool = True,
    ) -> None:
        """``atomic``: each batch is one transaction (writes); else each statement is
        on its own (reads, sent together all the same)."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.max_batch = max_batch
        self._calls = calls
        self._connect = connect
        self._atomic = atomic
        self._conn: _Conn | None = None
        self._queue: deque[_Write] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._idle = asyncio.Event()
        """Set while nothing is queued or being written."""
        self._idle.set()
        self.transactions = 0
        """Transactions the writer committed (or tried): fewer than writes under load."""
        self.writes = 0

    async def first(self, statements: Sequence[Statement]) -> list[tuple[Any, ...] | None]:
        """Run ``statements`` in the next batch; the first row of each (None for none),
        once committed."""
        return [rows[0] if rows else None for rows in await self.submit(statements)]

    async def submit(self, statements: Sequence[Statement]) -> Result:
        """Run ``statements`` in the next batch; the rows of each, once committed."""
        if self._closed:
            raise StorageUnavailable("storage unavailable: the store is closed")
        write = _Write(statements)
        self._queue.append(write)
        self._idle.clear()
        self._wake.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="agentik-pg-writer"
            )
        # Shielded: a caller cancelled mid-write does not cancel the batch (the others'
        # writes are in it), and its own write may already be committed.
        return await asyncio.shield(write.future)

    async def _run(self) -> None:
        queue = self._queue
        while True:
            await self._wake.wait()
            self._wake.clear()
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), self.max_batch))]
                try:
                    await self._send(batch)
                except asyncio.CancelledError:
                    for write in batch:
                        _fail(write, StorageUnavailable("storage unavailable: the store closed"))
                    raise
                except Exception as exc:  # never leave a caller waiting
                    log.exception("the store's writer failed")
                    for write in batch:
                        _fail(write, exc)
            self._idle.set()

    async def _send(self, batch: list[_Write]) -> None:
        """``batch`` in one transaction; on a failure of one of its statements, each write
        on its own."""
        self.transactions += 1
        self.writes += len(batch)
        try:
            rows = await self._calls.batch(
                [write.statements for write in batch], self._connection, atomic=self._atomic
            )
        except StorageUnavailable as exc:
            for write in batch:
                _fail(write, exc)
            return
        except Exception as exc:
            if len(batch) == 1:
                _fail(batch[0], exc)
                return
            for write in batch:
                await self._send([write])
            return
        for write, result in zip(batch, rows, strict=True):
            if not write.future.done():
                write.future.set_result(result)

    @asynccontextmanager
    async def _connection(self, wait: float) -> AsyncIterator[_Conn]:
        """The writer's connection, opened when there is none; dropped when a batch on it
        fails for a reason other than its statements (then it may be broken)."""
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect(wait)
        conn = self._conn
        try:
            yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError, OSError):
            self._conn = None
            with suppress(psycopg.Error, OSError):
                await conn.close()
            raise

    def __del__(self) -> None:
        # A store dropped without close() (a test, a process on its way out): its own
        # connection is closed as a pool closes its connections, without psycopg's
        # ResourceWarning for a connection deleted while open.
        conn = self._conn
        if conn is not None and not conn.closed:
            with suppress(Exception):
                conn.pgconn.finish()

    async def close(self) -> None:
        """Finish the writes queued so far, then stop; later writes are refused."""
        self._closed = True
        task, self._task = self._task, None
        if task is None:
            return
        idle = asyncio.ensure_future(self._idle.wait())
        await asyncio.wait([idle, task], return_when=asyncio.FIRST_COMPLETED)
        idle.cancel()
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        while self._queue:
            _fail(self._queue.popleft(), StorageUnavailable("storage unavailable: closed"))
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error, OSError):
                await conn.close()


def _fail(write: _Write, exc: BaseException) -> None:
    if not write.future.done():
        write.future.set_exception(exc)
        write.future.exception()  # retrieved: a caller that went away logs nothing
