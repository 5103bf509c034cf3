"""Run leases: how engines sharing one store hold their runs and take over a dead one's.

Every RUNNING run is leased to the replica that runs it. The :class:`LeaseKeeper` of each
replica renews its leases every third of the lease time, and claims the runs whose lease
expired — their replica died (kill -9, a lost host) — and hands each to ``take_over``:
the engine resumes it from its last checkpoint (``core.resume``), or closes it as the
single-engine restart would, stored as interrupted with what it had said
(``close_abandoned_run``), its followers ending on the terminal event. A replica that
restarts gets a new id, so it never touches runs whose lease is alive: their owner is
alive.

Each tick also notes the replica alive (``note_alive``) until its leases' end: a stopping
replica hands its runs over only when another is alive to take them (``others_alive``).

A replica whose renewals fail for a whole lease time stops its own runs (``on_lost``):
another replica may already be closing them.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from engine_service.core.clock import utc_now
from engine_service.core.errors import StorageUnavailable
from engine_service.core.models import RunRecord
from engine_service.core.recovery import close_abandoned_run
from engine_service.core.store import Lease, SessionStore

__all__ = ["LeaseKeeper", "new_replica_id"]

log = logging.getLogger(__name__)


def new_replica_id() -> str:
    return uuid.uuid4().hex


class LeaseKeeper:
    """Renews this replica's leases and closes the runs of replicas that died."""

    def __init__(
        self,
        store: SessionStore,
        replica: str,
        seconds: float,
        *,
        is_local: Callable[[str], bool],
        on_lost: Callable[[], None],
        max_event_bytes: int = 1024 * 1024,
        take_over: Callable[[RunRecord], Awaitable[None]] | None = None,
    ) -> None:
        """``take_over`` gets each claimed run (default: close it as interrupted)."""
        self._take_over = take_over
        self._taking: set[asyncio.Task[None]] = set()
        """Take-overs in flight: each its own task, so renewals never wait for them (a
        lease kept by a slow tick would lapse, and a third replica claim the run too)."""
        self.store = store
        self.max_event_bytes = max_event_bytes
        """What a closed run's partial answer is clipped to (``close_abandoned_run``)."""
        self.replica = replica
        self.seconds = seconds
        self._is_local = is_local
        self._on_lost = on_lost
        self._renewed = utc_now()
        self._task: asyncio.Task[None] | None = None

    def lease(self) -> Lease:
        """A fresh lease for a run this replica starts."""
        return Lease(self.replica, utc_now() + timedelta(seconds=self.seconds))

    def start(self) -> None:
        self._renewed = utc_now()
        self._task = asyncio.get_running_loop().create_task(self._keep())

    async def stop(self) -> None:
        """Stop renewing and claiming (waiting at most a lease time: a store call being
        cancelled may linger)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=self.seconds)
        if self._taking:
            await asyncio.wait(self._taking, timeout=self.seconds)

    async def others_alive(self) -> list[str]:
        """The other replicas alive now (renewing their leases), who could take runs over;
        none when the store cannot say."""
        try:
            alive = await self.store.replicas_alive(utc_now())
        except StorageUnavailable as exc:
            log.error("%s; no other replica known alive", exc.message)
            return []
        return [replica for replica in alive if replica != self.replica]

    async def release(self) -> None:
        """Release this replica's leases and say it is gone: the others claim its runs at
        their next tick, and no longer count it alive."""
        gone = utc_now() - timedelta(seconds=1)
        await self.store.renew_leases(self.replica, gone)
        await self.store.note_alive(self.replica, gone)

    async def leave(self) -> None:
        """Stop, and say this replica is gone (its leases released): a shutdown."""
        await self.stop()
        try:
            await self.release()
        except StorageUnavailable as exc:
            log.error("could not note this replica gone: %s", exc.message)

    async def _take(
        self, run: RunRecord, take_over: Callable[[RunRecord], Awaitable[None]]
    ) -> None:
        try:
            await take_over(run)  # closes the run itself when its resume fails
        except Exception:
            log.exception("run %s could not be taken over, nor closed", run.id)

    async def _keep(self) -> None:
        while True:
            try:
                await self.tick()
            except StorageUnavailable as exc:
                if (utc_now() - self._renewed).total_seconds() > self.seconds:
                    log.error("%s; this replica's leases lapsed: stopping its runs", exc.message)
                    self._on_lost()
            except Exception:
                log.exception("lease keeping failed; trying again")
            await asyncio.sleep(self.seconds / 3)

    async def tick(self) -> list[RunRecord]:
        """Renew, then take over expired runs; returns each run taken over."""
        now = utc_now()
        until = now + timedelta(seconds=self.seconds)
        await self.store.renew_leases(self.replica, until)
        await self.store.note_alive(self.replica, until)
        self._renewed = now
        closed = []
        for run in await self.store.claim_expired_runs(self.replica, now, until):
            if self._is_local(run.session_id):
                continue  # ours: a renewal raced the expiry; the run goes on
            if self._take_over is not None:
                task = asyncio.get_running_loop().create_task(self._take(run, self._take_over))
                self._taking.add(task)
                task.add_done_callback(self._taking.discard)
            else:
                await close_abandoned_run(
                    self.store, run, utc_now(), max_event_bytes=self.max_event_bytes
                )
                log.warning(
                    "run %s of session %s lost its engine (lease expired); stored as "
                    "interrupted with what it had said",
                    run.id,
                    run.session_id,
                )
            closed.append(run)
        return closed
