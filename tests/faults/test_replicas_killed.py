"""Two engine processes on one PostgreSQL behind one facade, under faults.

The facade reaches both through one target list (round robin), so conversations run on
either. One replica is killed with SIGKILL mid-turn: the streams it served resume on the
other from their last id, the other replica closes the dead one's runs when their lease
expires (stored as interrupted, partial answers kept), and every client gets its turn's
end. Then every replica is restarted in turn (SIGTERM, start again) under load. Each time
the clients' ids are held against the store: zero lost, zero duplicated.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from engine_service.stores.postgres import WRITER_NAME
from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import SIGNAL_MARKS, WITHIN, open_streams
from tests.faults.ledger import audit, store_view
from tests.web.e2e.conftest import ENGINE_LISTENING, Process, Stack, free_port

pytestmark = SIGNAL_MARKS

LEASE = 2.0
"""Seconds: a dead replica's runs are closed within this (plus a third of it)."""
CONVERSATIONS = 8
"""Each with a ``send`` stream and an ``/events`` follower: 16 streams."""
TURN = "[[slow:0.02]] [[chunks:300]]"
"""About 6 s of text per turn: every turn is mid-answer when a replica goes."""


class Replicas:
    """Two engine processes on fixed ports, one PostgreSQL schema, and the facade."""

    def __init__(
        self, llm: FakeOpenAI, logs: Path, store: str, *, resume: bool = False, **env: str
    ) -> None:
        """``resume``: a dead replica's runs go on elsewhere (``[engine] resume_runs``);
        off, they are closed as interrupted."""
        self.ports = [free_port(), free_port()]
        self.stack = Stack(
            llm,
            logs,
            AGENTIK_STORE=store,
            AGENTIK_GRPC_ADDR=f"127.0.0.1:{self.ports[0]}",
            AGENTIK_LEASE_SECONDS=str(LEASE),
            AGENTIK_WEB_THREADS="96",
            AGENTIK_RESUME_RUNS=str(resume).lower(),
            **env,
        )
        self.engines = [self.stack.engine, self._start(1)]
        # The facade, restarted to reach both engines through one target list.
        self.stack.web.stop()
        self.stack.env["AGENTIK_ENGINE_TARGET"] = "ipv4:" + ",".join(
            f"127.0.0.1:{port}" for port in self.ports
        )
        self.stack.start_web()

    def _start(self, index: int) -> Process:
        env = {**self.stack.env, "AGENTIK_GRPC_ADDR": f"127.0.0.1:{self.ports[index]}"}
        engine = Process(
            f"engine-{index}", [sys.executable, "-m", "engine_service"], env, self.stack.logs
        )
        assert int(engine.wait_for_log(ENGINE_LISTENING)) == self.ports[index]
        return engine

    def restart(self, index: int, sig: int) -> None:
        self.engines[index].stop(sig)
        self.engines[index] = self._start(index)
        if index == 0:
            self.stack.engine = self.engines[0]

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.ports[1]}"

    def stop(self) -> None:
        self.stack.stop()
        for engine in self.engines[1:]:
            if not engine.stopped:
                engine.stop()


@pytest.fixture
def replicas(
    llm: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    running = Replicas(llm, tmp_path_factory.mktemp("replicas"), pg_url)
    yield running
    running.stop()


@pytest.fixture
async def http(replicas: Replicas) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=replicas.stack.base_url, timeout=httpx.Timeout(WITHIN), limits=limits
    ) as client:
        yield client


async def test_a_replica_killed_mid_turn_loses_no_event_and_its_runs_end_within_the_lease(
    replicas: Replicas, http: httpx.AsyncClient
) -> None:
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=20)
    try:
        killed = time.monotonic()
        replicas.engines[0].stop(signal.SIGKILL)
        for run in runs:
            assert await run, "a stream did not reach its turn's end"
        ended_after = time.monotonic() - killed
    finally:
        for run in runs:
            run.cancel()

    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, replicas.target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views, crashed=True)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    assert not result.skipped, result.skipped  # no client saw an event never stored
    ends = {name: ledger.frames[-1].type for name, ledger in ledgers.items()}
    # Runs on the survivor finish; the dead replica's are closed as interrupted.
    assert set(ends.values()) <= {"end", "interrupted"}, ends
    assert "interrupted" in ends.values(), "no run was on the killed replica?"
    assert ended_after < LEASE * 2 + TURN_SECONDS, ended_after
    for name, ledger in ledgers.items():
        if ledger.frames[-1].type == "interrupted":
            kept = views[ledger.conversation_id].assistant_text()
            assert kept and ledger.text().startswith(kept), name


async def test_a_replica_killed_while_its_writer_holds_a_batch_loses_no_event(
    replicas: Replicas, http: httpx.AsyncClient, pg_url: str
) -> None:
    """The writer sends every run's writes in one transaction: killed with a batch open,
    none of that batch is stored and no client saw any of it; what clients saw is stored
    once."""
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=20)
    writer = f"{WRITER_NAME}-{replicas.engines[0].popen.pid}"
    try:
        mid_batch = await asyncio.to_thread(_wait_for_open_batch, pg_url, writer)
        replicas.engines[0].stop(signal.SIGKILL)
        assert mid_batch, "the writer never held a transaction open"
        for run in runs:
            assert await run, "a stream did not reach its turn's end"
    finally:
        for run in runs:
            run.cancel()

    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, replicas.target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views, crashed=True)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    assert not result.skipped, result.skipped  # no client saw an event never stored
    ends = {name: ledger.frames[-1].type for name, ledger in ledgers.items()}
    assert set(ends.values()) <= {"end", "interrupted"}, ends


def _wait_for_open_batch(url: str, writer: str, within: float = 10.0) -> bool:
    """Whether the writer connection ``writer`` was seen inside a transaction (a batch
    sent and not yet committed) within ``within`` seconds."""
    deadline = time.monotonic() + within
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND xact_start IS NOT NULL",
                (writer,),
            ).fetchone()
            if row and row[0]:
                return True
    return False


TURN_SECONDS = 8.0
"""Upper bound for a turn of ``TURN`` to finish on its own on a busy host."""


async def test_a_rolling_restart_under_load_loses_no_event(
    replicas: Replicas, http: httpx.AsyncClient
) -> None:
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=10)
    try:
        for index in (0, 1):
            replicas.restart(index, signal.SIGTERM)
        for run in runs:
            assert await run, "a stream did not reach its turn's end"
    finally:
        for run in runs:
            run.cancel()

    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, replicas.target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    # The conversations are free again, on whichever replica takes the next turn.
    reply = await http.post(
        f"/agentik/conversations/{next(iter(conversations))}/send", json={"text": "again"}
    )
    assert reply.status_code == 200 and "event: end" in reply.text
