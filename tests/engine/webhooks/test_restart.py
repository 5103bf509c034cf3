"""Deliveries survive the engine: kill -9 mid-retry, the next engine on the same file makes
the delivery once the receiver is back."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine_service.core.deliveries import Delivery, DeliveryStatus
from engine_service.stores import SqliteSessionStore
from tests.core.test_recovery import EngineProcess
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI

FAST = {
    "AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "true",
    "AGENTIK_WEBHOOKS_BASE_DELAY": "0.2",
    "AGENTIK_WEBHOOKS_POLL_INTERVAL": "0.05",
    "AGENTIK_WEBHOOKS_TIMEOUT": "1",
}


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def stored(path: Path) -> Delivery:
    store = SqliteSessionStore(path)
    try:
        got = await store.get_delivery("d1")
    finally:
        await store.close()
    assert got is not None
    return got


async def test_a_delivery_retried_by_a_killed_engine_is_made_by_the_next_one(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    db = tmp_path / "agentik.db"
    hook = Receiver(free_port())
    store = SqliteSessionStore(db)
    now = datetime.now(UTC)
    await store.add_delivery(Delivery("d1", hook.url, '{"runId": "r1"}', now, now))
    await store.close()

    engine = EngineProcess(llm, tmp_path, **FAST)
    try:
        deadline = time.monotonic() + 15
        while (await stored(db)).attempts < 2:  # the receiver is down: retried
            assert time.monotonic() < deadline, "the engine did not retry"
            await asyncio.sleep(0.05)
    finally:
        engine.kill()
    before = await stored(db)
    assert before.status is DeliveryStatus.PENDING
    assert before.last_error == "connection refused"

    with hook:  # the receiver is back, the engine too
        engine = EngineProcess(llm, tmp_path, **FAST)
        try:
            (got,) = await asyncio.to_thread(hook.wait_for, 1, 15)
            assert got.headers["webhook-id"] == "d1"
            assert got.body == b'{"runId": "r1"}'
            deadline = time.monotonic() + 5
            while (await stored(db)).status is not DeliveryStatus.DELIVERED:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        finally:
            engine.stop()


async def test_attempts_cut_by_kill_9_count_and_the_delivery_fails_after_max_attempts(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A receiver that never answers in time, and an engine killed during each attempt:
    each attempt counts once made (claimed), so the engine that finds the attempts used up
    fails the delivery without another POST, instead of trying for as long as it crashes."""
    db = tmp_path / "agentik.db"
    hook = Receiver(free_port())
    hook.delay = 3.0  # longer than the sender's timeout (1 s): no answer in time
    store = SqliteSessionStore(db)
    now = datetime.now(UTC)
    await store.add_delivery(Delivery("d1", hook.url, '{"runId": "r1"}', now, now))
    await store.close()
    settings = {**FAST, "AGENTIK_WEBHOOKS_MAX_ATTEMPTS": "2"}

    with hook:
        for attempt in (1, 2):  # each attempt reaches the receiver, then its engine dies
            engine = EngineProcess(llm, tmp_path, **settings)
            try:
                await asyncio.to_thread(hook.wait_for, attempt, 30)
            finally:
                engine.kill()
            assert (await stored(db)).attempts == attempt
        engine = EngineProcess(llm, tmp_path, **settings)
        try:
            deadline = time.monotonic() + 30  # the killed engine's lease (5 s) ends first
            while (await stored(db)).status is DeliveryStatus.PENDING:
                assert time.monotonic() < deadline, "the delivery was never settled"
                await asyncio.sleep(0.05)
        finally:
            engine.stop()
        failed = await stored(db)
        assert (failed.status, failed.attempts) == (DeliveryStatus.FAILED, 2)
        assert "cut short" in failed.last_error
        assert len(hook.received) == 2
