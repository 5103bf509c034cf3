"""The interrupt phase of the engine bench: how long a hanging run takes to stop after
``Interrupt``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.engine.measure import WAIT, quantile
from bench.engine.streams import engine_stream, run_request


async def next_event(call: grpc.aio.UnaryStreamCall[pb.RunRequest, pb.Event]) -> pb.Event | None:
    """The next event of a Run, or None at the end of the stream."""
    event = await call.read()
    if event is grpc.aio.EOF:
        return None
    assert isinstance(event, pb.Event)
    return event


async def hanging_run(
    stub: pb_grpc.AgentEngineAsyncStub,
) -> tuple[str, grpc.aio.UnaryStreamCall[pb.RunRequest, pb.Event]]:
    """A run whose LLM stream hangs after its first chunk, read up to its first text."""
    request = run_request("[[hang]] interrupt me")
    call = stub.Run(request, timeout=WAIT)
    while (event := await next_event(call)) is not None:
        if event.WhichOneof("kind") == "text_message_content":
            return request.session_id, call
    raise RuntimeError("the hanging run ended before its first text")


@dataclass
class Interrupts:
    """Seconds from Interrupt being sent, per try."""

    finished: list[float] = field(default_factory=list)
    """... to RUN_FINISHED received."""
    ended: list[float] = field(default_factory=list)
    """... to the Run stream's end (status OK) received."""
    acked: list[float] = field(default_factory=list)
    """... to the InterruptResponse (a separate series of tries)."""
    not_cancelled: int = 0

    def summary(self, load: int) -> dict[str, Any]:
        return {
            "other_streams": load,
            "tries": len(self.ended),
            "not_cancelled": self.not_cancelled,
            "run_finished_p50_ms": round(quantile(self.finished, 0.5) * 1000, 3),
            "run_finished_p99_ms": round(quantile(self.finished, 0.99) * 1000, 3),
            "stream_end_p50_ms": round(quantile(self.ended, 0.5) * 1000, 3),
            "stream_end_p99_ms": round(quantile(self.ended, 0.99) * 1000, 3),
            "stream_end_max_ms": round(max(self.ended, default=float("nan")) * 1000, 3),
            "interrupt_rtt_p50_ms": round(quantile(self.acked, 0.5) * 1000, 3),
        }


INTERRUPT_LOAD_TEXT = "load [[slow:0.02]] [[chunks:100]]"
"""The other streams of the loaded interrupt test: about 50 events/s each, like a real LLM."""


async def interrupt_phase(
    stub: pb_grpc.AgentEngineAsyncStub, tries: int, load: int = 0, load_text: str = ""
) -> Interrupts:
    """Interrupt tries one after another; with ``load``, that many other streams run meanwhile."""
    result = Interrupts()
    stop = asyncio.Event()

    async def background() -> None:
        while not stop.is_set():
            with contextlib.suppress(grpc.aio.AioRpcError, RuntimeError):
                await engine_stream(stub, load_text)

    workers = [asyncio.ensure_future(background()) for _ in range(load)]
    try:
        if load:
            await asyncio.sleep(1.0)  # let the load get going
        await measure_interrupts(stub, tries, result)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    return result


async def measure_interrupts(
    stub: pb_grpc.AgentEngineAsyncStub, tries: int, result: Interrupts
) -> None:
    for _ in range(tries):
        thread_id, call = await hanging_run(stub)
        start = time.perf_counter()
        reply = asyncio.ensure_future(stub.Interrupt(pb.InterruptRequest(session_id=thread_id)))
        outcome = ""
        while (event := await next_event(call)) is not None:
            if event.WhichOneof("kind") == "run_finished":
                result.finished.append(time.perf_counter() - start)
                outcome = pb.OutcomeType.Name(event.run_finished.outcome)
        result.ended.append(time.perf_counter() - start)
        if not (await reply).interrupted or outcome != "OUTCOME_TYPE_CANCELLED":
            result.not_cancelled += 1
    for _ in range(max(10, tries // 2)):
        thread_id, call = await hanging_run(stub)
        start = time.perf_counter()
        await stub.Interrupt(pb.InterruptRequest(session_id=thread_id))
        result.acked.append(time.perf_counter() - start)
        while await next_event(call) is not None:
            pass
