"""The delivery outbox in every store: add, claim under a lease, settle, list the failed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery, DeliveryStatus, PushConfig
from engine_service.core.errors import InvalidInput, SessionNotFound
from engine_service.core.models import RunStatus
from engine_service.core.recovery import EndDeliveries, RunClosed, close_abandoned_run
from engine_service.core.store import Lease, RunHold, SessionStore
from engine_service.stores.postgres import PostgresSessionStore

T0 = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def delivery(delivery_id: str, due: float = 0.0) -> Delivery:
    return Delivery(
        id=delivery_id,
        url="https://hooks.example.com/in",
        payload='{"a": 1}',
        created_at=T0,
        next_attempt_at=at(due),
        headers={"Authorization": "Bearer t"},
        kind="a2a",
    )


def of_session(session_id: str, made: Delivery) -> Delivery:
    return replace(made, session_id=session_id)


async def test_an_added_delivery_reads_back_whole_and_adding_it_again_changes_nothing(
    store: SessionStore,
) -> None:
    await store.add_delivery(delivery("d1"))
    again = delivery("d1")
    again.url = "https://other.example.com/"
    await store.add_delivery(again)
    got = await store.get_delivery("d1")
    assert got == delivery("d1")
    assert await store.get_delivery("nope") is None


async def test_claims_take_due_deliveries_once_until_the_lease_ends(store: SessionStore) -> None:
    for name, due in (("late", 60.0), ("b", 2.0), ("a", 1.0)):
        await store.add_delivery(delivery(name, due))
    first = await store.claim_deliveries("r1", at(10), at(40), 10)
    assert [d.id for d in first] == ["a", "b"]
    assert await store.claim_deliveries("r2", at(20), at(50), 10) == []  # leased to r1
    again = await store.claim_deliveries("r2", at(45), at(80), 1)  # r1's lease ended
    assert [d.id for d in again] == ["a"]


async def test_settling_stores_the_outcome_and_ends_the_lease(store: SessionStore) -> None:
    await store.add_delivery(delivery("d1"))
    (claimed,) = await store.claim_deliveries("r1", at(1), at(100), 5)
    claimed.last_error, claimed.next_attempt_at = "HTTP 503", at(30)
    assert await store.settle_delivery("r1", claimed, at(2))
    assert await store.claim_deliveries("r2", at(10), at(50), 5) == []  # not due yet
    (retried,) = await store.claim_deliveries("r2", at(31), at(60), 5)  # lease gone too
    assert (retried.attempts, retried.last_error, retried.updated_at) == (2, "HTTP 503", at(2))
    retried.status = DeliveryStatus.DELIVERED
    assert await store.settle_delivery("r2", retried, at(32))
    assert await store.claim_deliveries("r2", at(1000), at(2000), 5) == []
    got = await store.get_delivery("d1")
    assert got is not None and got.status is DeliveryStatus.DELIVERED


async def test_each_claim_counts_its_attempt_even_one_never_settled(store: SessionStore) -> None:
    """An attempt counts once claimed: one cut short by a crash (claimed, never settled)
    counts too, so the next claimer sees how many were made."""
    await store.add_delivery(delivery("d1"))
    (first,) = await store.claim_deliveries("r1", at(1), at(10), 5)
    (second,) = await store.claim_deliveries("r2", at(11), at(20), 5)  # r1 died mid-attempt
    assert (first.attempts, second.attempts) == (1, 2)
    stored = await store.get_delivery("d1")
    assert stored is not None and stored.attempts == 2


async def test_only_the_replica_holding_a_delivery_settles_it(store: SessionStore) -> None:
    """A replica that stalled mid-attempt, its lease lapsed and the delivery claimed and
    settled by another, stores nothing of its late outcome."""
    await store.add_delivery(delivery("d1"))
    (stale,) = await store.claim_deliveries("r1", at(1), at(10), 5)
    (taken,) = await store.claim_deliveries("r2", at(11), at(40), 5)
    taken.status = DeliveryStatus.DELIVERED
    assert await store.settle_delivery("r2", taken, at(12))
    stale.last_error, stale.next_attempt_at = "timed out", at(60)

    assert not await store.settle_delivery("r1", stale, at(13))
    assert not await store.settle_delivery("r2", taken, at(14))  # settled: held by nobody

    got = await store.get_delivery("d1")
    assert got is not None
    assert (got.status, got.attempts, got.last_error, got.updated_at) == (
        DeliveryStatus.DELIVERED,
        2,
        "",
        at(12),
    )


async def test_failed_deliveries_are_kept_and_listed_newest_first(store: SessionStore) -> None:
    for index in range(3):
        await store.add_delivery(delivery(f"f{index}"))
    for index, claimed in enumerate(await store.claim_deliveries("r", at(1), at(9), 0)):
        claimed.status, claimed.attempts, claimed.last_error = DeliveryStatus.FAILED, 8, "down"
        await store.settle_delivery("r", claimed, at(index + 2))
    page, total = await store.failed_deliveries(0, 2)
    assert ([d.id for d in page], total) == (["f2", "f1"], 3)
    rest, _ = await store.failed_deliveries(2, 0)
    assert [d.id for d in rest] == ["f0"]
    assert rest[0].headers == {"Authorization": "Bearer t"}
    with pytest.raises(InvalidInput):
        await store.failed_deliveries(-1, 1)


@pytest.fixture
async def two(pg_url: str) -> AsyncIterator[tuple[PostgresSessionStore, PostgresSessionStore]]:
    a, b = PostgresSessionStore(pg_url), PostgresSessionStore(pg_url)
    await a.open()
    await b.open()
    yield a, b
    await a.close()
    await b.close()


async def test_two_replicas_claiming_at_once_never_take_the_same_delivery(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two
    for index in range(40):
        await a.add_delivery(delivery(f"d{index:02}"))
    taken: list[str] = []
    for _ in range(5):
        got = await asyncio.gather(
            a.claim_deliveries("ra", at(1), at(100), 5), b.claim_deliveries("rb", at(1), at(100), 5)
        )
        taken += [d.id for batch in got for d in batch]
    assert sorted(taken) == [f"d{index:02}" for index in range(40)]


def push(config_id: str, task_id: str = "t1", session_id: str = "s1") -> PushConfig:
    return PushConfig(
        config_id,
        task_id,
        session_id,
        f"https://hooks.example.com/{config_id}",
        T0,
        "tok",
        "Bearer",
        "c",
    )


async def test_push_configs_are_kept_per_task_bounded_and_go_with_their_session(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", T0)
    await store.add_push_config(push("a"), 2)
    await store.add_push_config(push("b"), 2)
    with pytest.raises(InvalidInput, match="the task has 2 push notification configs"):
        await store.add_push_config(push("c"), 2)
    replaced = replace(push("a"), url="https://hooks.example.com/new")
    await store.add_push_config(replaced, 2)  # the same id replaces, within the bound
    assert [c.id for c in await store.push_configs("t1")] == ["b", "a"]
    assert (await store.push_configs("t1"))[1] == replaced
    assert await store.push_configs("t2") == []
    assert [c.id for c in await store.session_push_configs("s1")] == ["b", "a"]
    assert await store.delete_push_config("t1", "b")
    assert not await store.delete_push_config("t1", "b")
    await store.delete_session("s1")
    assert await store.push_configs("t1") == []
    with pytest.raises(SessionNotFound):
        await store.add_push_config(push("x"), 2)


async def test_retention_prunes_delivered_deliveries_and_keeps_failed_ones(
    store: SessionStore,
) -> None:
    for name in ("done", "failed", "pending"):
        await store.add_delivery(delivery(name))
    claimed = {d.id: d for d in await store.claim_deliveries("r", at(1), at(9), 0)}
    claimed["done"].status = DeliveryStatus.DELIVERED
    claimed["failed"].status = DeliveryStatus.FAILED
    for name in ("done", "failed"):
        await store.settle_delivery("r", claimed[name], at(2))
    await store.prune_events(at(1))  # before they were settled: nothing goes
    assert await store.get_delivery("done") is not None
    await store.prune_events(at(3))
    assert await store.get_delivery("done") is None
    assert await store.get_delivery("failed") is not None
    assert await store.get_delivery("pending") is not None


async def test_a_run_s_webhook_is_stored_with_its_end_and_only_when_it_ends_there(
    store: SessionStore,
) -> None:
    """The outbox row of a run's webhook goes in ``finish_run``'s transaction: no crash
    between the two can lose it. A run already ended, or no longer this replica's, adds
    none (its end is not written here)."""
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1), deliveries=[delivery("run_r1")])
    assert await store.get_delivery("run_r1") == of_session("s1", delivery("run_r1"))
    await store.finish_run("s1", "r1", RunStatus.FAILED, at(2), deliveries=[delivery("run_r1.x")])
    assert await store.get_delivery("run_r1.x") is None  # ended before: nothing written

    await store.begin_run("s1", "r2", at(3), create=False)
    with pytest.raises(InvalidInput):
        await store.finish_run(
            "s1",
            "r2",
            RunStatus.SUCCEEDED,
            at(4),
            hold=RunHold("r2", "another replica"),
            deliveries=[delivery("run_r2")],
        )
    assert await store.get_delivery("run_r2") is None
    await store.finish_run("s1", "r2", RunStatus.SUCCEEDED, at(5), deliveries=[delivery("run_r2")])
    assert await store.get_delivery("run_r2") == of_session("s1", delivery("run_r2"))


async def test_a_run_s_end_and_the_rows_of_its_webhooks_are_stored_together_or_not_at_all(
    store: SessionStore,
) -> None:
    """Several rows (its webhook, its A2A push updates) go with a run's end; a write that
    does not end the run (another replica's, or a run ended already) adds none of them."""
    rows = [delivery("run_r1.x"), delivery("push_1"), delivery("push_2")]
    await store.begin_run("s1", "r1", at(0), create=True, lease=Lease("a", at(60)))
    with pytest.raises(InvalidInput):
        await store.finish_run(
            "s1", "r1", RunStatus.SUCCEEDED, at(1), hold=RunHold("r1", "b"), deliveries=rows
        )
    assert [await store.get_delivery(d.id) for d in rows] == [None, None, None]
    await store.finish_run(
        "s1", "r1", RunStatus.SUCCEEDED, at(2), hold=RunHold("r1", "a"), deliveries=rows
    )
    assert [await store.get_delivery(d.id) for d in rows] == [of_session("s1", d) for d in rows]


def _closing_rows(tag: str, seen: list[RunClosed]) -> EndDeliveries:
    """What an engine stores with a close: the run's webhook, payload ``tag``."""

    async def rows(closed: RunClosed) -> list[Delivery]:
        seen.append(closed)
        return [replace(delivery("run_r1.x"), payload=f'{{"by": "{tag}"}}'), delivery("push_1")]

    return rows


async def test_closing_a_run_its_engine_left_stores_its_end_with_its_webhooks_or_neither(
    store: SessionStore,
) -> None:
    """Replica "a" died mid-run; "b" claimed the run and stalled past its lease, and "c"
    claimed it in turn. b's close, late, writes nothing: no end, no closing event, no
    outbox row. c's close stores the run's end with the rows of its webhooks in one write,
    made from how it ended; a close again adds nothing, and the rows stay as first stored."""
    await store.begin_run("s1", "r1", at(0), create=True, reserve=8, lease=Lease("a", at(5)))
    (by_b,) = await store.claim_expired_runs("b", at(10), at(15))
    (by_c,) = await store.claim_expired_runs("c", at(20), at(25))
    seen: list[RunClosed] = []

    with pytest.raises(InvalidInput):
        await close_abandoned_run(store, by_b, at(30), deliveries=_closing_rows("b", seen))
    assert await store.get_delivery("run_r1.x") is None
    assert await store.get_delivery("push_1") is None
    assert (await store.get_run("s1", "r1")).status is RunStatus.RUNNING
    assert await store.read_events("s1", 0, 0) == []

    closed = await close_abandoned_run(store, by_c, at(31), deliveries=_closing_rows("c", seen))
    assert isinstance(closed.final, ev.RunFinished)
    assert closed.final.outcome is ev.Outcome.CANCELLED
    assert seen[-1] is closed  # the rows are made from the end that is stored
    assert (await store.get_run("s1", "r1")).status is RunStatus.INTERRUPTED
    webhook = await store.get_delivery("run_r1.x")
    assert webhook is not None and webhook.payload == '{"by": "c"}'
    assert await store.get_delivery("push_1") == of_session("s1", delivery("push_1"))
    stored = await store.read_events("s1", 0, 0)
    assert isinstance(stored[-1].body, ev.RunFinished)

    with pytest.raises(InvalidInput):
        await close_abandoned_run(store, by_c, at(32), deliveries=_closing_rows("again", seen))
    webhook = await store.get_delivery("run_r1.x")
    assert webhook is not None and webhook.payload == '{"by": "c"}'
    assert await store.read_events("s1", 0, 0) == stored


async def settle_as(store: SessionStore, status: DeliveryStatus, *ids: str) -> None:
    """Claim the deliveries ``ids`` (all due) and settle each with ``status``."""
    for claimed in await store.claim_deliveries("r", at(1), at(9), 0):
        if claimed.id in ids:
            claimed.status = status
            assert await store.settle_delivery("r", claimed, at(2))


async def test_deleting_a_conversation_deletes_its_deliveries_and_only_its(
    store: SessionStore,
) -> None:
    """Pending, failed and delivered: none is POSTed or listed after the delete. Another
    conversation's and one of none stay."""
    for session_id in ("s1", "s2"):
        await store.create_session(session_id, "", T0)
    await store.begin_run("s1", "r1", at(0), create=False)
    for name in ("pending", "failed", "delivered"):
        await store.add_delivery(of_session("s1", delivery(name)))
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1), deliveries=[delivery("run_r1")])
    await store.add_delivery(of_session("s2", delivery("other")))
    await store.add_delivery(delivery("loose"))
    await settle_as(store, DeliveryStatus.FAILED, "failed")
    await settle_as(store, DeliveryStatus.DELIVERED, "delivered")

    await store.delete_session("s1")

    for name in ("pending", "failed", "delivered", "run_r1"):
        assert await store.get_delivery(name) is None, name
    assert await store.failed_deliveries(0, 0) == ([], 0)
    due = await store.claim_deliveries("r", at(100), at(200), 0)
    assert sorted(d.id for d in due) == ["loose", "other"]
    kept = await store.get_delivery("other")
    assert kept is not None and kept.session_id == "s2"


async def test_a_delivery_attempted_while_its_conversation_is_deleted_is_not_put_back(
    store: SessionStore,
) -> None:
    """The deliverer's outcome of an attempt made as the delete came finds no row: it
    stores nothing (False, as for a delivery another replica took over), brings nothing
    back and raises nothing."""
    await store.create_session("s1", "", T0)
    await store.add_delivery(of_session("s1", delivery("d1")))
    (claimed,) = await store.claim_deliveries("r1", at(1), at(100), 5)
    await store.delete_session("s1")
    claimed.last_error, claimed.next_attempt_at = "HTTP 503", at(30)
    assert not await store.settle_delivery("r1", claimed, at(2))
    assert await store.get_delivery("d1") is None
    assert await store.claim_deliveries("r2", at(1000), at(2000), 5) == []


async def test_a_delivery_of_a_conversation_that_is_gone_is_not_added(
    store: SessionStore,
) -> None:
    """A run's A2A push update of its start is written just after the run begins: a
    conversation deleted in between gets none back, and a conversation made again under
    its id does not inherit them."""
    await store.create_session("s1", "", T0)
    await store.delete_session("s1")
    await store.add_delivery(of_session("s1", delivery("late")))
    await store.add_delivery(of_session("never", delivery("stray")))
    assert await store.get_delivery("late") is None
    assert await store.get_delivery("stray") is None
    await store.create_session("s1", "", at(5))
    assert await store.claim_deliveries("r", at(100), at(200), 0) == []


async def test_deliveries_added_while_their_conversation_is_deleted_never_outlive_it(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    """Two replicas: one adds a conversation's delivery as the other deletes the
    conversation. Whichever goes first, nothing is left over and neither fails (a
    delivery inserted under the delete's feet would be an orphan, or break the foreign
    key)."""
    a, b = two
    for index in range(30):
        session_id = f"s{index}"
        await a.create_session(session_id, "", T0)
        await asyncio.gather(
            a.add_delivery(of_session(session_id, delivery(f"d{index}"))),
            b.delete_session(session_id),
        )
    assert await a.claim_deliveries("r", at(100), at(200), 0) == []


async def test_a_run_s_end_whose_events_are_refused_adds_none_of_its_webhooks(
    store: SessionStore,
) -> None:
    """Closing events whose seqs do not follow the stored ones refuse the whole end: the
    run stays RUNNING and no outbox row is added."""
    await store.begin_run("s1", "r1", at(0), create=True)
    first = ev.Event(1, 1_700_000_000.0, "s1", "r1", ev.RunStarted())
    await store.append_events("s1", [first])
    again = ev.Event(1, 1_700_000_001.0, "s1", "r1", ev.RunFinished())  # seq 1 is taken
    with pytest.raises(InvalidInput):
        await store.finish_run(
            "s1", "r1", RunStatus.SUCCEEDED, at(1), events=[again], deliveries=[delivery("run_r1")]
        )
    assert await store.get_delivery("run_r1") is None
    assert (await store.get_run("s1", "r1")).status is RunStatus.RUNNING
    assert (await store.get_session("s1")).active_run_id == "r1"
