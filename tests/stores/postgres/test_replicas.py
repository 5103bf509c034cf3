"""Runs that outlive their engine on a PostgreSQL store shared by several: expired runs
claimed by one replica each, leases renewed for the runs of the replica that holds them."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from engine_service.core import events as ev
from engine_service.core.errors import InvalidInput
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.core.store import Lease, RunHold
from engine_service.stores.postgres import PostgresSessionStore
from engine_service.stores.postgres.replicas import CLAIM_EXPIRED

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


async def _waiting_for_a_lock(conn: psycopg.AsyncConnection[tuple[Any, ...]]) -> bool:
    cursor = await conn.execute(
        "SELECT count(*) > 0 FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    row = await cursor.fetchone()
    return bool(row and row[0])


def _late_write(store: PostgresSessionStore, write: str) -> Awaitable[None]:
    """A write of run r1 by replica A, which stalled past its lease."""
    late = Message("late", Role.ASSISTANT, [TextPart("stale")], created_at=at(1), run_id="r1")
    hold = RunHold("r1", "A")
    if write == "messages with events":
        ended = ev.Event(1, 1.0, "s1", "r1", ev.TextMessageEnd("late"))
        return store.append_messages_and_events("s1", [late], [ended], hold=hold)
    if write == "messages":
        return store.append_messages("s1", [late], hold=hold)
    return store.set_state("s1", {"late": True}, hold=hold)


@pytest.mark.parametrize("write", ["messages with events", "messages", "state"])
async def test_a_runs_write_during_a_claim_of_the_run_waits_for_it_and_stores_nothing(
    two: tuple[PostgresSessionStore, PostgresSessionStore], pg_url: str, write: str
) -> None:
    """A stalled replica wakes while another is claiming its run: its write waits for the
    claim's transaction, then finds the run taken (the session's last seq moved past the
    run's reserved seqs, the run leased to another) and stores nothing: the run's history
    is what the claimer read."""
    a, _ = two
    await a.begin_run("s1", "r1", at(0), create=True, reserve=10, lease=Lease("A", at(10)))
    async with (
        await psycopg.AsyncConnection.connect(pg_url) as claimer,
        await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as watcher,
    ):
        claim = {"replica": "B", "now": at(20), "until": at(30)}
        claimed = await (await claimer.execute(CLAIM_EXPIRED, claim)).fetchall()
        assert len(claimed) == 1  # and not committed yet
        late = asyncio.ensure_future(_late_write(a, write))
        deadline = asyncio.get_running_loop().time() + 10
        while not await _waiting_for_a_lock(watcher):
            assert asyncio.get_running_loop().time() < deadline, "the write never waited"
            assert not late.done(), late
            await asyncio.sleep(0.01)
        await claimer.commit()

    with pytest.raises(InvalidInput):
        await late
    session = await a.get_session("s1")
    assert (await a.all_messages("s1"), session.last_seq, session.state) == ([], 10, None)


async def test_a_run_whose_session_a_write_is_storing_into_is_claimed_once_it_committed(
    two: tuple[PostgresSessionStore, PostgresSessionStore], pg_url: str
) -> None:
    """The other way round: a claim never waits for a write in flight (a stalled replica's
    transaction would hold it up), nor takes the run under it: the run is claimed at the
    next tick, and the claimer then reads what the write stored."""
    a, b = two
    await a.begin_run("s1", "r1", at(0), create=True, reserve=10, lease=Lease("A", at(10)))
    async with await psycopg.AsyncConnection.connect(pg_url) as writer:
        await writer.execute("SELECT 1 FROM sessions WHERE id = 's1' FOR UPDATE")
        assert await b.claim_expired_runs("B", at(20), at(30)) == []
        await writer.commit()
    assert [r.id for r in await b.claim_expired_runs("B", at(20), at(30))] == ["r1"]
