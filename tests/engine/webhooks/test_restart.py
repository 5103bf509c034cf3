"""Deliveries survive the engine: kill -9 mid-retry, the next engine on the same file makes
the delivery once the receiver is back; a run cut by kill -9 sends its webhook from the
engine that resumes (or closes) it."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.deliveries import Delivery, DeliveryStatus
from engine_service.stores import SqliteSessionStore
from tests.core.test_recovery import EngineProcess
from tests.engine.harness import kind, user
from tests.engine.webhooks.outbox import settled, sqlite_rows
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


CHUNKS = 300
ANSWER = "".join(f"w{i} " for i in range(CHUNKS))


def _cut_run(llm: FakeOpenAI, workdir: Path, url: str, default: bool, **env: str) -> str:
    """A run whose webhook is ``url`` (its own, or with ``default`` its conversation's),
    cut by kill -9 mid-answer; its id."""
    engine = EngineProcess(llm, workdir, **FAST, **env)
    try:
        hook = pb.Webhook(url=url)
        engine.stub.CreateSession(
            pb.CreateSessionRequest(session_id="s", webhook=hook if default else None), timeout=5
        )
        request = pb.RunRequest(
            session_id="s",
            messages=[user(f"[[slow:0.01]] [[chunks:{CHUNKS}]]")],
            webhook=None if default else hook,
        )
        call = engine.stub.Run(request, timeout=15)
        texts = 0
        for event in call:
            texts += kind(event) == "text_message_content"
            if texts == 20:
                run_id: str = event.run_id
                break
        else:
            raise AssertionError("the run ended before it was cut")
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    return run_id


@pytest.mark.parametrize("default", [False, True], ids=["its own webhook", "the default"])
def test_a_run_cut_by_kill_9_and_resumed_by_the_next_engine_sends_its_webhook(
    llm: FakeOpenAI, tmp_path: Path, default: bool
) -> None:
    """kill -9 mid-answer; the engine started again resumes the run and, at its end,
    posts it to the webhook the run named or to its conversation's default: the run's
    delivery (``run_<id>.<incarnation>``, the whole answer), and no other."""
    with Receiver() as hook:
        run_id = _cut_run(llm, tmp_path, hook.url, default)
        assert hook.received == []  # the cut run ended nowhere
        engine = EngineProcess(llm, tmp_path, **FAST)
        try:
            ended = engine.follow("s", 0)[-1]
            assert ended.run_id == run_id and kind(ended) == "run_finished"
            # One row for the run, delivered: nothing more is sent of it.
            (row,) = settled(lambda: sqlite_rows(tmp_path / "agentik.db", run_id), 15)
        finally:
            engine.stop()
    assert row.status == "delivered"
    (got,) = hook.received
    payload = json.loads(got.body)
    assert got.headers["webhook-id"] == payload["id"] == row.id
    assert row.id.startswith(f"run_{run_id}.")
    assert (payload["runId"], payload["outcome"]) == (run_id, "success")
    assert payload["message"]["text"] == ANSWER


def test_a_run_cut_by_kill_9_and_closed_by_the_next_engine_sends_its_webhook(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """With ``resume_runs`` off the next engine closes the cut run as interrupted, and
    posts that end to the run's webhook."""
    with Receiver() as hook:
        run_id = _cut_run(llm, tmp_path, hook.url, False, AGENTIK_RESUME_RUNS="false")
        engine = EngineProcess(llm, tmp_path, **FAST, AGENTIK_RESUME_RUNS="false")
        try:
            (row,) = settled(lambda: sqlite_rows(tmp_path / "agentik.db", run_id), 15)
        finally:
            engine.stop()
    assert row.status == "delivered"
    (got,) = hook.received
    payload = json.loads(got.body)
    assert got.headers["webhook-id"] == payload["id"] == row.id
    assert payload["id"].startswith(f"run_{run_id}.")
    assert (payload["runId"], payload["outcome"]) == (run_id, "cancelled")
    assert ANSWER.startswith(payload["message"]["text"])  # the partial answer, kept


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
