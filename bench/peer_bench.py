"""Issue 25's table: agentik against its peers, measured side by side in one run.

The targets (each on the same fake OpenAI server, ``tests/fakes/aio_openai.py``: the
tests' fake's answers from one asyncio loop; a fresh one per stack, listen backlog 1024):

- **agentik**: the engine and gunicorn (:class:`bench.facade_bench.Processes`, SQLite,
  ``--web-workers`` x ``max(64, clients)`` threads), measured on each of its facades;
- **agentik-pg**: the same with PostgreSQL (a fresh database per stack on ``--dsn``'s
  server, dropped after) and two engine processes (``agentik engine --workers 2``), the
  deployment that uses more than one core for the engine; its server CPU includes the
  PostgreSQL backends serving that database;
- **Pydantic AI** (``bench/peers/pydantic_ai_app.py``): its AG-UI adapter in a Starlette app
  under uvicorn with 1 and with 2 workers; against agentik's ``POST /agui``;
- **LangGraph** (``bench/peers/langgraph_server.py``): its Agent Server with the in-memory
  runtime, as ``langgraph dev`` starts it, one model node; ``POST /threads`` then
  ``POST /threads/{id}/runs/stream`` (``stream_mode: messages-tuple``), against agentik's
  ``POST /agentik/conversations`` then ``.../send``;
- **a2a-sdk** (``bench/peers/a2a_app.py``): the SDK's own JSON-RPC server with an agent
  executor streaming the LLM's deltas as artifact chunks; ``SendStreamingMessage`` against
  agentik's A2A facade.

Each peer runs in its own venv under ``--venvs`` (``.bench-venvs/``), made on first use from
the pinned ``bench/peers/requirements-<peer>.txt`` (``--setup`` only makes them). The
streams are read by :mod:`bench.load_bench`'s client (one :class:`bench.lean_http.Client`
per simulated client, warmed up, all started at once); the prompt is the same
``[[chunks:N]]``/``[[slow:S]]`` answer for everyone.

Per ``--clients`` level, repetition and target: a fresh stack, the idle RSS of its whole
server process tree (the fake excluded), the floor (the fake read directly), then each
scenario with its first-token p50/p99 (and over the floor's) and the server tree's CPU per
run from ``/proc``. Output: JSON (``--out``) and a markdown table of medians over the
repetitions with agentik / best peer ratios (agentik's figure the better of its two
configurations, both shown), then every scenario's row.

Run: ``python -m bench.peer_bench --clients 1,64 --repeat 3``; the slow streams:
``python -m bench.peer_bench --clients 256 --tokens 50 --token-delay 0.02 --scenarios agui``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench import load_bench
from bench.facade_bench import (
    ROOT,
    Processes,
    _children,
    _cpu_seconds,
    _free_port,
    _proc_kib,
    start_fake_llm,
)
from bench.lean_http import Client
from bench.load_bench import Driver, Markers, Run, Scenario, StreamError
from engine_service.stores import redacted_url
from tests.postgres_server import with_database

PEERS_DIR = ROOT / "bench" / "peers"
WAIT = 60.0


# -- the targets ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One server measured: which venv runs it, how it starts and what it is asked."""

    name: str
    label: str
    venv: str
    """``bench/peers/requirements-<venv>.txt``; empty for agentik (the project's own)."""
    scenarios: dict[str, str]
    """Scenario family (``agui``, ``agentik``, ``a2a``) → the driver it is measured with."""
    health: str = "/health"
    workers: int = 1
    store: str = "sqlite"
    """agentik's store: ``sqlite`` or ``postgres`` (a fresh database on ``--dsn``)."""
    engine_workers: int = 1

    @property
    def ours(self) -> bool:
        return not self.venv


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("agentik", "agentik", "", {"agui": "agui", "agentik": "agentik", "a2a": "a2a"}),
        Target("agentik-pg", "agentik, PostgreSQL, 2 engines", "",
               {"agui": "agui", "agentik": "agentik", "a2a": "a2a"}, store="postgres",
               engine_workers=2),
        Target("pydantic-ai-1", "Pydantic AI, 1 worker", "pydantic-ai", {"agui": "agui"}),
        Target("pydantic-ai-2", "Pydantic AI, 2 workers", "pydantic-ai", {"agui": "agui"},
               workers=2),
        Target("langgraph", "LangGraph", "langgraph", {"agentik": "langgraph"}, health="/ok"),
        Target("a2a-sdk", "a2a-sdk", "a2a", {"a2a": "a2a"}),
    )
}  # fmt: skip
FAMILIES = ("agui", "agentik", "a2a")
FAMILY_LABEL = {"agui": "AG-UI", "agentik": "`/agentik` send / LangGraph runs/stream",
                "a2a": "A2A streaming"}  # fmt: skip

LANGGRAPH = Markers(
    b"event: ",
    # The fake's [[chunks:N]] text is "w0 w1 ...": the first chunk with text in it.
    b'[{"content":"w',
    # messages-tuple ends with the message's last chunk; the stream then closes.
    (b'"chunk_position":"last"',),
    (b"event: error",),
)


def langgraph_driver(base_url: str) -> Driver:
    """A thread (timed apart, as agentik's conversation is), then its run's stream."""

    async def one(client: Client, text: str) -> Run:
        start = time.perf_counter()
        created = await client.post(f"{base_url}/threads", json={})
        create = time.perf_counter() - start
        if created.status_code != 200:
            raise StreamError(f"create: HTTP {created.status_code}", created.text[:300])
        body = {
            "assistant_id": "agent",
            "input": {"messages": [{"id": str(uuid.uuid4()), "role": "user", "content": text}]},
            "stream_mode": ["messages-tuple"],
        }
        path = f"{base_url}/threads/{created.json()['thread_id']}/runs/stream"
        run = await load_bench.timed_stream(client, path, body, LANGGRAPH)
        run.create = create
        return run

    return one


def driver(kind: str, llm_url: str, base_url: str) -> Driver:
    if kind == "langgraph":
        return langgraph_driver(base_url)
    return load_bench.driver(kind, llm_url, base_url)


# -- venvs ----------------------------------------------------------------------------------


def requirements(venv: str) -> Path:
    return PEERS_DIR / f"requirements-{venv}.txt"


def ensure_venv(venvs: Path, venv: str) -> Path:
    """The venv's python, made (or remade when its requirements file changed) first."""
    where = venvs / venv
    python = where / "bin" / "python"
    wanted = hashlib.sha256(requirements(venv).read_bytes()).hexdigest()
    stamp = where / ".requirements.sha256"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"making the {venv} venv in {where}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(where)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(requirements(venv))], check=True)
    stamp.write_text(wanted)
    return python


def versions(venvs: Path, venv: str) -> dict[str, str]:
    """The pinned packages and what the venv has of them (``pip freeze`` lines)."""
    names = {
        line.split("==")[0].split("[")[0].strip().lower()
        for line in requirements(venv).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    python = venvs / venv / "bin" / "python"
    frozen = subprocess.run(
        [str(python), "-m", "pip", "freeze"], capture_output=True, text=True, check=True
    ).stdout
    out: dict[str, str] = {}
    for line in frozen.splitlines():
        name, _, version = line.partition("==")
        if name.lower().replace("_", "-") in names:
            out[name] = version
    return out


# -- a stack --------------------------------------------------------------------------------


def tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    found = [root]
    for pid in found:
        found.extend(_children(pid))
    return found


class Stack:
    """A fake LLM and one target's server processes."""

    def __init__(self, target: Target, options: argparse.Namespace, clients: int) -> None:
        self.target = target
        self.agentik: Processes | None = None
        self.fake: subprocess.Popen[str] | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.database: tuple[str, str] | None = None
        """agentik-pg's fresh database: the server's URL and the database's name."""
        self.tmp = tempfile.TemporaryDirectory(prefix="agentik-peers-")
        try:
            self._start(options, clients)
        except BaseException:
            self.stop()
            raise

    def _start(self, options: argparse.Namespace, clients: int) -> None:
        if self.target.ours:
            store = f"sqlite:///{self.tmp.name}/load.db"
            if self.target.store == "postgres":
                name = f"agentik_peers_{uuid.uuid4().hex[:12]}"
                store = fresh_database(options.dsn, name)
                self.database = (options.dsn, name)  # dropped by stop()
            engines = self.target.engine_workers
            self.agentik = Processes(
                options.web_workers,
                options.web_threads or max(64, clients),
                store=store,
                fake_backlog=1024,
                engine_workers=engines,
            )
            self.llm_url, self.base_url = self.agentik.llm_url, self.agentik.base_url
            self.roots = [p for n, p in self.agentik.pids().items() if n.startswith("engine")]
            self.roots.append(self.agentik.web.pid)
            # The engine (a supervisor and its workers when several), gunicorn's master and
            # its workers.
            self.expected = 1 + (engines if engines > 1 else 0) + 1 + options.web_workers
            return
        self.fake, self.llm_url = start_fake()
        port = _free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        python = ensure_venv(options.venvs, self.target.venv)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTIK_", "PYTHON"))}
        env.update(OPENAI_BASE_URL=self.llm_url, OPENAI_API_KEY="bench", A2A_URL=self.base_url)
        env.update(LOG_LEVEL="WARNING", LANGGRAPH_NO_VERSION_CHECK="true")
        if self.target.venv == "langgraph":
            jobs = options.langgraph_jobs or max(10, clients)
            command = [str(python), str(PEERS_DIR / "langgraph_server.py"), str(port), str(jobs)]
        else:
            app = {"pydantic-ai": "pydantic_ai_app:app", "a2a": "a2a_app:app"}[self.target.venv]
            command = [str(python), "-m", "uvicorn", app, "--app-dir", str(PEERS_DIR)]
            command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log"]
            command += ["--log-level", "warning", "--workers", str(self.target.workers)]
        # LangGraph logs its banner and every run at INFO on stdout: not the bench's output.
        self.server = subprocess.Popen(
            command, cwd=self.tmp.name, env=env, stdout=subprocess.DEVNULL
        )
        self.roots = [self.server.pid]
        # uvicorn with several workers: a supervisor, its workers and multiprocessing's
        # resource tracker; with one, the server alone.
        self.expected = 1 if self.target.workers == 1 else self.target.workers + 2
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + WAIT * 2
        while time.monotonic() < deadline:
            for process in (self.fake, self.server):
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
            try:
                url = f"{self.base_url}{self.target.health}"
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.target.name} did not become healthy")

    def pids(self) -> dict[str, int]:
        """Every server process (the fake and the bench client excluded), named."""
        if self.agentik is not None:
            named = self.agentik.pids()
            return {n: p for n, p in named.items() if n not in ("fake LLM", "bench client")}
        out: dict[str, int] = {}
        for index, pid in enumerate(p for root in self.roots for p in tree(root)):
            out["server" if index == 0 else f"child {index}"] = pid
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds of each server process, and of the PostgreSQL backends serving
        agentik-pg's database (its writes are part of what a run costs)."""
        cpu = {name: _cpu_seconds(pid) for name, pid in self.pids().items()}
        if self.database is not None:
            for pid in database_backends(*self.database):
                with contextlib.suppress(OSError):
                    cpu[f"postgres backend {pid}"] = _cpu_seconds(pid)
        return cpu

    def idle_memory(self, settle: float) -> dict[str, Any]:
        """Each server process's VmRSS and PSS (MiB) once all have started, then the tree's sum."""
        deadline = time.monotonic() + WAIT
        while len(self.pids()) < self.expected and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(settle)
        memory: dict[str, Any] = {
            name: {
                "rss_mib": round(_proc_kib(pid, "VmRSS") / 1024, 1),
                "pss_mib": round(_proc_kib(pid, "Pss", "smaps_rollup") / 1024, 1),
            }
            for name, pid in self.pids().items()
        }
        memory["tree"] = {
            k: round(sum(v[k] for v in memory.values()), 1) for k in ("rss_mib", "pss_mib")
        }
        return memory

    def stop(self) -> None:
        if self.agentik is not None:
            self.agentik.stop()
        left = [p for p in self.pids().values()] if self.server is not None else []
        for process in (self.server, self.fake):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in (self.server, self.fake):
            if process is None:
                continue
            try:
                process.wait(WAIT / 2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in left:  # a worker its supervisor did not stop
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.database is not None:
            drop_database(*self.database)
        self.tmp.cleanup()


def _maintenance(server: str) -> Any:
    """A connection to ``server``'s own database (autocommit), or SystemExit naming it."""
    import psycopg

    try:
        return psycopg.connect(server, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        raise SystemExit(
            f"agentik-pg needs PostgreSQL at --dsn {redacted_url(server)} ({exc}); give "
            "another --dsn, or leave it out: --targets agentik,pydantic-ai-1,..."
        ) from None


def fresh_database(server: str, name: str) -> str:
    """Make database ``name`` on ``server``; its URL."""
    with _maintenance(server) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return with_database(server, name)


def drop_database(server: str, name: str) -> None:
    with _maintenance(server) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_backends(server: str, name: str) -> list[int]:
    """The PostgreSQL backends connected to database ``name``."""
    with _maintenance(server) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,)
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def start_fake(backlog: int = 1024) -> tuple[subprocess.Popen[str], str]:
    """The fake LLM on a free port, as :class:`Processes` starts it; its base URL."""
    return start_fake_llm(backlog, {**os.environ, "PYTHONPATH": str(ROOT)})


# -- one target at one level ----------------------------------------------------------------


async def measure(
    stack: Stack, scenarios: Sequence[str], options: argparse.Namespace, clients: int
) -> dict[str, Any]:
    """The floor, then each scenario: fresh clients each, warmed up, all started at once."""
    text = load_bench.prompt(options.tokens, options.token_delay)
    per = options.runs_per_client or max(4, 64 // clients)
    limit = load_bench.WAIT + options.tokens * options.token_delay * 3
    out: dict[str, Any] = {"runs_per_client": per}
    floor: Scenario | None = None
    for family in ("floor", *scenarios):
        kind = "floor" if family == "floor" else stack.target.scenarios[family]
        one = driver(kind, stack.llm_url, stack.base_url)
        async with load_bench.client_pools(clients, False) as pools:
            if failed := await load_bench.warm_up(one, pools, False, limit):
                print(f"  {stack.target.name} {family}: {failed} warm-ups failed", file=sys.stderr)
            scenario = Scenario(kind, clients)
            before = stack.cpu()
            await load_bench.run_scenario(one, scenario, pools, text, per, limit)
            cpu = load_bench.cpu_delta(before, stack.cpu())
        scenario.cpu = {**cpu, "server tree": sum(cpu.values())}
        summary = scenario.summary(floor if family != "floor" else None)
        if kind == "langgraph":  # summary() times the create apart for "agentik" only
            summary["create_p50_ms"] = load_bench.ms(
                load_bench.quantile([r.create for r in scenario.runs], 0.5)
            )
        out[family] = summary
        floor = floor or scenario
        print(
            f"  {stack.target.name:14} {family:8} {clients:4} clients x {per}: first token "
            f"p50/p99 {summary['first_token_p50_ms']}/{summary['first_token_p99_ms']} ms, "
            f"CPU/run {summary['cpu_ms_per_run']['server tree']} ms, "
            f"errors {summary['errors']}",
            file=sys.stderr,
        )
    return out


def one_target(target: Target, options: argparse.Namespace, clients: int) -> dict[str, Any]:
    scenarios = [f for f in options.scenarios if f in target.scenarios]
    stack = Stack(target, options, clients)
    try:
        result: dict[str, Any] = {"idle_memory_mib": stack.idle_memory(options.settle)}
        result.update(asyncio.run(measure(stack, scenarios, options, clients)))
        return result
    finally:
        stack.stop()


# -- the report -----------------------------------------------------------------------------


values = load_bench.values


def median(numbers: list[float]) -> float:
    return statistics.median(numbers) if numbers else math.nan


def fmt(x: float, unit: str = " ms", sign: bool = False) -> str:
    if math.isnan(x):
        return "—"
    text = f"{x:,.1f}" if abs(x) >= 10 else f"{x:,.2f}"
    return ("+" if sign and x >= 0 else "") + text + unit


def ratio(ours: float, best: float) -> str:
    if math.isnan(ours) or math.isnan(best) or best <= 0:
        return "—"
    return f"{ours / best:.2f}"


@dataclass
class Figure:
    """One row of the summary: a number per target (medians), lower is better."""

    figure: str
    by_target: dict[str, float] = field(default_factory=dict)
    unit: str = " ms"
    sign: bool = False

    def row(self) -> str:
        mine_all = {
            n: v for n, v in self.by_target.items() if TARGETS[n].ours and not math.isnan(v)
        }
        ours, mine = math.nan, "—"
        if mine_all:
            best_ours = min(mine_all, key=lambda n: mine_all[n])
            ours = mine_all[best_ours]
            mine = fmt(ours, self.unit, self.sign)
            if len(mine_all) > 1:
                mine = (
                    f"{TARGETS[best_ours].label}: {mine} ("
                    + "; ".join(
                        f"{TARGETS[n].label} {fmt(v, self.unit, self.sign)}"
                        for n, v in mine_all.items()
                        if n != best_ours
                    )
                    + ")"
                )
        peers = {
            n: v for n, v in self.by_target.items() if not TARGETS[n].ours and not math.isnan(v)
        }
        if peers:
            best = min(peers, key=lambda n: peers[n])
            best_cell = f"{TARGETS[best].label}: {fmt(peers[best], self.unit, self.sign)}"
            others = [
                f"{TARGETS[n].label} {fmt(v, self.unit, self.sign)}"
                for n, v in peers.items()
                if n != best
            ]
            if others:
                best_cell += " (" + "; ".join(others) + ")"
            best_value = peers[best]
        else:
            best_cell, best_value = "—", math.nan
        return f"| {self.figure} | {best_cell} | {mine} | {ratio(ours, best_value)} |"


def figures(results: dict[str, Any], options: argparse.Namespace) -> list[Figure]:
    """The summary's rows from ``results["levels"][clients][target]`` (a list of repetitions)."""
    slow = options.token_delay > 0
    stream = f"{options.tokens} tokens" + (
        f" {options.token_delay * 1000:g} ms apart" if slow else ""
    )
    rows: list[Figure] = []
    for clients in options.clients:
        level: dict[str, list[dict[str, Any]]] = results["levels"].get(str(clients), {})
        for family in options.scenarios:
            who = FAMILY_LABEL[family]
            present = {n: reps for n, reps in level.items() if family in TARGETS[n].scenarios}
            if not present:
                continue
            plural = "s" if clients > 1 else ""
            base = f"{who}, {clients} client{plural}, {stream}"

            def pick(path: tuple[str, ...], present: dict[str, Any] = present) -> dict[str, float]:
                return {n: median(values(reps, *path)) for n, reps in present.items()}

            if clients == 1:
                rows.append(
                    Figure(
                        f"{base}: first token over the floor (p50)",
                        pick((family, "first_token_p50_over_floor_ms")),
                        sign=True,
                    )
                )
            else:
                for p in ("p50", "p99"):
                    rows.append(
                        Figure(f"{base}: first token {p}", pick((family, f"first_token_{p}_ms")))
                    )
            rows.append(
                Figure(
                    f"{base}: server CPU per run",
                    pick((family, "cpu_ms_per_run", "server tree")),
                )
            )
    first = results["levels"].get(str(options.clients[0]), {})
    for kind, key in (("RSS", "rss_mib"), ("PSS", "pss_mib")):
        memory = {n: median(values(reps, "idle_memory_mib", "tree", key)) for n, reps in
                  first.items()}  # fmt: skip
        rows.append(Figure(f"idle {kind} of the whole server tree", memory, unit=" MiB"))
    return rows


def markdown(results: dict[str, Any], options: argparse.Namespace) -> str:
    lines = ["| figure | best peer | agentik | ratio (agentik / best peer) |", "|---|---|---|---|"]
    lines += [f.row() for f in figures(results, options)]
    lines += ["", detail_table(results, options)]
    return "\n".join(lines)


def detail_table(results: dict[str, Any], options: argparse.Namespace) -> str:
    """Every target's every scenario, medians over the repetitions."""
    head = (
        "| clients | target | scenario | first token p50 / p99 | over floor p50 / p99 "
        "| stream p50 | server CPU ms per run | idle RSS MiB | errors |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for clients in options.clients:
        level = results["levels"].get(str(clients), {})
        for name, reps in level.items():
            rss = fmt(median(values(reps, "idle_memory_mib", "tree", "rss_mib")), "")
            for family in ("floor", *options.scenarios):
                if family != "floor" and family not in TARGETS[name].scenarios:
                    continue

                def pair(key: str, family: str = family, reps: list[dict[str, Any]] = reps) -> str:
                    p50 = median(values(reps, family, f"{key}_p50_ms"))
                    p99 = median(values(reps, family, f"{key}_p99_ms"))
                    return f"{fmt(p50, '')} / {fmt(p99, '')}"

                over = "—"
                if family != "floor":
                    o50 = median(values(reps, family, "first_token_p50_over_floor_ms"))
                    o99 = median(values(reps, family, "first_token_p99_over_floor_ms"))
                    over = f"{fmt(o50, '', True)} / {fmt(o99, '', True)}"
                kind = "floor" if family == "floor" else TARGETS[name].scenarios[family]
                cpu = median(values(reps, family, "cpu_ms_per_run", "server tree"))
                errors = sum(values(reps, family, "errors"))
                total = median(values(reps, family, "total_p50_ms"))
                lines.append(
                    f"| {clients} | {TARGETS[name].label} | {kind} | {pair('first_token')} | "
                    f"{over} | {fmt(total, '')} | {fmt(cpu, '') if family != 'floor' else '—'} | "
                    f"{rss} | {errors:g} |"
                )
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------


def names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        chosen = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [c for c in chosen if c not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {unknown}; choose from {list(choices)}")
        return chosen

    return parse


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add(
        "--targets",
        type=names(list(TARGETS)),
        default=list(TARGETS),
        help=f"comma-separated, from {','.join(TARGETS)}",
    )
    add("--scenarios", type=names(FAMILIES), default=list(FAMILIES), help="agui,agentik,a2a")
    add(
        "--clients",
        type=load_bench.csv(int),
        default=[1, 64],
        help="concurrency levels, e.g. 1,64,256",
    )
    load_bench.add_run_options(parser, min_runs=4, stacks="fresh stacks each", server="agentik's ")
    add(
        "--langgraph-jobs",
        type=int,
        default=0,
        help="LangGraph's N_JOBS_PER_WORKER (0: max(10, clients))",
    )
    add("--settle", type=float, default=3.0, help="seconds after start before the idle RSS")
    add(
        "--dsn",
        default="postgresql://127.0.0.1:5432/postgres",
        help="PostgreSQL server for agentik-pg (a fresh database is made on it per stack)",
    )
    add("--venvs", type=Path, default=ROOT / ".bench-venvs", help="the peers' venvs")
    add("--setup", action="store_true", help="only make the peers' venvs and print versions")
    add("--out", type=Path, default=Path("peer_bench.json"), help="JSON results")
    add("--report", type=Path, help="only print the tables of this --out file of an earlier run")
    options = parser.parse_args(argv)  # fmt: skip
    load_bench.check_run_options(parser, options)
    if options.token_delay < 0:
        parser.error("--token-delay must not be negative")
    wanted = [t for t in options.targets if set(TARGETS[t].scenarios) & set(options.scenarios)]
    if not wanted:
        parser.error("no target serves any of the chosen --scenarios")
    options.targets = wanted
    return options


def all_versions(options: argparse.Namespace) -> dict[str, dict[str, str]]:
    venvs = sorted({TARGETS[t].venv for t in options.targets if TARGETS[t].venv})
    out = {}
    for venv in venvs:
        ensure_venv(options.venvs, venv)
        out[venv] = versions(options.venvs, venv)
    return out


def runs(options: argparse.Namespace) -> Iterator[tuple[int, int, Target]]:
    for repetition in range(options.repeat):
        for clients in options.clients:
            for name in options.targets:
                yield repetition, clients, TARGETS[name]


def report(path: Path) -> str:
    """The tables of an earlier run's JSON, with the options it ran with."""
    results: dict[str, Any] = json.loads(path.read_text())
    ran = results["options"]
    argv = ["--clients", ",".join(map(str, ran["clients"])), "--tokens", str(ran["tokens"])]
    argv += ["--token-delay", str(ran["token_delay"]), "--scenarios", ",".join(ran["scenarios"])]
    argv += ["--targets", ",".join(ran["targets"])]
    return markdown(results, parse(argv))


def main(argv: list[str] | None = None) -> None:
    options = parse(argv)
    if options.report is not None:
        print(report(options.report))
        return
    results: dict[str, Any] = {
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in vars(options).items()},
        "versions": all_versions(options),
        "levels": {},
    }
    print(json.dumps(results["versions"]), file=sys.stderr)
    if options.setup:
        return
    try:
        with load_bench.sigterm_as_interrupt():
            for repetition, clients, target in runs(options):
                print(
                    f"repetition {repetition + 1}, {clients} clients, {target.name}",
                    file=sys.stderr,
                )
                rep = one_target(target, options, clients)
                level = results["levels"].setdefault(str(clients), {})
                level.setdefault(target.name, []).append(rep)
                options.out.write_text(json.dumps(results, indent=2))
    except KeyboardInterrupt:
        print(f"interrupted: the finished runs are in {options.out}", file=sys.stderr)
        raise SystemExit(130) from None
    results["markdown"] = markdown(results, options)
    options.out.write_text(json.dumps(results, indent=2))
    print(results["markdown"])


__all__ = ["TARGETS", "Figure", "figures", "main", "markdown", "parse"]

if __name__ == "__main__":
    main()
