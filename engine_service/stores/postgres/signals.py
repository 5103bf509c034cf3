"""Signals between the replicas sharing a PostgreSQL database, by ``pg_notify``.

The store sends each signal inside the writing transaction, so a watcher hears of a change
only once it is committed. The payload is a compact JSON array
``[kind, session_id, run_id, last_seq]``: ids are at most 128 characters, so it stays far
below PostgreSQL's 8000-byte limit. :class:`SignalListener` listens on a dedicated
connection (outside the pool) and reconnects with backoff when it drops; followers poll as
well, so a gap only delays them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable
from contextlib import suppress

import psycopg
from psycopg import sql

from engine_service.core.store import Signal, SignalKind
from engine_service.stores.postgres.calls import storage_error

__all__ = ["SignalListener", "decode_signal", "encode_signal"]

log = logging.getLogger(__name__)

_KINDS = {kind.value: kind for kind in SignalKind}


def encode_signal(signal: Signal) -> str:
    """The NOTIFY payload for ``signal``: ``[kind, session_id, run_id, last_seq]``."""
    return json.dumps(
        [signal.kind.value, signal.session_id, signal.run_id, signal.last_seq],
        ensure_ascii=False,
        separators=(",", ":"),
    )


def decode_signal(payload: str) -> Signal | None:
    """The signal a NOTIFY payload carries; None when it is not one of ours."""
    try:
        kind, session_id, run_id, last_seq = json.loads(payload)
    except (ValueError, TypeError):
        return None
    if (
        kind not in _KINDS
        or not isinstance(session_id, str)
        or not isinstance(run_id, str)
        or not isinstance(last_seq, int)
    ):
        return None
    return Signal(_KINDS[kind], session_id, run_id, last_seq)


class SignalListener:
    """Hears the signals on one channel and hands each to every watcher, from the first
    ``watch`` until ``close``."""

    def __init__(
        self,
        dsn: str,
        channel: str,
        *,
        connect_timeout: int,
        timeout: float,
        reconnect_delay: float,
        max_reconnect_delay: float,
    ) -> None:
        """Nothing connects yet: the first ``watch`` starts listening. ``timeout`` (plus a
        second) bounds how long ``watch`` waits for the first attempt."""
        self._dsn = dsn
        self._channel = channel
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._closed = False
        self._watchers: list[Callable[[Signal], None]] = []
        self._listener: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()
        self._reconnect_delay = reconnect_delay
        self._max_reconnect_delay = max_reconnect_delay

    async def watch(self, on_signal: Callable[[Signal], None]) -> None:
        """Call ``on_signal`` for every signal on the channel from now until ``close``.

        Returns once listening (or, when the database is unreachable, once the first
        attempt failed: a background task keeps trying).
        """
        self._watchers.append(on_signal)
        if self._listener is None:
            self._listener = asyncio.get_running_loop().create_task(
                self._listen(), name="agentik-pg-listen"
            )
        first_try = asyncio.ensure_future(self._listening.wait())
        done, _ = await asyncio.wait(
            [first_try, self._listener],
            timeout=self._timeout + 1.0,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if first_try not in done:
            first_try.cancel()

    async def _listen(self) -> None:
        """Listen on a dedicated connection, reconnecting with backoff when it drops."""
        delay = self._reconnect_delay
        while not self._closed:
            try:
                # Keepalives: a connection that silently died (no RST) is noticed.
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn,
                    autocommit=True,
                    connect_timeout=self._connect_timeout,
                    keepalives=1,
                    keepalives_idle=30,
                    keepalives_interval=10,
                    keepalives_count=3,
                )
            except (psycopg.Error, OSError) as exc:
                log.warning(
                    "cannot listen for other engines' signals (%s); retrying in %.1f s",
                    storage_error(exc).message,
                    delay,
                )
                self._listening.set()  # watch() returns; followers poll meanwhile
            else:
                try:
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
                    self._listening.set()
                    delay = self._reconnect_delay
                    async for notify in conn.notifies():
                        signal = decode_signal(notify.payload)
                        if signal is not None:
                            self._deliver(signal)
                except (psycopg.Error, OSError) as exc:
                    if self._closed:
                        return
                    log.warning(
                        "lost the connection listening for other engines' signals (%s);"
                        " reconnecting in %.1f s",
                        storage_error(exc, connected=True).message,
                        delay,
                    )
                finally:
                    with suppress(psycopg.Error, OSError):
                        await conn.close()
            if self._closed:
                return
            await asyncio.sleep(delay * (0.8 + 0.4 * random.random()))
            delay = min(delay * 2, self._max_reconnect_delay)

    def _deliver(self, signal: Signal) -> None:
        for watcher in list(self._watchers):
            try:
                watcher(signal)
            except Exception:
                log.exception("a signal watcher failed")

    async def close(self) -> None:
        """Stop listening and forget the watchers."""
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with suppress(asyncio.CancelledError):
                await listener
        self._watchers.clear()
