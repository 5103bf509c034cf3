"""``batch_events`` on and off, in one engine, alternating (issue 25): gRPC messages per run,
engine CPU per run, and time to the first text chunk, at 1 and at N concurrent clients.

The fake LLM and the engine run as processes (:class:`bench.engine.stack.Stack`); this
process is the client (one ``grpc.aio`` channel). Each round runs the same number of runs
with batches and without, in alternating order, so both see the same machine load; the
medians over the rounds are printed as JSON.

Run: ``python -m bench.batch_bench --clients 1,64 --runs 128 --rounds 3 --chunks 100``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.engine.measure import WAIT
from bench.engine.stack import Stack


async def one_run(
    stub: pb_grpc.AgentEngineAsyncStub, text: str, batch: bool
) -> tuple[int, int, float]:
    """One Run read to its end: (messages, events, seconds to the first text chunk)."""
    request = pb.RunRequest(
        session_id=f"batch-{uuid.uuid4().hex}",
        create_session=True,
        messages=[
            pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))])
        ],
        batch_events=batch,
    )
    start = time.perf_counter()
    first = 0.0
    messages = events = 0
    async for message in stub.Run(request, timeout=WAIT):
        messages += 1
        for event in message.batch or (message,):
            events += 1
            if not first and event.WhichOneof("kind") == "text_message_content":
                first = time.perf_counter() - start
    return messages, events, first


async def phase(
    stack: Stack,
    stub: pb_grpc.AgentEngineAsyncStub,
    clients: int,
    runs: int,
    text: str,
    batch: bool,
) -> dict[str, Any]:
    remaining = iter(range(runs))
    results: list[tuple[int, int, float]] = []

    async def worker() -> None:
        for _ in remaining:
            results.append(await one_run(stub, text, batch))

    before = stack.cpu().engine
    await asyncio.gather(*(worker() for _ in range(clients)))
    cpu = stack.cpu().engine - before
    firsts = sorted(r[2] for r in results)
    return {
        "messages_per_run": sum(r[0] for r in results) / len(results),
        "events_per_run": sum(r[1] for r in results) / len(results),
        "engine_cpu_ms_per_run": cpu * 1000 / len(results),
        "first_token_p50_ms": statistics.median(firsts) * 1000,
        "first_token_p99_ms": firsts[min(len(firsts) - 1, int(len(firsts) * 0.99))] * 1000,
    }


async def main_async(options: argparse.Namespace) -> dict[str, Any]:
    stack = Stack("sqlite", 1024)
    text = f"[[chunks:{options.chunks}]] bench"
    out: dict[str, Any] = {}
    try:
        async with grpc.aio.insecure_channel(stack.target) as channel:
            await stack.wait_serving(channel)
            stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
            await asyncio.gather(*(one_run(stub, text, True) for _ in range(8)))  # warm up
            for clients in options.clients:
                rounds: dict[str, list[dict[str, Any]]] = {"single": [], "batched": []}
                for index in range(options.rounds):
                    order = (False, True) if index % 2 == 0 else (True, False)
                    for batch in order:
                        result = await phase(stack, stub, clients, options.runs, text, batch)
                        rounds["batched" if batch else "single"].append(result)
                out[str(clients)] = {
                    kind: {key: round(statistics.median(r[key] for r in rs), 2) for key in rs[0]}
                    for kind, rs in rounds.items()
                }
                out[str(clients)]["rounds"] = rounds
    finally:
        stack.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", type=lambda s: [int(x) for x in s.split(",")], default=[1, 64])
    parser.add_argument("--runs", type=int, default=128, help="runs per phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians")
    parser.add_argument("--chunks", type=int, default=100, help="text chunks per answer")
    parser.add_argument("--out", type=Path, default=Path("batch_bench.json"), help="every round")
    options = parser.parse_args()
    result = asyncio.run(main_async(options))
    options.out.write_text(json.dumps(result, indent=2))
    for clients, kinds in result.items():
        print(clients, "clients:", json.dumps({k: v for k, v in kinds.items() if k != "rounds"}))


if __name__ == "__main__":
    main()
