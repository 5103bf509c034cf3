"""What a remote A2A agent costs as a tool, over calling it directly with a2a-sdk's client.

Starts a real a2a-sdk agent (``tests/fakes/a2a_sdk_agent.py``: a ``working`` status update,
then the answer as an artifact), then measures ``--calls`` calls one after another:

1. **direct**: a2a-sdk's client (one ``httpx`` connection, streaming), each message in a new
   context, timed from the send to the completed task;
2. **as a tool**: the fake LLM, the engine (and an idle facade) as processes, the engine
   configured with ``AGENTIK_A2A_AGENTS``; each ``Run`` (a new conversation) makes the fake
   LLM call the agent once. The call is timed on the engine's own clock, from the
   ``TOOL_CALL_END`` event to the ``TOOL_CALL_RESULT`` event: what the tool adds to a turn.

The first ``--warmup`` calls of each are not counted. Reports medians and p90 in ms and the
difference of the medians (docs/performance.md, "Other agents as tools").

Run: ``python -m bench.a2a_tool_bench --calls 60``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Sequence

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from bench.facade_bench import Processes
from tests.a2a_sdk_client import collect_events, sdk_client, user_message
from tests.fakes.a2a_sdk_agent_process import SdkAgent

AGENT = "helper"


def _ms(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p90 {p90 * 1000:.2f} ms"


async def direct(url: str, calls: int) -> list[float]:
    """Seconds per call of a2a-sdk's client straight to the agent."""
    took: list[float] = []
    async with sdk_client(url) as client:
        for number in range(calls):
            request = user_message(f"hello {number}", context_id=uuid.uuid4().hex)
            start = time.perf_counter()
            events = await collect_events(client.send_message(request))
            took.append(time.perf_counter() - start)
            assert events, "the agent answered nothing"
    return took


async def as_tool(target: str, calls: int) -> list[float]:
    """Seconds per call inside the engine: TOOL_CALL_END to TOOL_CALL_RESULT."""
    took: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        for number in range(calls):
            text = f'[[tool:{AGENT} {{"message": "hello {number}"}}]]'
            request = pb.RunRequest(
                session_id=uuid.uuid4().hex,
                create_session=True,
                messages=[
                    pb.Message(
                        role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))]
                    )
                ],
            )
            ended = result = None
            async for event in stub.Run(request):
                kind = event.WhichOneof("kind")
                if kind == "tool_call_end":
                    ended = event.time.ToNanoseconds()
                elif kind == "tool_call_result":
                    assert not event.tool_call_result.is_error, event.tool_call_result.content
                    result = event.time.ToNanoseconds()
            assert ended is not None and result is not None, "the LLM did not call the agent"
            took.append((result - ended) / 1e9)
    return took


async def _ready(target: str, within: float = 30.0) -> None:
    """Wait until the engine offers the agent (its card read)."""
    deadline = time.monotonic() + within
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.AgentEngineStub(channel)
        while True:
            request = pb.RunRequest(
                session_id=uuid.uuid4().hex,
                create_session=True,
                messages=[
                    pb.Message(
                        role=pb.ROLE_USER,
                        content=[
                            pb.ContentPart(
                                text=pb.TextPart(text='[[tool:helper {"message": "x"}]]')
                            )
                        ],
                    )
                ],
            )
            results = [
                e.tool_call_result
                async for e in stub.Run(request)
                if e.WhichOneof("kind") == "tool_call_result"
            ]
            if results and not results[0].is_error:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the engine never reached the agent: {results}")
            await asyncio.sleep(0.2)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    options = parser.parse_args(argv)
    total = options.calls + options.warmup
    with SdkAgent() as agent:
        straight = asyncio.run(direct(agent.url, total))[options.warmup :]
        os.environ["AGENTIK_A2A_AGENTS"] = f"{AGENT}={agent.url}/"
        processes = Processes(workers=1, threads=8)
        try:
            asyncio.run(_ready(processes.grpc_target))
            through = asyncio.run(as_tool(processes.grpc_target, total))[options.warmup :]
        finally:
            processes.stop()
    print(f"direct (a2a-sdk client): {_ms(straight)}")
    print(f"as a tool (engine clock): {_ms(through)}")
    difference = (statistics.median(through) - statistics.median(straight)) * 1000
    print(f"the tool adds {difference:+.2f} ms (median) over calling the agent directly")


if __name__ == "__main__":
    main()
