"""Runs that outlive their engine on a PostgreSQL store shared by several: expired runs
claimed by one replica each, leases renewed for the runs of the replica that holds them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from engine_service.core.models import RunStatus
from engine_service.core.store import Lease
from engine_service.stores.postgres import PostgresSessionStore

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def test_two_stores_claiming_expired_runs_claim_each_run_once(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two
    for i in range(30):
        await a.begin_run(f"s{i:02}", f"r{i}", at(0), create=True, lease=Lease("dead", at(10)))
    await a.begin_run("live", "rl", at(0), create=True, lease=Lease("alive", at(1000)))

    claimants = [(a, "A"), (b, "B")] * 3
    claims = await asyncio.gather(
        *(store.claim_expired_runs(name, at(100), at(200)) for store, name in claimants)
    )

    ids = [run.id for claim in claims for run in claim]
    assert sorted(ids) == sorted(f"r{i}" for i in range(30))
    for claim, (_, name) in zip(claims, claimants, strict=True):
        assert all((r.replica, r.lease_until) == (name, at(200)) for r in claim)
        assert [r.session_id for r in claim] == sorted(r.session_id for r in claim)
    stored = {r.id: r.replica for r in await a.running_runs()}
    assert stored["rl"] == "alive"
    assert all(stored[r.id] == n for c, (_, n) in zip(claims, claimants, strict=True) for r in c)
    assert await a.claim_expired_runs("C", at(150), at(300)) == []


async def test_leases_are_renewed_for_the_replicas_running_runs_only(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two
    await a.begin_run("s1", "r1", at(0), create=True, lease=Lease("A", at(10)))
    await a.begin_run("s2", "r2", at(0), create=True, lease=Lease("A", at(10)))
    await b.begin_run("s3", "r3", at(0), create=True, lease=Lease("B", at(10)))
    await a.finish_run("s2", "r2", RunStatus.SUCCEEDED, at(1))

    assert await b.renew_leases("A", at(50)) == 1

    run = await b.get_run("s1", "r1")
    assert (run.replica, run.lease_until) == ("A", at(50))
    assert (await a.get_run("s3", "r3")).lease_until == at(10)
    assert [r.id for r in await a.claim_expired_runs("B", at(20), at(90))] == ["r3"]
