"""The engine bench's tables: what it prints at the end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bench.engine.floor import floor_table
from bench.engine.interrupts import INTERRUPT_LOAD_TEXT
from bench.engine.measure import Phase, ms


def marginal_ms_per_event(long: Phase, short: Phase) -> float:
    """Engine CPU per extra event: the difference of two run lengths at one concurrency."""
    if not long.samples or not short.samples:
        return float("nan")
    long_events = long.events / len(long.samples)
    short_events = short.events / len(short.samples)
    if long_events <= short_events:
        return float("nan")
    return (long.engine_ms_per_run - short.engine_ms_per_run) / (long_events - short_events)


def p50_p99(phase: Phase, attribute: str) -> str:
    return f"{ms(phase.q(attribute, 0.5))} / {ms(phase.q(attribute, 0.99))}"


def streams_table(
    direct: dict[int, Phase], engine: dict[int, Phase], short: Phase
) -> Iterator[str]:
    yield (
        "| path | conc | streams | first event p50 / p99 | first token p50 / p99 "
        "| TTFT over direct (p50) | stream p50 | events/s | engine CPU ms/event "
        "| engine CPU ms/run | engine busy | others busy |"
    )
    yield "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    rows: list[tuple[Phase, Phase | None]] = []
    for concurrency in sorted(set(direct) | set(engine)):
        if concurrency in direct:
            rows.append((direct[concurrency], None))
        if concurrency in engine:
            rows.append((engine[concurrency], direct.get(concurrency)))
    rows.append((short, None))
    for phase, base in rows:
        is_engine = phase.name.startswith("engine")
        overhead = (
            f"+{ms(phase.q('first_token', 0.5) - base.q('first_token', 0.5))}"
            if base is not None
            else ""
        )
        errors = f" ({phase.errors} errors)" if phase.errors else ""
        engine_cols = (
            f"{phase.engine_ms_per_event:.3f} | {phase.engine_ms_per_run:.1f} "
            f"| {100 * phase.cpu.engine / phase.wall:.0f}%"
            if is_engine and phase.wall
            else " |  | "
        )
        others = phase.cpu.others / phase.wall if phase.wall else 0.0
        yield (
            f"| {phase.name} | {phase.concurrency} | {len(phase.samples)}{errors} "
            f"| {p50_p99(phase, 'first_event')} | {p50_p99(phase, 'first_token')} "
            f"| {overhead} | {ms(phase.q('total', 0.5))} | {phase.events_per_s:,.0f} "
            f"| {engine_cols} | {others:.2f} cores |"
        )


def breakdown_table(engine: dict[int, Phase], short: Phase) -> Iterator[str]:
    """Where the time to first token goes, from the engine's own event stamps (p50)."""
    yield (
        "| conc | sent → RUN_STARTED stamped | → received | sent → first token stamped "
        "| → received |"
    )
    yield "|---:|---:|---:|---:|---:|"
    for phase in [*(engine[c] for c in sorted(engine)), short]:
        yield (
            f"| {phase.concurrency}{' (short)' if phase is short else ''} "
            f"| {ms(phase.q('started_stamp', 0.5))} | {ms(phase.q('first_event', 0.5))} "
            f"| {ms(phase.q('token_stamp', 0.5))} | {ms(phase.q('first_token', 0.5))} |"
        )


def slow_table(phases: list[Phase]) -> Iterator[str]:
    yield (
        "| path | start | streams | concurrent | first token p50 / p99 | stream p50 "
        "| engine busy | others busy |"
    )
    yield "|---|---|---:|---:|---:|---:|---:|---:|"
    for phase in phases:
        errors = f" ({phase.errors} errors)" if phase.errors else ""
        busy = (
            f"{100 * phase.cpu.engine / phase.wall:.0f}%"
            if phase.name.startswith("engine") and phase.wall
            else ""
        )
        others = phase.cpu.others / phase.wall if phase.wall else 0.0
        yield (
            f"| {phase.name} | {phase.note} | {len(phase.samples)}{errors} "
            f"| {phase.concurrency} | {p50_p99(phase, 'first_token')} "
            f"| {ms(phase.q('total', 0.5))} | {busy} | {others:.2f} cores |"
        )


def report(
    results: dict[str, Any],
    direct: dict[int, Phase],
    engine: dict[int, Phase],
    short: Phase,
    slow: list[Phase],
    floor: list[Phase],
) -> None:
    notes = results["machine"]
    print(
        f"\n## Engine (gRPC) bench: {notes['cpus']} CPUs ({notes['cpu_model']}), "
        f"Python {notes['python']}, grpcio {notes['grpcio']}, store {results['store']}, "
        f"load average {notes['loadavg_at_start']} at start, {results['loadavg_at_end']} "
        "at end\n"
    )
    print("Times in ms. *others busy*: CPU that processes outside the bench used meanwhile.\n")
    print("### Streams (closed loop, each run on a new session)\n")
    for line in streams_table(direct, engine, short):
        print(line)
    marginal = results["marginal_engine_cpu_ms_per_event"]
    if marginal is not None:
        print(
            f"\nMarginal engine CPU per streamed event (c={short.concurrency}, long runs minus "
            f"short turns): **{marginal:.3f} ms**; short turns: "
            f"**{len(short.samples) / short.wall:.1f} runs/s**"
        )
    print("\n### Time to first token, where it goes (p50, ms from Run sent)\n")
    for line in breakdown_table(engine, short):
        print(line)
    if floor:
        print(
            "\n### gRPC floor: a bare grpc.aio servicer yielding prebuilt events "
            f"({floor[0].events // max(1, len(floor[0].samples))} per stream), no engine\n"
        )
        for line in floor_table(floor):
            print(line)
    print("\n### Slow streams\n")
    for line in slow_table(slow):
        print(line)
    print("\n### Interrupt (ms from Interrupt sent, on a hanging LLM stream)\n")
    print(
        "| other streams running | tries | RUN_FINISHED p50 / p99 "
        "| stream ended p50 / p99 / max | Interrupt RTT p50 |"
    )
    print("|---:|---:|---:|---:|---:|")
    for key in ("interrupt", "interrupt_loaded"):
        if key not in results:
            continue
        it = results[key]
        failed = f" ({it['not_cancelled']} not cancelled)" if it["not_cancelled"] else ""
        load = f"{it['other_streams']} (`{INTERRUPT_LOAD_TEXT}`)" if it["other_streams"] else "0"
        print(
            f"| {load} | {it['tries']}{failed}"
            f" | {it['run_finished_p50_ms']:.2f} / {it['run_finished_p99_ms']:.2f} "
            f"| {it['stream_end_p50_ms']:.2f} / {it['stream_end_p99_ms']:.2f} / "
            f"{it['stream_end_max_ms']:.2f} | {it['interrupt_rtt_p50_ms']:.2f} |"
        )
    print("\n### Engine memory (MiB)\n")
    print("| idle after start (VmRSS) | idle after the load (VmRSS) | peak (VmHWM) |")
    print("|---:|---:|---:|")
    print(
        f"| {results['rss_idle_start_kib'] / 1024:.1f} "
        f"| {results['rss_idle_after_kib'] / 1024:.1f} | {results['hwm_kib'] / 1024:.1f} |"
    )
