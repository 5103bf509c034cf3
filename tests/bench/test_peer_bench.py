"""``python -m bench.peer_bench``: its options, its table on canned numbers, the LangGraph
stream's markers and the venv cache (the measuring itself is a benchmark, not a test)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from bench import peer_bench
from bench.load_bench import StreamError, read_stream
from tests import postgres_server


def test_the_defaults_measure_every_target_at_one_and_64_clients() -> None:
    options = peer_bench.parse([])
    assert options.targets == list(peer_bench.TARGETS)
    assert options.scenarios == ["agui", "agentik", "a2a"]
    assert options.clients == [1, 64]
    assert options.repeat == 3


def test_only_the_targets_that_serve_a_chosen_scenario_are_run() -> None:
    options = peer_bench.parse(["--scenarios", "agui", "--clients", "256", "--repeat", "1"])
    assert options.targets == ["agentik", "agentik-pg", "pydantic-ai-1", "pydantic-ai-2"]
    options = peer_bench.parse(["--scenarios", "a2a", "--targets", "a2a-sdk,langgraph"])
    assert options.targets == ["a2a-sdk"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--targets", "crewai"], "unknown ['crewai']"),
        (["--scenarios", "mcp"], "unknown ['mcp']"),
        (["--clients", "0"], "must be positive"),
        (["--token-delay", "-1"], "must not be negative"),
        (["--scenarios", "agui", "--targets", "langgraph"], "no target serves"),
    ],
)
def test_bad_options_are_refused_with_what_is_wrong(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        peer_bench.parse(argv)
    assert message in capsys.readouterr().err


def scenario(p50: float, p99: float, cpu: float, over: float = 0.0) -> dict[str, Any]:
    return {
        "first_token_p50_ms": p50,
        "first_token_p99_ms": p99,
        "first_token_p50_over_floor_ms": over,
        "first_token_p99_over_floor_ms": over,
        "total_p50_ms": p50 * 2,
        "cpu_ms_per_run": {"server tree": cpu},
        "errors": 0,
    }


def rep(rss: float, **scenarios: dict[str, Any]) -> dict[str, Any]:
    return {
        "idle_memory_mib": {"tree": {"rss_mib": rss, "pss_mib": rss}},
        "floor": scenario(1.0, 2.0, 0.0),
        **scenarios,
    }


def test_the_table_gives_medians_and_the_ratio_to_the_best_peer() -> None:
    options = peer_bench.parse(["--scenarios", "agui", "--clients", "1,64"])
    results = {
        "levels": {
            "1": {
                "agentik": [
                    rep(150, agui=scenario(8, 9, 60, over=4.0)),
                    rep(140, agui=scenario(8, 9, 62, over=5.0)),
                    rep(160, agui=scenario(8, 9, 70, over=9.0)),
                ],
                "pydantic-ai-1": [rep(90, agui=scenario(12, 14, 100, over=10.0))],
                "pydantic-ai-2": [rep(180, agui=scenario(11, 13, 98, over=8.0))],
            },
            "64": {
                "agentik": [rep(150, agui=scenario(500, 1640, 61))],
                "pydantic-ai-1": [rep(90, agui=scenario(900, 2000, 99))],
                "pydantic-ai-2": [rep(180, agui=scenario(700, 1297, 97))],
            },
        }
    }
    table = peer_bench.markdown(results, options)
    lines = table.splitlines()
    assert lines[0] == "| figure | best peer | agentik | ratio (agentik / best peer) |"
    over = next(line for line in lines if "first token over the floor" in line)
    # agentik's median of 4, 5, 9 against the best peer's +8.0: 5 / 8.
    assert "Pydantic AI, 2 workers: +8.00 ms (Pydantic AI, 1 worker +10.0 ms)" in over
    assert over.endswith("| +5.00 ms | 0.62 |")
    p99 = next(line for line in lines if "64 clients" in line and "p99" in line)
    assert p99.endswith("| Pydantic AI, 2 workers: 1,297.0 ms (Pydantic AI, 1 worker "
                        "2,000.0 ms) | 1,640.0 ms | 1.26 |")  # fmt: skip
    rss = next(line for line in lines if line.startswith("| idle RSS"))
    assert rss.endswith("| Pydantic AI, 1 worker: 90.0 MiB (Pydantic AI, 2 workers 180.0 MiB) "
                        "| 150.0 MiB | 1.67 |")  # fmt: skip
    assert "| 64 | Pydantic AI, 2 workers | agui | 700.0 / 1,297.0 |" in table


def test_the_tables_of_an_earlier_run_are_printed_again_from_its_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = peer_bench.parse(["--scenarios", "a2a", "--clients", "64", "--tokens", "100"])
    results = {
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(options).items()},
        "levels": {
            "64": {
                "agentik": [rep(150, a2a=scenario(796, 5771, 30))],
                "a2a-sdk": [rep(70, a2a=scenario(1256, 1692, 100))],
            }
        },
    }
    saved = tmp_path / "peers.json"
    saved.write_text(json.dumps(results))
    peer_bench.main(["--report", str(saved)])
    table = capsys.readouterr().out
    assert table == peer_bench.markdown(results, options) + "\n"
    assert (
        "| A2A streaming, 64 clients, 100 tokens: first token p99 | a2a-sdk: 1,692.0 ms " in table
    )
    assert "| 5,771.0 ms | 3.41 |" in table


def test_agentiks_figure_is_the_better_of_its_configurations_with_both_shown() -> None:
    figure = peer_bench.Figure("p99", {"agentik": 900.0, "agentik-pg": 600.0, "a2a-sdk": 1500.0})
    assert figure.row() == (
        "| p99 | a2a-sdk: 1,500.0 ms | agentik, PostgreSQL, 2 engines: 600.0 ms (agentik "
        "900.0 ms) | 0.40 |"
    )
    # A peer is never taken for one of ours, and ours never for a peer.
    figure = peer_bench.Figure("one", {"agentik": 5.0, "agentik-pg": 11.0, "pydantic-ai-2": 8.0})
    assert figure.row().endswith(
        "| Pydantic AI, 2 workers: 8.00 ms | agentik: 5.00 ms (agentik, PostgreSQL, 2 engines "
        "11.0 ms) | 0.62 |"
    )


def test_agentik_pg_gets_a_fresh_database_whose_backends_are_counted_and_dropped() -> None:
    server = postgres_server.server_url()
    name = f"agentik_peers_test_{uuid.uuid4().hex[:8]}"
    try:
        url = peer_bench.fresh_database(server, name)
    except SystemExit as exc:
        postgres_server.unavailable(str(exc))
    try:
        with psycopg.connect(url) as conn:
            (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
            assert pid in peer_bench.database_backends(server, name)
    finally:
        peer_bench.drop_database(server, name)
    with psycopg.connect(server, autocommit=True) as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchall()
    assert left == []


def test_an_unreachable_postgresql_is_named_with_what_to_do() -> None:
    with pytest.raises(SystemExit) as raised:
        peer_bench.fresh_database("postgresql://127.0.0.1:1/postgres", "x")
    assert "agentik-pg needs PostgreSQL at --dsn postgresql://127.0.0.1:1/postgres" in str(
        raised.value
    )
    assert "--targets" in str(raised.value)


def test_a_figure_without_peers_or_without_agentik_has_no_ratio() -> None:
    assert peer_bench.Figure("x", {"agentik": 5.0}).row() == "| x | — | 5.00 ms | — |"
    row = peer_bench.Figure("y", {"a2a-sdk": 12.0}).row()
    assert row == "| y | a2a-sdk: 12.0 ms | — | — |"


LANGGRAPH_STREAM = (
    b'event: metadata\r\ndata: {"run_id":"r","attempt":1}\r\n\r\n'
    b'event: messages\r\ndata: [{"content":"","type":"AIMessageChunk"},{}]\r\n\r\n'
    b'event: messages\r\ndata: [{"content":"w0 ","type":"AIMessageChunk"},{}]\r\n\r\n'
    b'event: messages\r\ndata: [{"content":"","chunk_position":"last"},{}]\r\n\r\n'
)


def read(body: bytes) -> Any:
    start = time.perf_counter()
    response = httpx.Response(200, stream=httpx.ByteStream(body))
    return asyncio.run(read_stream(response, peer_bench.LANGGRAPH, start, 0.0))


def test_a_langgraph_stream_is_timed_to_its_first_text_and_ends_with_the_last_chunk() -> None:
    run = read(LANGGRAPH_STREAM)
    assert 0 < run.first_frame <= run.first_token <= run.total


def test_a_langgraph_stream_without_its_last_chunk_or_with_an_error_fails() -> None:
    with pytest.raises(StreamError, match="without its terminal frame"):
        read(LANGGRAPH_STREAM.rsplit(b"event: messages", 1)[0])
    with pytest.raises(StreamError, match="event: error"):
        read(b'event: error\r\ndata: {"error":"boom"}\r\n\r\n')


def test_a_venv_whose_requirements_did_not_change_is_not_remade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[list[str]] = []

    def run(command: list[str], **_: object) -> None:
        made.append(command)
        if command[1:3] == ["-m", "venv"]:
            (Path(command[-1]) / "bin").mkdir(parents=True, exist_ok=True)
            (Path(command[-1]) / "bin" / "python").touch()

    monkeypatch.setattr(subprocess, "run", run)
    python = peer_bench.ensure_venv(tmp_path, "a2a")  # no venv yet: made
    assert python == tmp_path / "a2a" / "bin" / "python"
    assert made[0][:3] == [sys.executable, "-m", "venv"]
    assert made[1][-2:] == ["-r", str(peer_bench.requirements("a2a"))]
    made.clear()
    assert peer_bench.ensure_venv(tmp_path, "a2a") == python
    assert made == []  # cached: the stamp matches the requirements file
    (tmp_path / "a2a" / ".requirements.sha256").write_text("an older file")
    peer_bench.ensure_venv(tmp_path, "a2a")
    assert len(made) == 2


def test_every_peer_has_a_pinned_requirements_file() -> None:
    for target in peer_bench.TARGETS.values():
        if not target.venv:
            continue
        lines = peer_bench.requirements(target.venv).read_text().splitlines()
        pins = [line for line in lines if line.strip() and not line.startswith("#")]
        assert pins and all("==" in line for line in pins), target.venv


def test_a_server_tree_is_the_process_and_every_process_below_it() -> None:
    script = (
        "import subprocess, sys, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(child.pid, flush=True); time.sleep(60)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as parent:
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            assert peer_bench.tree(parent.pid) == [parent.pid, child]
        finally:
            for pid in peer_bench.tree(parent.pid)[1:]:
                os.kill(pid, signal.SIGKILL)
            parent.kill()
