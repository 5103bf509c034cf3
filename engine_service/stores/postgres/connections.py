"""The PostgreSQL store's connections, and how each of its calls runs on them.

:class:`PostgresConnections` is the base of the store's parts (``sessions``,
``runs``, …): it holds the pool, the writer's and the reader's connections of
their own (``batch``), the call runner (``calls``) and the listener
(``signals``), and gives the parts their ways to run a call: ``_read``,
``_snapshot``, ``_write``, and the batches ``_batch`` and ``_reads``.

The pool opens lazily, on the first call, and the schema is migrated then (see
``schema``): ``open_store`` stays synchronous and an engine started while the
database is down serves ``StorageUnavailable`` until it comes back. ``open()`` does the
same eagerly.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from engine_service.core.errors import SessionNotFound, StorageUnavailable
from engine_service.core.models import Session
from engine_service.core.store import SessionStore
from engine_service.stores.postgres.batch import DEFAULT_MAX_BATCH, WriteBatcher
from engine_service.stores.postgres.calls import Attempt, CallKind, CallRunner, Work
from engine_service.stores.postgres.dsn import CHANNEL, channel_for, check_dsn
from engine_service.stores.postgres.rows import SESSION_COLUMNS, session_from
from engine_service.stores.postgres.schema import migrate_async
from engine_service.stores.postgres.signals import SignalListener

__all__ = ["IDLE_IN_TRANSACTION", "WRITER_NAME", "Conn", "PostgresConnections"]

log = logging.getLogger(__name__)

T = TypeVar("T")

Conn = psycopg.AsyncConnection[TupleRow]

WRITER_NAME = "agentik-writer"
"""The ``application_name`` of a store's writer connection, followed by ``-<pid>``."""

IDLE_IN_TRANSACTION = 2.0
"""Seconds after which PostgreSQL ends a write transaction of ours that waits for its next
statement. Ours run their statements back to back; one left waiting belongs to an engine
that stalled mid-write (SIGSTOP, a frozen VM) and holds its sessions' row locks: the
replica taking its runs over would wait for them as long as the stall lasts. Read-only
transactions lock nothing and are exempt."""


class PostgresConnections(SessionStore):
    """The connections of a PostgreSQL store, its calls' ways to run, its health check and
    its close; abstract: ``PostgresSessionStore`` adds the store's methods."""

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 10.0,
        channel: str = CHANNEL,
        reconnect_delay: float = 0.5,
        max_reconnect_delay: float = 10.0,
        retry_seconds: float = 5.0,
        idle_in_transaction: float = IDLE_IN_TRANSACTION,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        """Nothing connects yet: the pool opens (and the schema migrates) on first use.

        ``timeout`` bounds how long a call waits for a connection before it fails with
        ``StorageUnavailable``. ``idle_in_transaction``: seconds after which the server
        ends a transaction of ours that waits for its next statement (0: never); see
        :data:`IDLE_IN_TRANSACTION`. ``max_batch``: writes per transaction at most (see
        ``batch``). ``ValueError`` when ``dsn`` cannot be parsed.
        """
        check_dsn(dsn)
        self._dsn = dsn
        self._connect_timeout = max(1, round(timeout))
        self._channel = channel if channel != CHANNEL else channel_for(dsn)
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            dsn,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            open=False,
            name="agentik-store",
            kwargs={"autocommit": True, "connect_timeout": self._connect_timeout},
            check=AsyncConnectionPool.check_connection,
            configure=self._configure,
        )
        self._idle_in_transaction_ms = round(idle_in_transaction * 1000)
        self._opened = False
        self._ready = False
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._signals = SignalListener(
            dsn,
            self._channel,
            connect_timeout=self._connect_timeout,
            timeout=timeout,
            reconnect_delay=reconnect_delay,
            max_reconnect_delay=max_reconnect_delay,
        )
        self._calls = CallRunner(
            self._pool, self._open_once, retry_seconds=retry_seconds, timeout=timeout
        )
        self._batch = WriteBatcher(self._calls, self._writer_connection, max_batch=max_batch)
        self._reads = WriteBatcher(
            self._calls, self._reader_connection, max_batch=max_batch, atomic=False
        )

    # -- connections ----------------------------------------------------------------

    async def open(self) -> None:
        """Open the pool and migrate the schema now (otherwise the first call does).

        ``StorageUnavailable`` when the database cannot be reached (within the retry
        time); ``RuntimeError`` when its schema is newer than this engine's.
        """

        async def attempt(_: Attempt[None]) -> None:
            await self._open_once()

        await self._calls.retrying(attempt)

    async def _configure(self, conn: Conn) -> None:
        """Set up each new pooled connection."""
        await conn.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
            (str(self._idle_in_transaction_ms),),
        )

    async def _writer_connection(self, wait: float) -> Conn:
        """A connection of its own for the store's writer (``batch``), named
        ``agentik-writer-<pid>`` in ``pg_stat_activity``."""
        return await self._own_connection(wait, f"{WRITER_NAME}-{os.getpid()}")

    async def _reader_connection(self, wait: float) -> Conn:
        """A connection of its own for the reads sent together (``agentik-reader-<pid>``)."""
        return await self._own_connection(wait, f"agentik-reader-{os.getpid()}")

    async def _own_connection(self, wait: float, name: str) -> Conn:
        conn = await psycopg.AsyncConnection.connect(
            self._dsn,
            autocommit=True,
            application_name=name,
            connect_timeout=max(1, round(min(wait, self._connect_timeout))),
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        try:
            await self._configure(conn)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _open_once(self) -> None:
        """Open the pool and migrate, once; raises the database's own errors."""
        if self._ready:
            return
        if self._closed:
            raise StorageUnavailable("storage unavailable: the store is closed")
        async with self._open_lock:
            if self._ready:
                return
            # A connection of its own: a bad database name or login, or a server that is
            # down, fails here at once with its cause rather than as a pool timeout.
            conn = await psycopg.AsyncConnection.connect(
                self._dsn, autocommit=True, connect_timeout=self._connect_timeout
            )
            async with conn:
                before, after = await migrate_async(conn)
            if not self._opened:
                await self._pool.open(wait=False)
                self._opened = True
            if before != after:
                log.info("PostgreSQL schema migrated from version %d to %d", before, after)
            self._ready = True

    async def _read(self, work: Work[T]) -> T:
        """``work`` in autocommit (statements on their own), retried on a lost connection."""
        return await self._calls.run(work, CallKind.READ)

    async def _snapshot(self, work: Work[T]) -> T:
        """``work`` in one read-only transaction, so its statements see one snapshot."""
        return await self._calls.run(work, CallKind.SNAPSHOT)

    async def _write(self, work: Work[T]) -> T:
        """``work`` in one transaction, committed when it returns; run again on a new
        connection when the old one is lost before the write is known to be committed."""
        return await self._calls.run(work, CallKind.WRITE)

    @staticmethod
    async def _one(
        conn: Conn, query: str, args: Sequence[Any] | Mapping[str, Any] = ()
    ) -> tuple[Any, ...] | None:
        return await (await conn.execute(query, args)).fetchone()

    @staticmethod
    async def _all(conn: Conn, query: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await (await conn.execute(query, args)).fetchall()

    async def _require(
        self, conn: Conn, session_id: str, owner: str | None = None, *, lock: bool = False
    ) -> str | None:
        """The session's active run id; ``SessionNotFound`` when it does not exist (or,
        when ``owner`` is not None, belongs to another owner). ``lock`` holds the session
        row until the transaction ends."""
        row = await self._one(
            conn,
            "SELECT active_run_id, owner FROM sessions WHERE id = %s"
            + (" FOR UPDATE" if lock else ""),
            (session_id,),
        )
        if row is None or (owner is not None and row[1] != owner):
            raise SessionNotFound(session_id)
        active: str | None = row[0]
        return active

    async def _load(self, conn: Conn, session_id: str) -> Session:
        row = await self._one(
            conn, f"SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = %s", (session_id,)
        )
        if row is None:
            raise SessionNotFound(session_id)
        return session_from(row)

    # -- health and shutdown --------------------------------------------------------

    async def check_writable(self) -> None:
        async def work(conn: Conn) -> None:
            await conn.execute("UPDATE write_probe SET n = n + 1 WHERE id = 1")

        await self._write(work)

    async def close(self) -> None:
        await self._batch.close()
        await self._reads.close()
        self._closed = True
        await self._signals.close()
        if self._opened:
            await self._pool.close()
