"""The streaming phases of the engine bench: direct from the fake LLM, and ``Run`` over
gRPC in closed loops."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.engine.measure import WAIT, Cpu, Phase, Sample
from bench.engine.stack import DirectClient, Stack

# -- the engine over gRPC ---------------------------------------------------------------


def run_request(text: str) -> pb.RunRequest:
    """A run of one user message on a new session."""
    return pb.RunRequest(
        session_id=f"bench-{uuid.uuid4().hex}",
        create_session=True,
        messages=[
            pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))])
        ],
    )


def stamp(event: pb.Event) -> float:
    return event.time.seconds + event.time.nanos / 1e9


async def engine_stream(stub: pb_grpc.AgentEngineAsyncStub, text: str) -> Sample:
    """One Run, read to its end."""
    sample = Sample()
    request = run_request(text)
    sent = time.time()  # the engine stamps events with time.time() on this same host
    start = time.perf_counter()
    call = stub.Run(request, timeout=WAIT)
    async for event in call:
        now = time.perf_counter()
        sample.events += 1
        if sample.events == 1:
            sample.first_event = now - start
            sample.started_stamp = stamp(event) - sent
        kind = event.WhichOneof("kind")
        if kind == "text_message_content":
            sample.tokens += 1
            if not sample.first_token:
                sample.first_token = now - start
                sample.token_stamp = stamp(event) - sent
        elif kind == "run_finished":
            sample.outcome = pb.OutcomeType.Name(event.run_finished.outcome)
        elif kind == "run_error":
            sample.outcome = f"error:{event.run_error.code}"
    sample.total = time.perf_counter() - start
    if sample.outcome != "OUTCOME_TYPE_SUCCESS":
        raise RuntimeError(f"run ended with {sample.outcome or 'no terminal event'}")
    return sample


async def closed_loop(
    phase: Phase,
    cpu: Callable[[], Cpu],
    streams: int,
    one: Callable[[int], Awaitable[Sample]],
    ramp: float = 0.0,
) -> Phase:
    """``phase.concurrency`` workers share ``streams`` streams; ``one(worker)`` runs one.

    With ``ramp`` the workers start spread evenly over that many seconds instead of all
    at once, so that starts are staggered as they would be in steady traffic.
    """
    remaining = iter(range(streams))

    async def worker(index: int) -> None:
        if ramp:
            await asyncio.sleep(ramp * index / phase.concurrency)
        for _ in remaining:
            try:
                phase.samples.append(await one(index))
            except (grpc.aio.AioRpcError, RuntimeError, OSError, asyncio.IncompleteReadError) as e:
                phase.errors += 1
                if phase.errors <= 5:
                    print(f"{phase.name}: {type(e).__name__}: {e}", file=sys.stderr)

    before = cpu()
    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(phase.concurrency)))
    phase.wall = time.perf_counter() - start
    after = cpu()
    phase.cpu = Cpu(
        after.engine - before.engine,
        after.fake - before.fake,
        after.client - before.client,
        after.machine - before.machine,
    )
    return phase


async def direct_phase(
    name: str, stack: Stack, concurrency: int, streams: int, text: str, ramp: float = 0.0
) -> Phase:
    clients = [DirectClient(stack.llm_url) for _ in range(concurrency)]
    try:
        await asyncio.gather(*(c.stream("warm up [[chunks:2]]") for c in clients))
        return await closed_loop(
            Phase(name, concurrency), stack.cpu, streams, lambda i: clients[i].stream(text), ramp
        )
    finally:
        for client in clients:
            client.close()


async def engine_phase(
    name: str,
    stack: Stack,
    stub: pb_grpc.AgentEngineAsyncStub,
    concurrency: int,
    streams: int,
    text: str,
    ramp: float = 0.0,
) -> Phase:
    await asyncio.gather(
        *(engine_stream(stub, "warm up [[chunks:2]]") for _ in range(min(concurrency, 8)))
    )
    return await closed_loop(
        Phase(name, concurrency), stack.cpu, streams, lambda _: engine_stream(stub, text), ramp
    )
