"""The facade under gunicorn in front of ``agentik engine --workers 2`` on PostgreSQL: every
gunicorn worker learns the engine workers' own addresses and sends each run to the next one,
so the runs made over HTTP are shared evenly (counted per engine process in the store: each
worker's engine is one replica)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.postgres_server import pg_database, pg_url
from tests.web.e2e.conftest import WAIT, SseStream, Stack, checked, free_port, types, wait_for

__all__ = ["pg_database", "pg_url"]  # fixtures

BALANCED = "engine calls balanced over its 2 workers"


@pytest.fixture
def stack(llm: FakeOpenAI, pg_url: str, tmp_path: Path) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path,
        AGENTIK_GRPC_ADDR=f"127.0.0.1:{free_port()}",
        AGENTIK_STORE=pg_url,
        AGENTIK_ENGINE_WORKERS="2",
    )
    try:
        yield running
    finally:
        running.stop()


def _turn(stack: Stack) -> None:
    with stack.client() as http:
        created = checked(http.post("/agentik/conversations", json={"title": "w"}))
        path = f"/agentik/conversations/{created.json()['id']}/send"
        frames = SseStream(http, "POST", path, json={"text": "hello"}).read_to_end()
        assert types(frames)[-1] == "end", frames


def test_runs_over_http_are_shared_evenly_by_the_engine_workers(stack: Stack, pg_url: str) -> None:
    def every_web_worker_balances() -> bool:
        httpx.get(f"{stack.base_url}/health", timeout=WAIT)  # connects a worker, if new
        return stack.web.log().count(BALANCED) == 2

    wait_for(every_web_worker_balances, "both gunicorn workers to balance over the engine's")
    with futures.ThreadPoolExecutor(8) as pool:
        for done in [pool.submit(_turn, stack) for _ in range(48)]:
            done.result(WAIT)
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT replica, count(*) FROM runs GROUP BY replica").fetchall()
    runs = Counter({str(replica): int(count) for replica, count in rows})
    assert len(runs) == 2 and sum(runs.values()) == 48, runs
    assert max(runs.values()) <= 1.5 * min(runs.values()), runs
