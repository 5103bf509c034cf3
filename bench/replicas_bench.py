"""Two engines on one PostgreSQL: how fast B sees A's run, and how fast B stops it.

Both engines run in this process (each with its own store: its own pool and listener, as
separate processes have) on real gRPC ports, with the fake OpenAI LLM in a thread.
Measured per run, medians and p90 over ``--runs``:

- follow: the delay between A's client receiving an event and B's follower receiving the
  same seq (both wait for A's write; B then for a NOTIFY and a read);
- interrupt: from sending ``Interrupt`` to B until A's caller has the run's last event;
- for comparison, the same interrupt sent to A itself.

    python -m bench.replicas_bench --store postgresql://postgres@127.0.0.1:5432/agentik_bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import grpc

from agentik.config import load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.build import build_model
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.registry import ToolRegistry
from engine_service.server import EngineServer
from engine_service.stores.postgres import PostgresSessionStore
from tests.fakes.fake_openai import FakeOpenAI


def _message(text: str) -> pb.Message:
    return pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))])


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p90_ms": round(ordered[int(len(ordered) * 0.9) - 1] * 1000, 2),
        "n": len(ordered),
    }


async def _follow_delay(a: Any, b: Any, thread: str) -> float:
    """Median delay, over one run's text events, between A's caller and B's follower."""
    await a.CreateSession(pb.CreateSessionRequest(session_id=thread))
    run = a.Run(pb.RunRequest(session_id=thread, messages=[_message("[[chunks:40]][[slow:0.01]]")]))
    first = await run.read()
    follow = b.Subscribe(pb.SubscribeRequest(session_id=thread, after_seq=first.seq))
    on_a: dict[int, float] = {}
    on_b: dict[int, float] = {}

    async def read_a() -> None:
        while (event := await run.read()) is not grpc.aio.EOF:
            on_a[event.seq] = time.perf_counter()

    async def read_b() -> None:
        while (event := await follow.read()) is not grpc.aio.EOF:
            on_b[event.seq] = time.perf_counter()
            if event.WhichOneof("kind") in ("run_finished", "run_error"):
                follow.cancel()
                return

    await asyncio.wait_for(asyncio.gather(read_a(), read_b()), 30)
    return statistics.median(on_b[s] - on_a[s] for s in on_a if s in on_b)


async def _interrupt_delay(a: Any, target: Any, thread: str) -> float:
    await a.CreateSession(pb.CreateSessionRequest(session_id=thread))
    run = a.Run(
        pb.RunRequest(session_id=thread, messages=[_message("[[chunks:2000]][[slow:0.01]]")])
    )
    for _ in range(5):
        await run.read()
    asked = time.perf_counter()
    await target.Interrupt(pb.InterruptRequest(session_id=thread))
    while (event := await run.read()) is not grpc.aio.EOF:
        if event.WhichOneof("kind") in ("run_finished", "run_error"):
            break
    return time.perf_counter() - asked


async def main(store_url: str, runs: int) -> dict[str, object]:
    with FakeOpenAI() as llm:
        settings = load_settings(
            None,
            {
                "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
                "OPENAI_BASE_URL": llm.base_url,
                "OPENAI_API_KEY": "bench",
                "AGENTIK_LLM_MAX_RETRIES": "0",
                "AGENTIK_SHUTDOWN_GRACE": "0",
            },
        )
        servers = []
        stubs = []
        channels = []
        for _ in range(2):
            engine = Engine(
                PostgresSessionStore(store_url),
                build_model(settings),
                ToolRegistry(),
                EngineLimits(event_retention=0),
            )
            server = EngineServer(engine, settings)
            await server.start()
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
            servers.append(server)
            channels.append(channel)
            stubs.append(pb_grpc.AgentEngineStub(channel))
        a, b = stubs
        stamp = time.time_ns()
        try:
            follow = [await _follow_delay(a, b, f"f{stamp}-{i}") for i in range(runs)]
            remote = [await _interrupt_delay(a, b, f"r{stamp}-{i}") for i in range(runs)]
            local = [await _interrupt_delay(a, a, f"l{stamp}-{i}") for i in range(runs)]
        finally:
            for channel in channels:
                await channel.close()
            for server in servers:
                await server.stop()
    return {
        "follow_delay_b_after_a": _stats(follow),
        "interrupt_via_b": _stats(remote),
        "interrupt_via_a": _stats(local),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a postgresql:// URL (a bench database)")
    parser.add_argument("--runs", type=int, default=20)
    options = parser.parse_args()
    print(json.dumps(asyncio.run(main(options.store, options.runs)), indent=2))
