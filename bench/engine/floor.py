"""The floor of the engine bench: a bare gRPC server streaming canned events, for what
gRPC alone costs."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.engine.measure import (
    ROOT,
    WAIT,
    Cpu,
    Phase,
    Sample,
    cpu_seconds,
    free_port,
    machine_busy_seconds,
    progress,
)
from bench.engine.stack import client_cpu
from bench.engine.streams import closed_loop

# -- the gRPC floor ----------------------------------------------------------------------


async def floor_run(
    request: pb.RunRequest, context: grpc.aio.ServicerContext[Any, Any]
) -> AsyncIterator[pb.Event]:
    """``Run`` that streams ``int(run_id)`` prebuilt TEXT_MESSAGE_CONTENT events, nothing else:
    what ``grpc.aio`` itself costs per streamed event, with no engine behind it."""
    event = pb.Event(
        seq=1,
        session_id=request.session_id,
        run_id=request.run_id,
        text_message_content=pb.TextMessageContent(message_id="m", delta="w1 "),
    )
    event.time.GetCurrentTime()
    for _ in range(int(request.run_id or 0)):
        yield event


async def serve_floor(address: str) -> None:
    """The floor server (``--serve-floor``): the real service name and method, until SIGTERM."""
    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(
        floor_run,
        request_deserializer=pb.RunRequest.FromString,
        response_serializer=pb.Event.SerializeToString,
    )
    service = pb.DESCRIPTOR.services_by_name["AgentEngine"].full_name
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service, {"Run": handler}),)
    )
    server.add_insecure_port(address)
    await server.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(None)


async def floor_stream(stub: pb_grpc.AgentEngineAsyncStub, events: int) -> Sample:
    sample = Sample()
    start = time.perf_counter()
    async for _ in stub.Run(pb.RunRequest(session_id="floor", run_id=str(events)), timeout=WAIT):
        sample.events += 1
        if sample.events == 1:
            sample.first_event = sample.first_token = time.perf_counter() - start
    sample.total = time.perf_counter() - start
    return sample


class FloorServer:
    """The floor servicer in its own process (``--serve-floor``), so its CPU can be read."""

    def __init__(self) -> None:
        self.target = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.engine_bench", "--serve-floor", self.target],
            cwd=ROOT,
            env=env,
        )

    def cpu(self) -> Cpu:
        return Cpu(cpu_seconds(self.process.pid), 0.0, client_cpu(), machine_busy_seconds())

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def floor_phases(levels: list[int], runs: int, events: int) -> list[Phase]:
    """Closed-loop streams against the floor server, one phase per concurrency level."""
    server = FloorServer()
    channel = grpc.aio.insecure_channel(server.target)
    stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
    phases: list[Phase] = []
    try:
        await asyncio.wait_for(channel.channel_ready(), WAIT)
        for concurrency in levels:
            await asyncio.gather(*(floor_stream(stub, 2) for _ in range(min(concurrency, 8))))
            phase = Phase("gRPC floor", concurrency)
            await closed_loop(
                phase, server.cpu, max(runs, 2 * concurrency), lambda _: floor_stream(stub, events)
            )
            phases.append(phase)
            progress(f"gRPC floor c={concurrency}", phase)
    finally:
        await channel.close()
        server.stop()
    return phases


def floor_table(phases: list[Phase]) -> Iterator[str]:
    yield "| conc | streams | events/s | server CPU ms/event | client CPU ms/event |"
    yield "|---:|---:|---:|---:|---:|"
    for phase in phases:
        events = phase.events or 1
        yield (
            f"| {phase.concurrency} | {len(phase.samples)} | {phase.events_per_s:,.0f} "
            f"| {phase.cpu.engine * 1000 / events:.3f} | {phase.cpu.client * 1000 / events:.3f} |"
        )
