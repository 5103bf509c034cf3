"""The PostgreSQL store's connections: a server it cannot reach or a database that does not
exist named in plain words, never with the URL; dropped connections under live runs retried,
never a failed run.

A real engine on the real PostgreSQL runs 16 conversations at once while another
connection terminates every backend of the engine's pool, again and again
(``pg_terminate_backend``, as a failover, a proxy or an operator does). Every run still
finishes, and every event a client saw is stored once, as it was seen. A database that
stays away longer than ``store_retry_seconds`` fails the run, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import grpc
import psycopg
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.errors import StorageUnavailable
from engine_service.stores.postgres import PostgresSessionStore
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    next_event,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI
from tests.postgres_server import with_database
from tests.stack import free_port
from tests.stores.heard import Heard
from tests.stores.pg_proxy import postgres_proxy

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
RUNS = 16
ROUNDS = 4
"""Times every backend is terminated, 0.3 s apart, while the runs stream (1.5 s each)."""


@pytest.fixture
async def on_postgres(llm: FakeOpenAI, pg_url: str) -> AsyncIterator[Harness]:
    settings = engine_settings(
        AGENTIK_STORE=pg_url,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
    )
    async with running_engine(settings) as running:
        yield running


def _terminate_others(url: str) -> int:
    """Terminate every other backend of the test database; how many there were."""
    with psycopg.connect(url, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        ).fetchall()
    return len(rows)


def _lost_and_duplicated(seen: list[pb.Event], stored: list[pb.Event]) -> tuple[int, int]:
    """Events a client saw that the log lacks or holds differently, and seqs stored twice."""
    by_seq = {e.seq: e for e in stored}
    lost = sum(1 for e in seen if by_seq.get(e.seq) != e)
    return lost, len(stored) - len(by_seq)


async def test_runs_finish_and_lose_no_event_while_the_pools_connections_are_terminated(
    on_postgres: Harness, pg_url: str
) -> None:
    stub = on_postgres.stub
    for i in range(RUNS):
        await stub.CreateSession(pb.CreateSessionRequest(session_id=f"s{i}"))
    terminated: list[int] = []

    async def terminate_every_backend_now_and_then() -> None:
        for _ in range(ROUNDS):
            await asyncio.sleep(0.3)
            terminated.append(await asyncio.to_thread(_terminate_others, pg_url))

    async def one_run(i: int) -> list[pb.Event]:
        prompt = "[[chunks:150]][[slow:0.01]]"
        return await collect(stub.Run(pb.RunRequest(session_id=f"s{i}", messages=[user(prompt)])))

    killer = asyncio.create_task(terminate_every_backend_now_and_then())
    seen = await asyncio.gather(*(one_run(i) for i in range(RUNS)))
    await killer

    assert all(terminated), terminated  # the pool's connections really went, every time
    ends = [kind(events[-1]) for events in seen]
    errors = [e[-1].run_error.message for e in seen if kind(e[-1]) == "run_error"]
    assert ends == ["run_finished"] * RUNS, errors
    for i, events in enumerate(seen):
        stored = await collect(
            stub.Subscribe(pb.SubscribeRequest(session_id=f"s{i}", until_idle=True))
        )
        assert _lost_and_duplicated(events, stored) == (0, 0)
        assert [e.seq for e in stored] == sorted({e.seq for e in stored})
    assert on_postgres.engine.storage_ok


async def test_a_run_fails_naming_the_cause_once_the_database_stays_away_past_the_retry_time(
    llm: FakeOpenAI, pg_url: str
) -> None:
    async with postgres_proxy(pg_url) as proxy:
        settings = engine_settings(
            AGENTIK_STORE=proxy.url,
            AGENTIK_STORE_RETRY_SECONDS="0.5",
            OPENAI_BASE_URL=llm.base_url,
            OPENAI_API_KEY="test-key",
            AGENTIK_LLM_MAX_RETRIES="0",
        )
        async with running_engine(settings) as harness:
            await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
            call = harness.stub.Run(
                pb.RunRequest(session_id="s", messages=[user("[[chunks:300]][[slow:0.01]]")])
            )
            for _ in range(10):
                await next_event(call)
            await proxy.go_away()
            gone = time.monotonic()
            # With a shared store, a run's end that cannot be stored is not shown (another
            # replica may close the run): the stream ends with the store's error instead.
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await collect(call)
            failed_after = time.monotonic() - gone

            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert ended.value.details() == "storage unavailable: the database is unreachable"
            assert 0.4 <= failed_after < 5.0, failed_after  # a flush may have begun just before
            assert not harness.engine.storage_ok


async def test_an_unreachable_server_is_storage_unavailable_naming_no_host_or_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    port = free_port()
    store = PostgresSessionStore(
        f"postgresql://agent:s3cretpw@127.0.0.1:{port}/x", timeout=1, retry_seconds=0.2
    )
    heard = Heard()
    try:
        with pytest.raises(StorageUnavailable) as caught:
            await store.get_session("s1")
        await store.watch(heard)  # returns; keeps trying in the background
    finally:
        await store.close()
    message = caught.value.message
    assert message == "storage unavailable: the database is unreachable"
    for secret in ("s3cretpw", "127.0.0.1", str(port), "postgresql://"):
        assert secret not in message
    assert "s3cretpw" not in caplog.text


async def test_a_missing_database_is_named_in_plain_words(
    pg_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = with_database(pg_database, "agentik_no_such_db").replace(
        "postgresql://postgres@", "postgresql://postgres:s3cretpw@"
    )
    assert "s3cretpw" in url
    store = PostgresSessionStore(url, timeout=2)
    try:
        with pytest.raises(StorageUnavailable) as caught:
            await store.create_session("s1", "", T0)
    finally:
        await store.close()
    assert caught.value.message == "storage unavailable: the database does not exist"
    assert "s3cretpw" not in caplog.text
    assert "s3cretpw" not in str(caught.value)
