"""``python -m bench.store_bench``: a short turn's store calls leave each store as the engine
would (the measuring itself is a benchmark, not a test)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import store_bench
from engine_service.core.models import RunStatus
from engine_service.stores import open_store
from tests.postgres_server import pg_database, pg_url

__all__ = ["pg_database", "pg_url"]


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
async def test_a_turn_stores_its_messages_events_and_finished_run(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = {
        "memory": "memory://",
        "sqlite": f"sqlite:///{tmp_path / 'bench.db'}",
        "postgres": "",
    }[kind] or request.getfixturevalue("pg_url")
    store = open_store(url)
    try:
        await store_bench.one_run(store, tokens=3)
        [session], total = await store.list_sessions(0, 0)
        assert (total, session.title, session.active_run_id) == (1, "hi", "")
        [run] = await store.list_runs(session.id)
        assert run.status is RunStatus.SUCCEEDED
        assert [m.role.value for m in await store.all_messages(session.id)] == [
            "user",
            "assistant",
        ]
        assert len(await store.read_events(session.id, 0, 0)) == 5 + 3  # 3 deltas
    finally:
        await store.close()


def test_the_report_counts_runs_and_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    store_bench.main(["--store", "memory://", "--runs", "20", "--concurrency", "4"])
    report = json.loads(capsys.readouterr().out)
    assert (report["store"], report["runs"], report["server_cpu_ms_per_run"]) == (
        "memory://",
        20,
        0,
    )
    assert report["cpu_ms_per_run"] > 0 and report["runs_per_s"] > 0


def test_the_backends_of_a_postgres_store_are_its_own_databases(pg_url: str) -> None:
    assert store_bench.backends("memory://") == []
    assert store_bench.backends(pg_url) == []  # nobody else is connected to it
    assert store_bench.cpu_of([os.getpid()])[os.getpid()] > 0
    assert store_bench.cpu_of([2**22 + 1]) == {}


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        store_bench.main(["--store", "memory://", "--runs", "0"])
    assert "must be positive" in capsys.readouterr().err
