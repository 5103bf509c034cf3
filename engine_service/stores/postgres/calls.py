"""How the PostgreSQL store runs one call: on a pooled connection, in the transaction the
call needs, retried on a new connection when the old one is lost.

A connection dies under a store for reasons outside the request: an operator or a proxy
ends it (``pg_terminate_backend``), the server restarts or fails over, the network drops.
The pool replaces a dead connection; :class:`CallRunner` runs the call again on a new one
where that is safe:

- reads, in autocommit or in one read-only snapshot, always;
- a write transaction that failed before its ``COMMIT`` was sent: the server rolled it
  back, so running it again writes it once;
- a write whose connection was lost while committing: it may or may not have committed.
  Its transaction id was read before the ``COMMIT``; ``pg_xact_status`` on a new
  connection says which. Committed: the call returns what it computed. Aborted: it runs
  again. Unknown: the call fails, saying so, rather than write twice.

It keeps trying for ``retry_seconds`` from the call's start (with at least one retry), then
fails with ``StorageUnavailable`` naming the last cause in plain words. Errors of the request
itself are never retried: integrity errors go back to the store's methods, a value the
database refuses (SQLSTATE class 22) is ``InvalidInput``, and any other failure is
``StorageUnavailable`` at once.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, suppress
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from engine_service.core.errors import AgentikError, InvalidInput, StorageUnavailable
from engine_service.stores.postgres.literals import Renderer

__all__ = [
    "CallKind",
    "CallRunner",
    "Statement",
    "data_error",
    "retryable",
    "storage_error",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
_Conn = psycopg.AsyncConnection[TupleRow]

FIRST_RETRY_DELAY = 0.02
"""Seconds before the first retry; doubled up to ``MAX_RETRY_DELAY`` (with no jitter needed:
the pool hands each retry the next connection it has)."""
MAX_RETRY_DELAY = 0.5
MIN_POOL_WAIT = 0.5
"""Seconds a retry waits at least for a pooled connection, however little time is left."""

# -- causes ---------------------------------------------------------------------------

UNREACHABLE = "the database is unreachable"
LOST = "the connection to the database was lost"

_SQLSTATE_CAUSES: dict[str, str] = {
    "53100": "the disk is full",
    "53200": "the database server is out of memory",
    "53300": "the database server has too many connections",
    "53400": "the database server hit a configured limit",
    # 57P01 is what a backend says when it is told to stop: pg_terminate_backend and a
    # server shutting down alike. A server that stays down is "unreachable" on retry.
    "57P01": "the database server ended the connection (an administrator, or a shutdown)",
    "57P02": "the database server crashed",
    "57P03": "the database server is starting up or shutting down",
    "57014": "the database cancelled the statement (a timeout)",
    "25006": "the database is read-only",
    "40P01": "the database found two writes waiting for each other (a deadlock) and undid one",
    "40001": "the database undid a write that conflicted with another (serialization)",
    "3D000": "the database does not exist",
    "42501": "permission to the database was denied",
    "58030": "the database server failed to read or write its disk",
    "XX001": "the database is corrupt",
    "XX002": "the database is corrupt",
}
"""SQLSTATE → the cause a client and an operator can act on."""

_CLASS_CAUSES: dict[str, str] = {
    "08": UNREACHABLE,
    "28": "the database refused the login",
    "40": "the database rolled a write back",
    "53": "the database server ran out of resources",
    "57": "the database server stopped the operation",
    "58": "the database server failed",
}

_RETRY_STATES = frozenset({"57P01", "57P02", "57P03", "53300", "40001", "40P01"})
"""Besides class 08 (connection exceptions): a backend told to stop, a server restarting,
too many connections for now, and a serialization failure or deadlock (rolled back)."""


_REFUSED_LOGINS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r'database ".*" does not exist'), "the database does not exist"),
    (
        re.compile(r'role ".*" does not exist|authentication failed|no pg_hba\.conf entry'),
        "the database refused the login",
    ),
)
"""A server that answered a new connection with FATAL for a reason that lasts (libpq gives
these no SQLSTATE): named, and not retried."""


def _refused_login(exc: BaseException) -> str | None:
    pgconn = getattr(exc, "pgconn", None)
    raw = getattr(pgconn, "error_message", b"") if pgconn is not None else b""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    _, fatal, reason = text.partition("FATAL:")
    if not fatal:
        return None
    return next((cause for pattern, cause in _REFUSED_LOGINS if pattern.search(reason)), None)


def storage_error(exc: BaseException, *, connected: bool = False) -> StorageUnavailable:
    """``exc`` as the core's ``StorageUnavailable``, naming the cause in plain words.

    ``connected``: ``exc`` came from a connection that was working, so a failure with no
    SQLSTATE is a lost connection rather than an unreachable server. The message never
    carries the server's connection text (it names the host).
    """
    if isinstance(exc, PoolTimeout | OSError):
        return StorageUnavailable(f"storage unavailable: {UNREACHABLE}")
    state = getattr(exc, "sqlstate", None) or ""
    cause = _SQLSTATE_CAUSES.get(state) or _CLASS_CAUSES.get(state[:2]) or _refused_login(exc)
    if cause is None:
        if not state or isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            cause = LOST if connected and not state else UNREACHABLE
        else:
            diag = getattr(exc, "diag", None)
            primary = (diag.message_primary if diag is not None else None) or "unknown failure"
            cause = f"the database failed ({state}: {primary})"
    return StorageUnavailable(f"storage unavailable: {cause}")


def data_error(exc: psycopg.DataError) -> InvalidInput:
    """A value the database refuses (SQLSTATE class 22, or one psycopg refuses to send) as
    ``InvalidInput``: it is the request's fault, never the store's, so it must not make the
    engine think its store failed."""
    diag = getattr(exc, "diag", None)
    primary = (diag.message_primary if diag is not None else None) or str(exc) or "bad value"
    return InvalidInput(f"the database cannot store a value of this request: {primary[:200]}")


def retryable(exc: BaseException) -> bool:
    """Whether ``exc`` lost the connection (or rolled the transaction back in a conflict)
    rather than failed the statement: the call may run again on another connection."""
    if isinstance(exc, PoolTimeout | OSError):
        return True
    if not isinstance(exc, psycopg.Error):
        return False
    state = exc.sqlstate or ""
    if state:
        return state.startswith("08") or state in _RETRY_STATES
    return isinstance(exc, psycopg.OperationalError) and _refused_login(exc) is None


# -- running calls --------------------------------------------------------------------


class CallKind(enum.Enum):
    READ = "read"
    """Statements in autocommit, each on its own."""
    SNAPSHOT = "snapshot"
    """One read-only REPEATABLE READ transaction: several statements see one snapshot."""
    WRITE = "write"
    """One transaction, committed when the work returns, rolled back when it raises."""


@dataclass(slots=True)
class Attempt(Generic[T]):
    """What one attempt got to: a connection, and (for a write) the transaction id read
    just before ``COMMIT`` with the result it would return."""

    wait: float
    """Seconds this attempt may wait for a pooled connection."""
    connected: bool = False
    xid: str | None = None
    result: T | None = None


Work = Callable[[_Conn], Awaitable[T]]

Statement = tuple[str, Sequence[Any] | Mapping[str, Any]]
"""One SQL statement and its parameters."""
Rows = list[list[list[tuple[Any, ...]]]]
Opener = Callable[[float], AbstractAsyncContextManager[_Conn]]
"""Gives a connection, waiting at most the seconds it is passed."""


class CallRunner:
    """Runs the store's calls on ``pool``, retrying lost connections for ``retry_seconds``.

    ``prepare`` runs before each attempt (it opens the pool and migrates, once);
    ``timeout`` is how long a call waits for a pooled connection when retries are off.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[_Conn],
        prepare: Callable[[], Awaitable[None]],
        *,
        retry_seconds: float,
        timeout: float,
    ) -> None:
        self._pool = pool
        self._prepare = prepare
        self.retry_seconds = retry_seconds
        self._timeout = timeout

    async def run(self, work: Work[T], kind: CallKind) -> T:
        """``work(conn)`` in the transaction ``kind`` names, retried where safe."""

        async def attempt(state: Attempt[T]) -> T:
            await self._prepare()
            async with self._pool.connection(timeout=state.wait) as conn:
                state.connected = True
                if kind is CallKind.READ:
                    return await work(conn)
                async with conn.transaction():
                    if kind is CallKind.SNAPSHOT:
                        # A read holds no lock anyone waits for: the idle-in-transaction
                        # timeout (for writes a stalled engine would leave open) does not
                        # apply, however long the caller takes between its statements.
                        await conn.execute(
                            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY;"
                            " SET LOCAL idle_in_transaction_session_timeout = 0"
                        )
                    result = await work(conn)
                    if kind is CallKind.WRITE:
                        state.result = result
                        # Read last: from here only the COMMIT itself can fail.
                        state.xid = await _current_xid(conn)
                return result

        return await self.retrying(attempt)

    async def batch(
        self,
        writes: Sequence[Sequence[Statement]],
        connection: Opener,
        *,
        atomic: bool = True,
    ) -> Rows:
        """Every statement of ``writes``, in order, in one transaction, on the connection
        ``connection(wait)`` gives; the rows of each statement, per write. Retried like a
        write. Not ``atomic``: reads, with no transaction of their own.

        The statements go as one query string, their values written in
        (``literals``): with the transaction's ``BEGIN`` before them and the read
        of its id after them, then the ``COMMIT``: two round trips, two messages, whatever
        their number. A statement that fails fails the whole transaction (nothing of it is
        stored) and, for reads, the statements after it."""

        async def attempt(state: Attempt[Rows]) -> Rows:
            await self._prepare()
            async with connection(state.wait) as conn:
                state.connected = True
                await _rolled_back(conn)  # what an earlier failure may have left open
                renderer = Renderer.of(conn)
                await renderer.prepare(
                    conn, {query: None for write in writes for query, _ in write}
                )
                render = renderer.statement
                texts = [render(query, args) for write in writes for query, args in write]
                cursor = conn.cursor()
                if not atomic:
                    await cursor.execute(";\n".join(texts), prepare=False)
                    return await _split(cursor, writes)
                try:
                    await cursor.execute(
                        "BEGIN;\n" + ";\n".join(texts) + ";\nSELECT pg_current_xact_id()::text",
                        prepare=False,
                    )
                    cursor.nextset()  # past BEGIN
                    rows = await _split(cursor, writes)
                    cursor.nextset()
                    row = await cursor.fetchone()
                    # From here only the COMMIT itself can fail.
                    state.result = rows
                    state.xid = str(row[0]) if row else None
                    await cursor.execute("COMMIT", prepare=False)
                except BaseException:
                    await _rolled_back(conn)
                    raise
                return rows

        return await self.retrying(attempt, connection)

    async def retrying(
        self,
        attempt: Callable[[Attempt[T]], Awaitable[T]],
        connection: Opener | None = None,
    ) -> T:
        """``attempt`` until it succeeds, fails for a reason of its own, or the retry time
        is spent; errors mapped as the module's docstring says. ``connection``: where to
        ask whether a write lost while committing was stored (else a pooled one)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_seconds
        delay = FIRST_RETRY_DELAY
        tries = 0
        while True:
            tries += 1
            state: Attempt[T] = Attempt(self._pool_wait(deadline - loop.time()))
            try:
                return await attempt(state)
            except (AgentikError, psycopg.IntegrityError):
                raise
            except psycopg.DataError as exc:
                raise data_error(exc) from exc
            except (psycopg.Error, OSError) as exc:
                failure = exc
            if state.xid is not None and await self._committed(
                state.xid, deadline, failure, connection
            ):
                return state.result  # type: ignore[return-value]  # set with the xid
            remaining = deadline - loop.time()
            spent = remaining <= 0 and tries > 1  # a call retries at least once
            if not retryable(failure) or not self.retry_seconds or spent:
                raise storage_error(failure, connected=state.connected) from failure
            log.warning(
                "a database call failed (%s); retrying it on a new connection",
                storage_error(failure, connected=state.connected).message,
            )
            await asyncio.sleep(max(0.0, min(delay, remaining)))
            delay = min(delay * 2, MAX_RETRY_DELAY)

    def _pool_wait(self, remaining: float) -> float:
        """How long an attempt waits for a pooled connection: the pool's timeout with
        retries off, else no longer than the retry time left (but long enough to get one)."""
        if not self.retry_seconds:
            return self._timeout
        return min(self._timeout, max(remaining, MIN_POOL_WAIT))

    async def _committed(
        self, xid: str, deadline: float, failure: BaseException, connection: Opener | None
    ) -> bool:
        """Whether the write whose connection was lost while committing was stored; raises
        ``StorageUnavailable`` when that cannot be learnt by ``deadline``."""
        outcome = await self._outcome(xid, deadline, connection)
        if outcome is None:
            raise StorageUnavailable(
                f"storage unavailable: {LOST} while committing, and whether the write was"
                " stored could not be learnt"
            ) from failure
        return outcome == "committed"

    async def _outcome(self, xid: str, deadline: float, connection: Opener | None) -> str | None:
        """``committed`` or ``aborted`` for transaction ``xid``, asked on another
        connection until ``deadline``; None when it cannot be learnt by then."""
        loop = asyncio.get_running_loop()
        delay = FIRST_RETRY_DELAY
        while True:
            wait = max(deadline - loop.time(), MIN_POOL_WAIT)
            try:
                opened = (
                    connection(min(wait, self._timeout))
                    if connection is not None
                    else self._pool.connection(timeout=min(wait, self._timeout))
                )
                async with opened as conn:
                    row = await (
                        await conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,))
                    ).fetchone()
                status: Any = row[0] if row else None
                if status in ("committed", "aborted"):
                    return str(status)
                if status is None:  # too old to know: never for a transaction of now
                    return None
            except (psycopg.Error, OSError) as exc:
                if not retryable(exc):
                    return None
            # "in progress": the old backend has not finished ending the transaction.
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_DELAY)


async def _split(
    cursor: psycopg.AsyncCursor[TupleRow], writes: Sequence[Sequence[Statement]]
) -> Rows:
    """The rows of each statement of ``writes``, from the results ``cursor`` holds, the
    current one the first statement's; ends on the last statement's."""
    rows: Rows = []
    first = True
    for write in writes:
        mine: list[list[tuple[Any, ...]]] = []
        for _ in write:
            if not first:
                cursor.nextset()
            first = False
            mine.append(await _rows(cursor))
        rows.append(mine)
    return rows


async def _rolled_back(conn: _Conn) -> None:
    """End the transaction a failed batch left open (the connection stays usable); a
    connection that is lost meanwhile is the caller's to drop."""
    if conn.info.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        with suppress(psycopg.Error, OSError):
            await conn.execute("ROLLBACK", prepare=False)


async def _rows(cursor: psycopg.AsyncCursor[TupleRow]) -> list[tuple[Any, ...]]:
    """The rows of the statement ``cursor`` ran (none for a statement without rows)."""
    return await cursor.fetchall() if cursor.description is not None else []


async def _current_xid(conn: _Conn) -> str:
    row = await (await conn.execute("SELECT pg_current_xact_id()::text")).fetchone()
    assert row is not None
    return str(row[0])
