"""``core.leases``: a run whose take-over failed, resume and close alike, is taken over
again at the next ticks of the replica that claimed it, until it ends; the conversation
then takes a new run.

A memory store shared by "replicas" B and C holds a run whose replica died; a store outage
begins right after B claims it, so B's take-over and its fallback close both fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from engine_service.core.clock import utc_now
from engine_service.core.deliveries import Delivery
from engine_service.core.errors import StorageUnavailable
from engine_service.core.leases import LeaseKeeper
from engine_service.core.limits import EngineLimits
from engine_service.core.models import RunRecord, RunStatus
from engine_service.core.store import Lease
from engine_service.core.takeover import TakeOver
from engine_service.stores.memory import MemorySessionStore


class _Outage(MemorySessionStore):
    """A shared memory store whose reads of runs fail while ``down``, from the moment a
    claim takes a run; ``refused`` counts the reads it refused."""

    def __init__(self) -> None:
        super().__init__(shared=True)
        self.down = False
        self.refused = 0
        self.claims = 0

    def _up(self) -> None:
        if self.down:
            self.refused += 1
            raise StorageUnavailable("the store is down")

    async def kept_input(self, *args: Any, **kwargs: Any) -> str:
        self._up()
        return await super().kept_input(*args, **kwargs)

    async def get_run(self, *args: Any, **kwargs: Any) -> RunRecord:
        self._up()
        return await super().get_run(*args, **kwargs)

    async def read_events(self, *args: Any, **kwargs: Any) -> Any:
        self._up()
        return await super().read_events(*args, **kwargs)

    async def claim_expired_runs(self, *args: Any, **kwargs: Any) -> list[RunRecord]:
        claimed = await super().claim_expired_runs(*args, **kwargs)
        if claimed:
            self.claims += 1
            self.down = self.down or self.claims == 1  # the outage begins at the first
        return claimed


class _Keeper:
    """Replica ``replica``'s lease keeper on ``store``, its take-overs closing runs
    (``resume_runs`` off) and counted in ``taken``."""

    def __init__(self, store: MemorySessionStore, replica: str) -> None:
        self.taken = 0

        async def deliveries(*closed: object) -> Sequence[Delivery]:
            return ()

        take = TakeOver(
            store,
            EngineLimits(resume_runs=False),
            is_engine_tool=lambda name: False,
            launch=lambda resumed: None,
            deliveries=deliveries,
            stored=lambda: None,
            tools_settled=lambda: None,
            event_limit=lambda: 1_000_000,
            replica=replica,
        )

        async def take_over(run: RunRecord) -> None:
            self.taken += 1
            await take(run)

        self.leases = LeaseKeeper(
            store,
            replica,
            30.0,
            is_local=lambda session_id: False,
            on_lost=lambda: None,
            take_over=take_over,
        )

    async def tick(self) -> list[RunRecord]:
        """One tick, its take-overs done."""
        taken = await self.leases.tick()
        await self.leases.stop()  # waits for the take-overs (no loop was started)
        return taken


async def _left_by_a_dead_replica() -> _Outage:
    store = _Outage()
    lapsed = Lease("dead", utc_now() - timedelta(seconds=60))
    await store.begin_run("s", "r", utc_now(), create=True, lease=lapsed)
    return store


async def test_a_run_whose_take_over_and_close_failed_is_taken_over_again_until_it_ends() -> None:
    store = await _left_by_a_dead_replica()
    b, c = _Keeper(store, "B"), _Keeper(store, "C")

    assert [run.id for run in await b.tick()] == ["r"]  # claimed; the store goes down
    assert b.taken == 1 and store.refused > 0
    for _ in range(3):  # B tries again once a tick, not more, while the store is down
        refused = store.refused
        assert [run.id for run in await b.tick()] == ["r"]
        assert store.refused == refused + 1  # one read of the run, refused
    assert await c.tick() == []  # B still holds it: no other replica takes it too

    store.down = False
    assert [run.id for run in await b.tick()] == ["r"]
    run = await store.get_run("s", "r")
    assert run.status is RunStatus.INTERRUPTED and b.taken == 2
    assert await b.tick() == [] and await c.tick() == [] and b.taken == 2
    begun = await store.begin_run("s", "r2", utc_now(), create=False)  # not busy
    assert begun.session.active_run_id == "r2"


async def test_a_failed_take_over_is_not_tried_again_once_its_run_is_gone() -> None:
    """The run's rows were removed from the store meanwhile (by hand: a conversation with
    a run RUNNING cannot be deleted)."""
    store = await _left_by_a_dead_replica()
    b = _Keeper(store, "B")
    await b.tick()  # claimed; its take-over fails
    store.down = False
    del store._sessions["s"]

    assert [run.id for run in await b.tick()] == ["r"]  # tried again: found gone
    assert await b.tick() == []
    assert b.taken == 1


async def test_a_failed_take_over_is_not_tried_again_once_another_replica_holds_the_run() -> None:
    """B's renewals failed for a whole lease meanwhile: C claimed and closed the run."""
    store = await _left_by_a_dead_replica()
    b, c = _Keeper(store, "B"), _Keeper(store, "C")
    await b.tick()  # claimed; its take-over fails
    store.down = False
    gone = utc_now() - timedelta(seconds=1)
    await store.renew_leases("B", gone)  # B's lease lapsed
    assert [run.id for run in await c.tick()] == ["r"] and c.taken == 1
    assert (await store.get_run("s", "r")).status is RunStatus.INTERRUPTED

    assert [run.id for run in await b.tick()] == ["r"]  # tried again: found closed
    assert b.taken == 1
    assert await b.tick() == []
