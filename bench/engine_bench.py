"""The engine over gRPC against the fake LLM: latency, throughput, CPU, interrupts, memory.

The fake OpenAI server and the engine run as separate processes (started here, on free
ports), so each one's CPU time can be read from ``/proc/<pid>/stat`` (utime + stime)
before and after a phase, and its memory from ``/proc/<pid>/status``. The bench client
is this process: one asyncio loop, one ``grpc.aio`` channel, and a minimal raw HTTP/1.1
client for the direct baseline.

Phases, in order:

* **direct**: streams read straight from the fake LLM with a raw keep-alive HTTP/1.1
  client (no SDK), at each concurrency level: time to the first text chunk, chunks/s.
  The floor everything else is compared with.
* **engine**: ``Run`` over gRPC, each run on a new session, at each concurrency level
  (closed loop: N workers, each starting its next run when its last one ended): time to
  the first event (RUN_STARTED) and to the first TEXT_MESSAGE_CONTENT, the latter's
  overhead over the direct time to first token, events/s, engine CPU ms per event and
  per run. The engine stamps every event with ``time.time()`` on this same host, so the
  time to first token is also split into "stamped by the engine" and "received".
* **short turns**: many clients doing short turns: runs/s and engine CPU per run. With
  the long runs at the same concurrency it gives the *marginal* engine CPU per streamed
  event (the per-run fixed cost taken out).
* **slow streams**: many concurrent streams whose chunks come slowly (``[[slow:S]]``),
  direct and through the engine, started all at once (burst) and staggered over a ramp
  (steady traffic): p50/p99 time to first token.
* **interrupt**: a run on a ``[[hang]]`` stream; once its first text arrived, Interrupt is
  sent; measured until RUN_FINISHED (cancelled) arrived and until the stream ended; then
  again while other streams run.
* **memory**: the engine's VmRSS idle after start-up and idle after the load, and its
  VmHWM (peak).

Every phase also records how much CPU other processes on the machine used meanwhile
(``/proc/stat`` minus ours), since a shared machine skews latencies but hardly CPU/event.

Run: ``python -m bench.engine_bench`` (the defaults take about three minutes on 2
cores); ``--help`` lists the knobs. ``--py-spy FILE`` samples the engine with py-spy
(``pip install py-spy``) during one phase and prints its hotspots; the latency and CPU
numbers of such a run are inflated by the sampling.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.engine.floor import floor_phases, serve_floor
from bench.engine.interrupts import INTERRUPT_LOAD_TEXT, Interrupts, interrupt_phase
from bench.engine.measure import Phase, machine_notes, progress, status_kib
from bench.engine.profile import print_hotspots, profiled
from bench.engine.report import marginal_ms_per_event, report
from bench.engine.stack import Stack
from bench.engine.streams import direct_phase, engine_phase

# -- main -------------------------------------------------------------------------------


def concurrency_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.engine_bench",
        description="Benchmark the engine over gRPC against the fake LLM (see the module doc).",
    )
    add = parser.add_argument
    add("--runs", type=int, default=200, help="streams per concurrency level (at least 2x it)")
    add("--concurrency", type=concurrency_list, default=[1, 16, 64, 256], help="e.g. 1,16,64")
    add("--chunks", type=int, default=200, help="text chunks per streamed answer")
    add("--short-runs", type=int, default=640, help="short turns in the runs/s phase")
    add("--short-concurrency", type=int, default=64, help="clients in the runs/s phase")
    add("--short-chunks", type=int, default=5, help="text chunks of a short turn")
    add("--slow-streams", type=int, default=256, help="concurrent slow streams")
    add("--slow-delay", type=float, default=0.05, help="seconds before each slow chunk")
    add("--slow-chunks", type=int, default=20, help="text chunks per slow stream")
    add(
        "--slow-ramp",
        type=float,
        default=1.0,
        help="seconds over which the staggered slow streams start (0: burst only)",
    )
    add("--slow-waves", type=int, default=3, help="staggered slow streams per client")
    add("--interrupts", type=int, default=40, help="interrupt tries (>= 30 for a median)")
    add(
        "--interrupt-load",
        type=int,
        default=32,
        help="streams running during the second interrupt series (0: skip it)",
    )
    add(
        "--floor-concurrency",
        type=concurrency_list,
        default=[1, 64],
        help="levels of the gRPC floor phase: a bare grpc.aio servicer streaming prebuilt "
        "events, no engine (an empty list is not allowed; use --no-floor)",
    )
    add("--no-floor", action="store_true", help="skip the gRPC floor phase")
    add("--serve-floor", metavar="ADDR", help=argparse.SUPPRESS)
    add("--store", choices=("sqlite", "memory"), default="sqlite", help="the engine's store")
    add(
        "--store-url",
        default="",
        help="the engine's store as a URL (postgresql://...); overrides --store",
    )
    add("--fake-backlog", type=int, default=1024, help="the fake's listen backlog (0: its own 5)")
    add("--json", type=Path, help="also write every number to this JSON file")
    add("--py-spy", type=Path, metavar="FILE", help="sample the engine with py-spy into FILE")
    add(
        "--py-spy-phase",
        choices=("streams", "short", "slow"),
        default="streams",
        help="which engine phase --py-spy samples",
    )
    add("--py-spy-native", action="store_true", help="with --py-spy: C frames too (slower)")
    add("--py-spy-rate", type=int, default=200, help="py-spy samples per second")
    add("--top", type=int, default=25, help="hotspot rows to print with --py-spy")
    return parser


async def bench(options: argparse.Namespace, stack: Stack, results: dict[str, Any]) -> None:
    """Every phase, in order; fills ``results`` and prints the report."""
    channel = grpc.aio.insecure_channel(stack.target)
    stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
    try:
        await stack.wait_serving(channel)
        await asyncio.sleep(1.0)
        results["rss_idle_start_kib"] = status_kib(stack.engine.pid, "VmRSS")

        text = f"go [[chunks:{options.chunks}]]"
        direct: dict[int, Phase] = {}
        engine: dict[int, Phase] = {}
        for concurrency in options.concurrency:
            streams = max(options.runs, 2 * concurrency)
            direct[concurrency] = await direct_phase("direct", stack, concurrency, streams, text)
            progress(f"direct c={concurrency}", direct[concurrency])

        with profiled(options, stack, "streams"):
            for concurrency in options.concurrency:
                streams = max(options.runs, 2 * concurrency)
                engine[concurrency] = await engine_phase(
                    "engine", stack, stub, concurrency, streams, text
                )
                progress(f"engine c={concurrency}", engine[concurrency])

        with profiled(options, stack, "short"):
            short = await engine_phase(
                "engine, short turns",
                stack,
                stub,
                options.short_concurrency,
                options.short_runs,
                f"hi [[chunks:{options.short_chunks}]]",
            )
        progress("short turns", short)

        slow_text = f"go [[slow:{options.slow_delay}]] [[chunks:{options.slow_chunks}]]"
        n = options.slow_streams
        slow: list[Phase] = []
        shapes = [("burst", 0.0, 1)]
        if options.slow_ramp > 0:
            shapes.append((f"staggered over {options.slow_ramp:g} s", options.slow_ramp, 0))
        with profiled(options, stack, "slow"):
            for note, ramp, waves in shapes:
                total = n * (waves or options.slow_waves)
                for name in ("direct slow", "engine slow"):
                    if name.startswith("direct"):
                        phase = await direct_phase(name, stack, n, total, slow_text, ramp)
                    else:
                        phase = await engine_phase(name, stack, stub, n, total, slow_text, ramp)
                    phase.note = note
                    slow.append(phase)
                    progress(f"{name} ({note})", phase)

        interrupts = await interrupt_phase(stub, options.interrupts)
        print("interrupts: done", file=sys.stderr)
        loaded: Interrupts | None = None
        if options.interrupt_load:
            loaded = await interrupt_phase(
                stub, options.interrupts, options.interrupt_load, INTERRUPT_LOAD_TEXT
            )
            print(
                f"interrupts with {options.interrupt_load} streams running: done", file=sys.stderr
            )

        floor: list[Phase] = []
        if not options.no_floor:
            floor = await floor_phases(options.floor_concurrency, options.runs, options.chunks + 6)

        await asyncio.sleep(2.0)
        results["rss_idle_after_kib"] = status_kib(stack.engine.pid, "VmRSS")
        results["hwm_kib"] = status_kib(stack.engine.pid, "VmHWM")
        results["fake_hwm_kib"] = status_kib(stack.fake.pid, "VmHWM")
        results["client_hwm_kib"] = status_kib(os.getpid(), "VmHWM")
    finally:
        await channel.close()

    results["loadavg_at_end"] = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    results["direct"] = {c: p.summary() for c, p in direct.items()}
    results["engine"] = {c: p.summary() for c, p in engine.items()}
    results["short"] = short.summary()
    results["grpc_floor"] = {p.concurrency: p.summary() for p in floor}
    results["slow"] = [{"name": p.name, "start": p.note, **p.summary()} for p in slow]
    results["interrupt"] = interrupts.summary(0)
    if loaded is not None:
        results["interrupt_loaded"] = loaded.summary(options.interrupt_load)
    same = engine.get(options.short_concurrency)
    results["marginal_engine_cpu_ms_per_event"] = (
        round(marginal_ms_per_event(same, short), 4) if same is not None else None
    )
    report(results, direct, engine, short, slow, floor)


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    if options.serve_floor:
        asyncio.run(serve_floor(options.serve_floor))
        return
    if min(options.runs, options.chunks, options.interrupts, options.slow_streams) < 1:
        raise SystemExit("--runs, --chunks, --interrupts and --slow-streams must be positive")
    results: dict[str, Any] = {
        "command": " ".join(["python -m bench.engine_bench", *sys.argv[1:]]),
        "options": {k: str(v) for k, v in vars(options).items()},
        "machine": machine_notes(),
        "store": "postgresql" if options.store_url else options.store,
    }
    started = time.perf_counter()
    stack = Stack(options.store, options.fake_backlog, options.store_url)
    try:
        asyncio.run(bench(options, stack, results))
    finally:
        stack.stop()
    results["duration_s"] = round(time.perf_counter() - started, 1)
    print(f"\n(bench took {results['duration_s']} s)")
    if options.py_spy:
        print_hotspots(options.py_spy, options.top)
    if options.json:
        options.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
