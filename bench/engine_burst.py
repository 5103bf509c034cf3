"""A burst of concurrent ``Run`` calls straight to the engine over gRPC (no facade).

Starts the fake LLM, one engine (and an idle facade) as processes, warms one run up, then
starts ``--runs`` runs at once over one ``grpc.aio`` channel, each asking the fake for
``--tokens`` chunks ``--token-delay`` seconds apart, and reports when each saw RUN_STARTED
and its first token (p50/p99), the wall time, and the CPU seconds every process used. Used
to attribute engine-side changes (docs/performance.md, "What each change bought"); attach
``py-spy record -p <engine pid>`` to see where the engine's time goes.

Run: ``python -m bench.engine_burst --runs 256 --store sqlite``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.facade_bench import Processes


async def _one(stub: pb_grpc.AgentEngineAsyncStub, text: str) -> tuple[float, float]:
    part = pb.ContentPart(text=pb.TextPart(text=text))
    request = pb.RunRequest(
        session_id=uuid.uuid4().hex,
        create_session=True,
        messages=[pb.Message(role=pb.ROLE_USER, content=[part])],
    )
    start = time.perf_counter()
    started = first = 0.0
    async for event in stub.Run(request):
        if not started:
            started = time.perf_counter() - start
        if not first and event.HasField("text_message_content"):
            first = time.perf_counter() - start
    return started, first


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _burst(target: str, runs: int, text: str, bursts: int) -> dict[str, float]:
    """``bursts`` bursts one after another on one channel (a second apart); the medians of
    their figures."""
    figures: list[dict[str, float]] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
        await _one(stub, text)
        for index in range(bursts):
            if index:
                await asyncio.sleep(1.0)
            began = time.perf_counter()
            results = await asyncio.gather(*(_one(stub, text) for _ in range(runs)))
            wall = time.perf_counter() - began
            started = [r[0] * 1000 for r in results]
            first = [r[1] * 1000 for r in results]
            figures.append(
                {
                    "wall_s": wall,
                    "run_started_p50_ms": statistics.median(started),
                    "run_started_p99_ms": _quantile(started, 0.99),
                    "first_token_p50_ms": statistics.median(first),
                    "first_token_p99_ms": _quantile(first, 0.99),
                }
            )
    return {
        key: round(statistics.median(f[key] for f in figures), 2 if key == "wall_s" else 1)
        for key in figures[0]
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=50)
    parser.add_argument("--token-delay", type=float, default=0.02)
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--bursts", type=int, default=1, help="bursts in a row; medians")
    options = parser.parse_args(argv)
    if options.runs < 1 or options.bursts < 1 or options.tokens < 1:
        parser.error("--runs, --bursts and --tokens must be positive")
    with tempfile.TemporaryDirectory() as workdir:
        store = (
            f"sqlite:///{Path(workdir) / 'bench.db'}" if options.store == "sqlite" else "memory://"
        )
        processes = Processes(1, 4, store=store, fake_backlog=1024)
        try:
            before = processes.cpu()
            text = f"go [[chunks:{options.tokens}]][[slow:{options.token_delay}]]"
            result = asyncio.run(_burst(processes.grpc_target, options.runs, text, options.bursts))
            after = processes.cpu()
        finally:
            processes.stop()
    cpu = {name: round(after[name] - before.get(name, 0.0), 2) for name in after}
    head = {"runs": options.runs, "bursts": options.bursts, "store": options.store}
    print(json.dumps({**head, **result, "cpu_s": cpu}))


if __name__ == "__main__":
    main()
