"""Many concurrent ``send`` streams through gunicorn, against the fake LLM at full speed.

Starts the fake OpenAI server, the engine and the web facade as separate processes on
free ports, reads every process's idle memory (VmRSS and PSS, before any traffic), then
measures three things with the same asyncio httpx client:

1. **direct**: streams read straight from the fake LLM (the floor);
2. **engine**: ``Run`` streams read straight from the engine over gRPC (``grpc.aio``);
3. **facade**: ``POST /agentik/conversations/{id}/send`` streams through gunicorn → gRPC
   → engine → fake LLM and back.

Reported per phase: time to first byte (response headers) and to first token (first
text chunk / ``append_text`` frame), whole-stream time, p50/p99 of each, events per second,
and the facade's overhead over the direct and the engine medians; then the peak RSS of
every process and the CPU time each used during the facade phase.

``--runs-per-second SECONDS`` adds a **short turns** phase: ``--rps-clients`` clients
(64) each create a conversation and ``send`` a short turn (``--rps-chunks`` text chunks,
5) in a loop for that long, through the facade and then straight to the engine over gRPC
(``CreateSession`` + ``Run``), reporting runs/s, time to first token and CPU per run of
each process. ``--streams 0`` skips the three stream phases.

Run: ``python -m bench.facade_bench --streams 512 --concurrency 64 --chunks 100``;
``python -m bench.facade_bench --streams 0 --runs-per-second 20`` for the short turns only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx

from agentik.parent_watch import env_for_child
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[1]
WAIT = 30.0


@dataclass
class Sample:
    first_byte: float
    first_token: float
    total: float
    events: int


@dataclass
class Phase:
    name: str
    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    errors: int = 0

    def stat(self, attribute: str, q: float) -> float:
        values: list[float] = sorted(getattr(s, attribute) for s in self.samples)
        if not values:
            return float("nan")
        if q == 0.5:
            return statistics.median(values)
        return values[min(len(values) - 1, round(q * (len(values) - 1)))]

    @property
    def events_per_second(self) -> float:
        return sum(s.events for s in self.samples) / self.wall if self.wall else 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _proc_kib(pid: int, key: str, file: str = "status") -> int:
    """A ``/proc/<pid>/<file>`` field in KiB (``VmHWM``, ``VmRSS``, ``Pss``); 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/{file}").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _peak_rss_kib(pid: int) -> int:
    """VmHWM: the peak resident set of a process, in KiB (0 when it is gone)."""
    return _proc_kib(pid, "VmHWM")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far, in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


async def _direct_stream(client: httpx.AsyncClient, base_url: str, chunks: int) -> Sample:
    body = {
        "model": "bench",
        "stream": True,
        "messages": [{"role": "user", "content": f"go [[chunks:{chunks}]]"}],
    }
    start = time.perf_counter()
    first_token = 0.0
    events = 0
    async with client.stream("POST", f"{base_url}/chat/completions", json=body) as response:
        first_byte = time.perf_counter() - start
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content"' in line:
                events += 1
                if not first_token:
                    first_token = time.perf_counter() - start
    return Sample(first_byte, first_token, time.perf_counter() - start, events)


async def _facade_stream(client: httpx.AsyncClient, base_url: str, chunks: int) -> Sample:
    created = await client.post(f"{base_url}/agentik/conversations", json={})
    conversation_id = created.json()["id"]
    start = time.perf_counter()
    first_token = 0.0
    events = 0
    path = f"{base_url}/agentik/conversations/{conversation_id}/send"
    async with client.stream("POST", path, json={"text": f"go [[chunks:{chunks}]]"}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"send answered {response.status_code}: {await response.aread()!r}")
        first_byte = time.perf_counter() - start
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                events += 1
                if not first_token and line == "event: append_text":
                    first_token = time.perf_counter() - start
    return Sample(first_byte, first_token, time.perf_counter() - start, events)


BEARER: dict[str, str] = {}
"""``{"Authorization": "Bearer …"}`` with ``--token``: the stack then requires it."""


def _metadata() -> list[tuple[str, str]]:
    return [(k.lower(), v) for k, v in BEARER.items()]


async def _engine_stream(stub: pb_grpc.AgentEngineAsyncStub, chunks: int) -> Sample:
    session = await stub.CreateSession(pb.CreateSessionRequest(), metadata=_metadata())
    text = pb.ContentPart(text=pb.TextPart(text=f"go [[chunks:{chunks}]]"))
    request = pb.RunRequest(
        session_id=session.id, messages=[pb.Message(role=pb.ROLE_USER, content=[text])]
    )
    start = time.perf_counter()
    first_byte = first_token = 0.0
    events = 0
    async for event in stub.Run(request, metadata=_metadata()):
        events += 1
        if not first_byte:
            first_byte = time.perf_counter() - start
        if not first_token and event.HasField("text_message_content"):
            first_token = time.perf_counter() - start
    return Sample(first_byte, first_token, time.perf_counter() - start, events)


async def _run_engine_phase(target: str, streams: int, concurrency: int, chunks: int) -> Phase:
    async with grpc.aio.insecure_channel(target) as channel:
        stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
        return await _run_phase(
            "engine", lambda _: _engine_stream(stub, chunks), streams, concurrency
        )


async def _run_engine_timed(target: str, clients: int, seconds: float, chunks: int) -> Phase:
    async with grpc.aio.insecure_channel(target) as channel:
        stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
        return await _run_timed(
            "engine short turns", lambda _: _engine_stream(stub, chunks), clients, seconds
        )


async def _run_timed(
    name: str,
    one: Callable[[httpx.AsyncClient], Awaitable[Sample]],
    clients: int,
    seconds: float,
) -> Phase:
    """``clients`` closed loops of ``one`` for ``seconds``; runs still open then finish."""
    phase = Phase(name)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=WAIT, limits=limits, headers=BEARER) as client:
        await one(client)  # warm-up
        start = time.perf_counter()
        deadline = start + seconds

        async def worker() -> None:
            while time.perf_counter() < deadline:
                try:
                    phase.samples.append(await one(client))
                except (httpx.HTTPError, grpc.RpcError, RuntimeError) as exc:
                    phase.errors += 1
                    print(f"{name}: {exc}", file=sys.stderr)

        await asyncio.gather(*(worker() for _ in range(clients)))
        phase.wall = time.perf_counter() - start
    return phase


async def _run_phase(
    name: str,
    one: Callable[[httpx.AsyncClient], Awaitable[Sample]],
    streams: int,
    concurrency: int,
) -> Phase:
    phase = Phase(name)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=WAIT, limits=limits, headers=BEARER) as client:
        await one(client)  # warm-up: connections, imports, first-run costs
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(streams):
            queue.put_nowait(index)

        async def worker() -> None:
            while not queue.empty():
                queue.get_nowait()
                try:
                    phase.samples.append(await one(client))
                except (httpx.HTTPError, grpc.RpcError, RuntimeError) as exc:
                    phase.errors += 1
                    print(f"{name}: {exc}", file=sys.stderr)

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        phase.wall = time.perf_counter() - start
    return phase


def start_fake_llm(backlog: int, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """The benchmarks' fake LLM (:mod:`tests.fakes.aio_openai`: the fake OpenAI API's answers
    from one asyncio loop, for half the CPU of the threaded fake the tests use) on a free
    port, listening with ``backlog`` (0: 128); the process and its base URL."""
    fake = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fakes.aio_openai",
            "--port",
            "0",
            "--backlog",
            str(backlog or 128),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert fake.stdout is not None
    return fake, fake.stdout.readline().strip()


class Processes:
    """The fake LLM, the engine and gunicorn, each its own process."""

    def __init__(
        self,
        workers: int,
        threads: int,
        token: str = "",
        store: str = "memory://",
        engines: int = 1,
        *,
        fake_backlog: int = 0,
        engine_workers: int = 1,
    ) -> None:
        """``fake_backlog``: the fake LLM's listen backlog (0: 128; too short a backlog drops
        SYNs when hundreds of runs connect at once). ``engine_workers``: processes behind each
        engine address (``AGENTIK_ENGINE_WORKERS``; more than one needs PostgreSQL)."""
        self.http_port = _free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if token:
            env["AGENTIK_TOKENS"] = f"bench:{token}"
            # One principal is the whole load here: no share of the run slots of its own.
            env["AGENTIK_CALLER_RUN_SHARE"] = "1"
        env.pop("AGENTIK_CONFIG", None)
        self.fake, self.llm_url = start_fake_llm(fake_backlog, env_for_child(env))
        addresses = [f"127.0.0.1:{_free_port()}" for _ in range(engines)]
        self.grpc_target = addresses[0]
        env.update(
            AGENTIK_HTTP_ADDR=f"127.0.0.1:{self.http_port}",
            AGENTIK_ENGINE_TARGET=(addresses[0] if engines == 1 else "ipv4:" + ",".join(addresses)),
            AGENTIK_STORE=store,
            OPENAI_BASE_URL=self.llm_url,
            OPENAI_API_KEY="bench",
            AGENTIK_WEB_WORKERS=str(workers),
            AGENTIK_WEB_THREADS=str(threads),
            AGENTIK_LOG_LEVEL="WARNING",
            AGENTIK_ENGINE_WORKERS=str(engine_workers),
        )
        self.engines = [
            subprocess.Popen(
                [sys.executable, "-m", "engine_service"],
                cwd=ROOT,
                env=env_for_child({**env, "AGENTIK_GRPC_ADDR": address}),
            )
            for address in addresses
        ]
        self.web = subprocess.Popen(
            [sys.executable, "-m", "agentik.cli", "web"],
            cwd=ROOT,
            env=env_for_child(env),
        )
        self.base_url = f"http://127.0.0.1:{self.http_port}"
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _processes(*processes: subprocess.Popen[Any]) -> list[subprocess.Popen[Any]]:
        return list(processes)

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            for process in self._processes(self.fake, *self.engines, self.web):
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the stack did not become healthy")

    def pids(self) -> dict[str, int]:
        named = {"fake LLM": self.fake.pid}
        for number, engine in enumerate(self.engines, start=1):
            name = "engine" if number == 1 else f"engine {number}"
            workers = _children(engine.pid)  # AGENTIK_ENGINE_WORKERS > 1: a supervisor
            named[f"{name} supervisor" if workers else name] = engine.pid
            for index, pid in enumerate(workers, start=1):
                named[f"{name} worker {index}"] = pid
        named["gunicorn master"] = self.web.pid
        for number, pid in enumerate(_children(self.web.pid), start=1):
            named[f"gunicorn worker {number}"] = pid
        named["bench client"] = os.getpid()
        return named

    def peak_rss(self) -> dict[str, int]:
        return {name: _peak_rss_kib(pid) for name, pid in self.pids().items()}

    def idle_memory(self, workers: int) -> dict[str, dict[str, float]]:
        """VmRSS and PSS (MiB) of each process once every worker has booted, no traffic yet."""
        deadline = time.monotonic() + WAIT
        while len(_children(self.web.pid)) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)  # let the last worker finish loading the app
        return {
            name: {
                "rss_mib": round(_proc_kib(pid, "VmRSS") / 1024, 1),
                "pss_mib": round(_proc_kib(pid, "Pss", "smaps_rollup") / 1024, 1),
            }
            for name, pid in self.pids().items()
            if name != "bench client"
        }

    def cpu(self) -> dict[str, float]:
        return {name: _cpu_seconds(pid) for name, pid in self.pids().items()}

    def stop(self) -> None:
        for process in self._processes(self.web, *self.engines, self.fake):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # SIGINT: ignored in background jobs
        for process in self._processes(self.web, *self.engines, self.fake):
            try:
                process.wait(WAIT)
            except subprocess.TimeoutExpired:
                process.kill()


def _row(phase: Phase) -> dict[str, float]:
    out: dict[str, float] = {}
    for attribute in ("first_byte", "first_token", "total"):
        out[f"{attribute}_p50_ms"] = round(phase.stat(attribute, 0.5) * 1000, 2)
        out[f"{attribute}_p99_ms"] = round(phase.stat(attribute, 0.99) * 1000, 2)
    out["events_per_s"] = round(phase.events_per_second)
    out["streams"] = len(phase.samples)
    out["errors"] = phase.errors
    out["wall_s"] = round(phase.wall, 2)
    return out


def _short_turns_report(phase: Phase, cpu: dict[str, float]) -> dict[str, object]:
    runs = len(phase.samples)
    return {
        **_row(phase),
        "runs_per_s": round(runs / phase.wall, 1) if phase.wall else 0.0,
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "cpu_ms_per_run": {k: round(v * 1000 / runs, 2) if runs else 0.0 for k, v in cpu.items()},
    }


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def _report(
    direct: Phase, engine: Phase, facade: Phase, rss: dict[str, int], cpu: dict[str, float]
) -> dict[str, object]:
    def overhead(over: Phase, base: Phase) -> dict[str, float]:
        return {
            f"{a}_p50_ms": round((over.stat(a, 0.5) - base.stat(a, 0.5)) * 1000, 2)
            for a in ("first_byte", "first_token", "total")
        }

    return {
        "direct": _row(direct),
        "engine": _row(engine),
        "facade": _row(facade),
        "facade_overhead_over_direct": overhead(facade, direct),
        "facade_overhead_over_engine": overhead(facade, engine),
        "peak_rss_mib": {k: round(v / 1024, 1) for k, v in rss.items()},
        "facade_phase_cpu_s": {k: round(v, 2) for k, v in cpu.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=512, help="streams per phase")
    parser.add_argument("--concurrency", type=int, default=64, help="streams open at once")
    parser.add_argument("--chunks", type=int, default=100, help="text chunks per answer")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--threads", type=int, default=64, help="threads per worker")
    parser.add_argument(
        "--runs-per-second",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="also run the short-turns phase (runs/s) for this long; 0 skips it",
    )
    parser.add_argument("--rps-clients", type=int, default=64, help="short-turn clients")
    parser.add_argument("--rps-chunks", type=int, default=5, help="text chunks per short turn")
    parser.add_argument(
        "--token",
        default="",
        help="run the stack with this bearer token required (AGENTIK_TOKENS) and send it",
    )
    parser.add_argument(
        "--store",
        default="memory://",
        help="the engines' store: memory://, sqlite:///PATH or postgresql://... (shared)",
    )
    parser.add_argument(
        "--engines", type=int, default=1, help="engine processes (several need PostgreSQL)"
    )
    options = parser.parse_args(argv)
    if options.token:
        BEARER["Authorization"] = f"Bearer {options.token}"

    processes = Processes(
        options.workers, options.threads, options.token, options.store, options.engines
    )
    results: dict[str, object] = {"options": vars(options)}
    try:
        results["idle_memory"] = processes.idle_memory(options.workers)
        if options.streams > 0:
            results.update(_stream_phases(processes, options))
        if options.runs_per_second > 0:
            before = processes.cpu()
            turns = asyncio.run(
                _run_timed(
                    "facade short turns",
                    lambda c: _facade_stream(c, processes.base_url, options.rps_chunks),
                    options.rps_clients,
                    options.runs_per_second,
                )
            )
            cpu = _cpu_delta(before, processes.cpu())
            results["facade_short_turns"] = _short_turns_report(turns, cpu)
            before = processes.cpu()
            turns = asyncio.run(
                _run_engine_timed(
                    processes.grpc_target,
                    options.rps_clients,
                    options.runs_per_second,
                    options.rps_chunks,
                )
            )
            cpu = _cpu_delta(before, processes.cpu())
            results["engine_short_turns"] = _short_turns_report(turns, cpu)
        results["peak_rss_mib"] = {k: round(v / 1024, 1) for k, v in processes.peak_rss().items()}
    finally:
        processes.stop()
    print(json.dumps(results, indent=2))


def _stream_phases(processes: Processes, options: argparse.Namespace) -> dict[str, object]:
    """The direct, engine and facade stream phases and their report."""
    direct = asyncio.run(
        _run_phase(
            "direct",
            lambda c: _direct_stream(c, processes.llm_url, options.chunks),
            options.streams,
            options.concurrency,
        )
    )
    engine = asyncio.run(
        _run_engine_phase(
            processes.grpc_target, options.streams, options.concurrency, options.chunks
        )
    )
    before = processes.cpu()
    facade = asyncio.run(
        _run_phase(
            "facade",
            lambda c: _facade_stream(c, processes.base_url, options.chunks),
            options.streams,
            options.concurrency,
        )
    )
    cpu = _cpu_delta(before, processes.cpu())
    return _report(direct, engine, facade, processes.peak_rss(), cpu)


if __name__ == "__main__":
    main()
