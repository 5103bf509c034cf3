"""What configured agents cost: idle memory and time per run, with 0 and ``--agents`` agents.

Each setting runs in a fresh Python process: the engine is built from a TOML file with that
many ``[[agents]]`` tables (each its own model name, prompt and tool globs), started on an
in-memory store with the offline model, and after ``--runs`` runs (the first ``--warmup`` not
counted) it reports its resident memory (``VmRSS``, after a GC) and the median time of a run
from ``start_run`` to its last event, on the default agent and on the last configured one.

Run: ``python -m bench.agents_bench --agents 20 --runs 300`` (docs/performance.md, "Several
agents"); ``--openai`` measures memory only, every agent with an OpenAI-compatible model of
its own (an HTTP client each).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _config(agents: int, openai: bool) -> str:
    lines = ['[llm]\nbase_url = "http://127.0.0.1:9/v1"\napi_key = "k"\n'] if openai else []
    for number in range(agents):
        lines += [
            "[[agents]]",
            f'name = "agent{number}"',
            f'description = "Agent number {number}"',
            f'model = "model-{number}"',
            f'system_prompt = "You are agent {number}."',
            'tools = ["calculate", "current_*"]',
            "",
        ]
    return "\n".join(lines)


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def _measure(config: Path, runs: int, warmup: int) -> dict[str, object]:
    from agentik.config import load_settings
    from engine_service.build import build_engine
    from engine_service.core.caller import Caller
    from engine_service.core.models import Message, Role, RunInput, TextPart

    engine = build_engine(load_settings(config, {"AGENTIK_STORE": "memory://"}))
    await engine.start()
    caller = Caller("bench")
    names = [profile.name for profile in engine.agents]
    timings: dict[str, list[float]] = {}
    for agent in (names[0], names[-1]):
        spent = timings.setdefault(agent, [])
        for number in range(runs + warmup):
            session = await engine.create_session(caller, agent=agent)
            message = Message(id="", role=Role.USER, content=[TextPart(f"hello {number}")])
            started = time.perf_counter()
            handle = await engine.start_run(
                caller, RunInput(session_id=session.id, messages=[message])
            )
            async for _ in engine.run_events(handle):
                pass
            if number >= warmup:
                spent.append((time.perf_counter() - started) * 1000)
    gc.collect()
    rss = _rss_kib()
    await engine.shutdown(1.0)
    return {
        "agents": len(names),
        "rss_kib": rss,
        "run_ms": {a: round(statistics.median(ms), 3) for a, ms in timings.items() if ms},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument(
        "--openai",
        action="store_true",
        help="memory only: every agent an OpenAI-compatible model of its own (no runs)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = asyncio.run(_measure(Path(args.child), args.runs, args.warmup))
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as directory:
        for agents in (0, args.agents):
            config = Path(directory) / f"agents{agents}.toml"
            config.write_text(_config(agents, args.openai))
            done = subprocess.run(
                [sys.executable, "-m", "bench.agents_bench", "--child", str(config),
                 "--runs", str(0 if args.openai else args.runs),
                 "--warmup", str(0 if args.openai else args.warmup)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            print(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
