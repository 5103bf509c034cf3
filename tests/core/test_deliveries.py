"""The delivery worker: retries with backoff until the receiver is back, gives up after
``max_attempts`` and keeps the delivery, and with two replicas makes each delivery once."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine_service.core.deliveries import (
    Delivery,
    DeliveryStatus,
    DeliveryWorker,
    RetryPolicy,
    SendResult,
)
from engine_service.core.errors import StorageUnavailable
from engine_service.core.store import SessionStore
from engine_service.stores import MemorySessionStore, SqliteSessionStore
from engine_service.stores.postgres import PostgresSessionStore
from engine_service.webhooks.sender import WebhookSender
from tests.engine.webhooks.receiver import Receiver
from tests.postgres_server import pg_database, pg_url

__all__ = ["pg_database", "pg_url"]

FAST = RetryPolicy(max_attempts=8, base_delay=0.05, max_delay=0.2)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def owed(delivery_id: str, url: str) -> Delivery:
    now = datetime.now(UTC)
    return Delivery(delivery_id, url, '{"n": 1}', now, now)


def worker(store: SessionStore, replica: str = "r1", **kwargs: object) -> DeliveryWorker:
    return DeliveryWorker(
        store,
        WebhookSender(allow_private=True, timeout=2.0),
        replica=replica,
        policy=kwargs.pop("policy", FAST),  # type: ignore[arg-type]
        poll_interval=kwargs.pop("poll_interval", 0.02),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


async def wait_until(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_delivery_made_while_the_receiver_is_down_is_retried_until_it_is_back(
    kind: str, tmp_path: Path
) -> None:
    store: SessionStore = (
        MemorySessionStore() if kind == "memory" else SqliteSessionStore(tmp_path / "a.db")
    )
    port = free_port()
    hook = Receiver(port)
    attempts: list[SendResult] = []
    made = worker(store, on_attempt=lambda d, r: attempts.append(r))
    made.start()
    try:
        await made.enqueue(owed("d1", hook.url))

        async def failed_twice() -> bool:
            return len(attempts) >= 2

        await wait_until(failed_twice)
        stored = await store.get_delivery("d1")
        assert stored is not None and stored.status is DeliveryStatus.PENDING
        assert stored.last_error == "connection refused"
        hook.start()  # the receiver comes back
        (got,) = await asyncio.to_thread(hook.wait_for, 1)

        async def delivered() -> bool:
            done = await store.get_delivery("d1")
            return done is not None and done.status is DeliveryStatus.DELIVERED

        await wait_until(delivered)
        assert got.headers["webhook-id"] == "d1"
        assert attempts[-1].ok and not any(r.ok for r in attempts[:-1])
    finally:
        await made.stop()
        hook.stop()
        await store.close()


async def test_after_max_attempts_the_delivery_is_kept_as_failed_and_reported() -> None:
    store = MemorySessionStore()
    failed: list[Delivery] = []
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02)
    made = worker(store, policy=policy, on_failed=failed.append)
    made.start()
    try:
        await made.enqueue(owed("d1", f"http://127.0.0.1:{free_port()}/"))

        async def gave_up() -> bool:
            return bool(failed)

        await wait_until(gave_up)
        page, total = await store.failed_deliveries(0, 10)
        assert total == 1
        assert (page[0].id, page[0].attempts, page[0].last_error) == (
            "d1",
            3,
            "connection refused",
        )
    finally:
        await made.stop()


async def test_a_refused_url_fails_at_once_without_retries() -> None:
    store = MemorySessionStore()
    failed: list[Delivery] = []
    made = DeliveryWorker(
        store,
        WebhookSender(allow_private=False),
        replica="r1",
        policy=FAST,
        poll_interval=0.02,
        on_failed=failed.append,
    )
    made.start()
    try:
        await made.enqueue(owed("d1", "https://10.0.0.1/hook"))

        async def gave_up() -> bool:
            return bool(failed)

        await wait_until(gave_up)
        assert (failed[0].attempts, failed[0].last_error) == (
            1,
            "the webhook URL's host is a private address",
        )
    finally:
        await made.stop()


async def test_a_delivery_whose_attempts_were_all_cut_short_fails_without_another_post() -> None:
    """Engines that died during each attempt (claimed, never settled): the attempts count,
    and the engine that finds them used up fails the delivery at once, with no POST more."""
    store = MemorySessionStore()
    hook = Receiver().start()
    failed: list[Delivery] = []
    policy = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02)
    await store.add_delivery(owed("d1", hook.url))
    lapsed = datetime.now(UTC) - timedelta(seconds=1)
    for _ in range(3):  # three engines claimed it, each died mid-attempt (its lease lapsed)
        await store.claim_deliveries("dead", datetime.now(UTC), lapsed, 1)
    made = worker(store, policy=policy, on_failed=failed.append)
    made.start()
    try:

        async def gave_up() -> bool:
            return bool(failed)

        await wait_until(gave_up)
        got = await store.get_delivery("d1")
        assert got is not None
        assert (got.status, got.attempts) == (DeliveryStatus.FAILED, 3)
        assert (
            got.last_error == "3 attempts made, the last cut short (the engine making it stopped)"
        )
        assert hook.received == []
    finally:
        await made.stop()
        hook.stop()


async def test_a_late_outcome_of_a_replica_whose_lease_lapsed_is_not_stored() -> None:
    """A replica stalled mid-attempt past its lease while another made the delivery: the
    stalled one's outcome (a failure, here) does not overwrite the other's."""
    store = MemorySessionStore()
    release = asyncio.Event()
    sending = asyncio.Event()
    reported: list[SendResult] = []

    async def stalled(delivery: Delivery) -> SendResult:
        sending.set()
        await release.wait()
        return SendResult(False, "timed out")

    async def answered(delivery: Delivery) -> SendResult:
        return SendResult(True)

    a = DeliveryWorker(
        store, stalled, replica="ra", lease_seconds=0.05, on_attempt=lambda d, r: reported.append(r)
    )
    b = DeliveryWorker(store, answered, replica="rb")
    await store.add_delivery(owed("d1", "https://hooks.example.com/in"))
    stale = asyncio.ensure_future(a.tick())
    try:
        await asyncio.wait_for(sending.wait(), 5)

        async def taken() -> bool:  # once a's lease lapsed
            return await b.tick() == 1

        await wait_until(taken)
        release.set()
        await asyncio.wait_for(stale, 5)
    finally:
        release.set()
        await asyncio.gather(stale, return_exceptions=True)
    got = await store.get_delivery("d1")
    assert got is not None
    assert (got.status, got.attempts, got.last_error) == (DeliveryStatus.DELIVERED, 2, "")
    assert reported == []


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("final", [False, True])
async def test_a_delivery_whose_conversation_is_deleted_during_its_attempt_is_gone_after_it(
    kind: str, final: bool, tmp_path: Path
) -> None:
    """The conversation is deleted while its webhook is being POSTed: the attempt's
    outcome (a retry, or a failure for good) finds nothing to store, puts nothing back,
    and the worker goes on with the next delivery."""
    store: SessionStore = (
        MemorySessionStore() if kind == "memory" else SqliteSessionStore(tmp_path / "a.db")
    )
    await store.create_session("s1", "", datetime.now(UTC))
    sent: list[str] = []
    failed: list[Delivery] = []

    async def deleting(delivery: Delivery) -> SendResult:
        sent.append(delivery.id)
        if delivery.id == "d1":
            await store.delete_session("s1")  # as the receiver is being told
            return SendResult(False, "HTTP 503", final=final)
        return SendResult(True)

    made = DeliveryWorker(
        store, deleting, replica="r1", policy=FAST, on_failed=failed.append, batch=1
    )
    first = owed("d1", "https://hooks.example.com/in")
    first.session_id = "s1"
    try:
        await store.add_delivery(first)
        assert await made.tick() == 1
        assert await store.get_delivery("d1") is None
        await store.add_delivery(owed("d2", "https://hooks.example.com/in"))
        assert await made.tick() == 1
        assert await made.tick() == 0  # nothing came back to be made again
        done = await store.get_delivery("d2")
        assert done is not None and done.status is DeliveryStatus.DELIVERED
        assert (sent, failed) == (["d1", "d2"], [])
    finally:
        await store.close()


def test_the_default_backoff_spreads_eight_attempts_over_about_an_hour() -> None:
    policy = RetryPolicy()
    waits = [policy.delay(n, rand=lambda: 0.5) for n in range(1, policy.max_attempts)]
    assert waits[0] == 30.0 and waits[1] == 60.0
    assert 55 * 60 <= sum(waits) <= 70 * 60
    low = sum(policy.delay(n, rand=lambda: 0.0) for n in range(1, 8))
    high = sum(policy.delay(n, rand=lambda: 1.0) for n in range(1, 8))
    assert (low, high) == (0.75 * sum(waits), 1.25 * sum(waits))
    assert policy.delay(40) == policy.max_delay


async def test_two_replicas_on_postgresql_deliver_each_delivery_once(pg_url: str) -> None:
    a, b = PostgresSessionStore(pg_url), PostgresSessionStore(pg_url)
    await a.open()
    await b.open()
    hook = Receiver().start()
    workers = [worker(a, "ra"), worker(b, "rb")]
    for each in workers:
        each.start()
    try:
        for index in range(30):
            await (a if index % 2 else b).add_delivery(owed(f"d{index:02}", hook.url))
        for each in workers:
            each.wake()
        got = await asyncio.to_thread(hook.wait_for, 30)
        await asyncio.sleep(0.3)  # any duplicate would have arrived by now
        ids = [r.headers["webhook-id"] for r in hook.received]
        assert sorted(ids) == [f"d{index:02}" for index in range(30)]
        assert len(got) == len(hook.received) == 30
    finally:
        for each in workers:
            await each.stop()
        hook.stop()
        await a.close()
        await b.close()


async def test_a_delivery_added_while_another_is_made_goes_at_once_not_at_the_next_poll() -> None:
    store = MemorySessionStore()
    hook = Receiver().start()
    hook.delay = 0.1  # each answer comes late: the next delivery is added meanwhile
    made = worker(store, poll_interval=30.0)
    made.start()
    try:
        async with asyncio.timeout(5):  # one missed wake would wait the 30 s poll
            for index in range(10):
                # Added as soon as the previous one arrived: while it is being made.
                await made.enqueue(owed(f"d{index}", hook.url))
                await asyncio.to_thread(hook.wait_for, index + 1, 5)
    finally:
        await made.stop()
        hook.stop()


class FailingClaims(MemorySessionStore):
    """A store whose claims fail while ``down`` (a full disk, a lost database)."""

    down = True

    async def claim_deliveries(
        self, replica: str, now: datetime, until: datetime, limit: int
    ) -> list[Delivery]:
        if self.down:
            raise StorageUnavailable("storage unavailable: the disk is full")
        return await super().claim_deliveries(replica, now, until, limit)


async def test_a_store_outage_is_logged_once_and_deliveries_go_on_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="engine_service.core.deliveries")
    store = FailingClaims()
    hook = Receiver().start()
    made = worker(store)
    made.start()
    try:
        await store.add_delivery(owed("d1", hook.url))
        await asyncio.sleep(0.3)  # about 15 polls while the store is down
        store.down = False
        await asyncio.to_thread(hook.wait_for, 1, 5)
    finally:
        await made.stop()
        hook.stop()
    said = [r.getMessage() for r in caplog.records if "webhook deliveries" in r.getMessage()]
    assert said == [
        "webhook deliveries wait for the store: storage unavailable: the disk is full",
        "webhook deliveries go on: the store answers again",
    ]
