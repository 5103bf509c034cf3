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

A run whose take-over failed, resume and close alike (a store outage right after the
claim), is left RUNNING and leased to this replica, which renews it with the others: no
replica would ever claim it again. It is taken over again at each tick (once a tick, the
last attempt done) until it ends; should this replica stop or die first, its lease is
released or lapses and another replica claims it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta

from engine_service.core.clock import utc_now
from engine_service.core.errors import RunNotFound, SessionNotFound, StorageUnavailable
from engine_service.core.models import RunRecord, RunStatus
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
        self._take_over = take_over if take_over is not None else self._close
        self._taking: set[asyncio.Task[None]] = set()
        """Take-overs in flight: each its own task, so renewals never wait for them (a
        lease kept by a slow tick would lapse, and a third replica claim the run too)."""
        self._failed: dict[tuple[str, str], RunRecord] = {}
        """Runs whose take-over failed, by session and run id: taken over again next tick."""
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

    async def _take(self, run: RunRecord, *, again: bool = False) -> None:
        """Take ``run`` over; ``again``: after a take-over of it failed, unless it ended,
        went with its conversation or was claimed by another replica meanwhile."""
        try:
            if again:
                try:
                    now = await self.store.get_run(run.session_id, run.id)
                except (SessionNotFound, RunNotFound):
                    return
                if now.status is not RunStatus.RUNNING or now.replica != self.replica:
                    return
                run = now
            await self._take_over(run)  # closes the run itself when its resume fails
        except Exception:
            # Perhaps still RUNNING here, renewed with this replica's leases: no other
            # replica claims it. Taken over again (or found ended) at the next tick.
            log.exception(
                "run %s could not be taken over, nor closed; trying again at the next tick", run.id
            )
            self._failed[run.session_id, run.id] = run

    async def _close(self, run: RunRecord) -> None:
        """The default take-over: close ``run`` as interrupted with what it had said."""
        await close_abandoned_run(self.store, run, utc_now(), max_event_bytes=self.max_event_bytes)
        log.warning(
            "run %s of session %s lost its engine (lease expired); stored as interrupted "
            "with what it had said",
            run.id,
            run.session_id,
        )

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
        """Renew, then take over expired runs, and again the runs whose take-over failed
        (each in a task of its own); returns each run taken over."""
        now = utc_now()
        until = now + timedelta(seconds=self.seconds)
        await self.store.renew_leases(self.replica, until)
        await self.store.note_alive(self.replica, until)
        self._renewed = now
        claimed = await self.store.claim_expired_runs(self.replica, now, until)
        runs = {key: (run, True) for key, run in self._failed.items()}
        self._failed.clear()
        # One whose lease lapsed meanwhile (renewals failed) is claimed again: taken once.
        runs.update({(run.session_id, run.id): (run, False) for run in claimed})
        taken = []
        for run, again in runs.values():
            if self._is_local(run.session_id):
                continue  # ours: a renewal raced the expiry; the run goes on
            task = asyncio.get_running_loop().create_task(self._take(run, again=again))
            self._taking.add(task)
            task.add_done_callback(self._taking.discard)
            taken.append(run)
        return taken
