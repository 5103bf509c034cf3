"""A real engine on a free port, driven over real gRPC, for the engine's tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from agentik.config import Settings, load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.build import build_engine
from engine_service.core.chat import ChatModel
from engine_service.core.engine import Engine
from engine_service.core.store import SessionStore
from engine_service.core.tool import Tool
from engine_service.server import EngineServer

StoreFor = Callable[[], SessionStore]
"""Makes the store of each replica in tests of several engines (fixture ``store_for``)."""

WAIT = 10.0
"""Upper bound for every wait in these tests, in seconds."""


@dataclass
class Harness:
    settings: Settings
    engine: Engine
    server: EngineServer
    channel: grpc.aio.Channel
    stub: pb_grpc.AgentEngineAsyncStub

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.port}"


def engine_settings(**env: str) -> Settings:
    # The test process's collector stays as Python has it (run_engine would freeze it).
    base = {
        "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": "memory://",
        "AGENTIK_GC_THRESHOLD": "0",
    }
    base.update(env)
    return load_settings(None, base)


@contextlib.asynccontextmanager
async def running_engine(
    settings: Settings,
    *,
    tools: Iterable[Tool] = (),
    model: ChatModel | None = None,
) -> AsyncIterator[Harness]:
    engine = build_engine(settings)
    if model is not None:
        engine.model = model
    for tool in tools:
        engine.tools.register(tool)
    server = EngineServer(engine, settings)
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
        yield Harness(settings, engine, server, channel, stub)
    finally:
        await channel.close()
        await server.stop()


def user(text: str, message_id: str = "") -> pb.Message:
    return pb.Message(
        id=message_id, role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))]
    )


def kind(event: pb.Event) -> str:
    return str(event.WhichOneof("kind"))


def kinds(events: Iterable[pb.Event]) -> list[str]:
    return [kind(e) for e in events]


def kinds_merged(events: Iterable[pb.Event]) -> list[str]:
    """``kinds``, with a run of the same content kind as one: how many content events a
    stream makes depends on how the LLM's tokens arrive (those read together are one)."""
    out: list[str] = []
    for name in kinds(events):
        if not (out and out[-1] == name and name.endswith(("_content", "_args"))):
            out.append(name)
    return out


async def collect(call: Any) -> list[pb.Event]:
    """All events of a server stream, bounded by ``WAIT``."""
    events: list[pb.Event] = []

    async def read() -> None:
        while (event := await call.read()) is not grpc.aio.EOF:
            events.append(event)

    async with asyncio.timeout(WAIT):
        await read()
    return events


async def next_event(call: Any) -> pb.Event:
    """The next event of a server stream; fails on end of stream."""
    async with asyncio.timeout(WAIT):
        event = await call.read()
    assert isinstance(event, pb.Event), "the stream ended early"
    return event


def text_of(events: Iterable[pb.Event]) -> str:
    return "".join(
        e.text_message_content.delta for e in events if kind(e) == "text_message_content"
    )


async def run(harness: Harness, request: pb.RunRequest) -> list[pb.Event]:
    """All events of one Run."""
    return await collect(harness.stub.Run(request))


async def refused(harness: Harness, request: pb.RunRequest) -> str:
    """The details of the INVALID_ARGUMENT a Run gets before it streams anything."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(harness, request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    return str(caught.value.details())
