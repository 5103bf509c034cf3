"""Storage health and retention: whether the store writes, and how long events stay.

A failed write marks the store unhealthy (``failed``): the engine refuses runs, a probe
writes every ``STORAGE_PROBE_INTERVAL`` seconds, and once one succeeds ``on_writable``
stores what waited; the store is healthy again when that succeeds too. Listeners hear of
each change (the health service, the metrics).

One job, callbacks instead of imports (as ``core.leases``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TypeVar

from engine_service.core.clock import utc_now
from engine_service.core.errors import StorageUnavailable
from engine_service.core.store import SessionStore

__all__ = ["StorageHealth", "prune_periodically"]

log = logging.getLogger(__name__)

STORAGE_PROBE_INTERVAL = 1.0
"""Seconds between write probes while the store fails."""

T = TypeVar("T")


class StorageHealth:
    """Whether the store writes; probes it while it does not."""

    def __init__(self, store: SessionStore, *, on_writable: Callable[[], Awaitable[None]]) -> None:
        """``on_writable`` runs once a probe wrote, before the store counts as healthy; it
        raises ``StorageUnavailable`` when the store fails again (the probe goes on)."""
        self.store = store
        self._on_writable = on_writable
        self._ok = True
        self._prober: asyncio.Task[None] | None = None
        self._listeners: list[Callable[[bool], None]] = []

    @property
    def ok(self) -> bool:
        """False from a failed write until a write probe succeeds again."""
        return self._ok

    def on_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ok)`` whenever the store starts or stops failing."""
        self._listeners.append(listener)

    def failed(self, exc: StorageUnavailable) -> None:
        """A write failed: unhealthy until a probe writes."""
        if self._ok:
            log.error("%s; runs fail until it writes again", exc.message)
            self._ok = False
            for listener in self._listeners:
                listener(False)
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe())

    async def writing(self, call: Awaitable[T]) -> T:
        """Await a store call; a storage failure marks the store unhealthy on its way out."""
        try:
            return await call
        except StorageUnavailable as exc:
            self.failed(exc)
            raise

    def stop(self) -> None:
        if self._prober is not None:
            self._prober.cancel()

    async def _probe(self) -> None:
        """Probe until the store writes, then store what waited and report healthy."""
        while True:
            await asyncio.sleep(STORAGE_PROBE_INTERVAL)
            try:
                await self.store.check_writable()
                await self._on_writable()
            except StorageUnavailable:
                continue
            break
        log.warning("the store writes again; runs are accepted")
        self._ok = True
        for listener in self._listeners:
            listener(True)


async def prune_periodically(store: SessionStore, retention: float) -> None:
    """Remove stored events older than ``retention`` seconds, every tenth of it (1 s to
    1 h), forever."""
    period = min(max(retention / 10, 1.0), 3600.0)
    while True:
        before = utc_now() - timedelta(seconds=retention)
        removed = await store.prune_events(before)
        if removed:
            log.info("event retention removed %d stored events", removed)
        await asyncio.sleep(period)
