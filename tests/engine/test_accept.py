"""Calls taken ahead (``engine_service/accept.py``): a burst of gRPC calls reaches the
engine's servicer in a few turns of its loop, through the same interceptors, and the
server still stops cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.accept import CallsAhead, Recording, supported
from engine_service.server import SERVICE_NAME
from engine_service.servicer import RUN_METHOD
from tests.engine.harness import engine_settings, running_engine
from tests.polling import until

BURST = 48


def test_this_grpcio_has_what_calls_ahead_use() -> None:
    # A grpcio whose private server API moved fails here, not silently in production.
    assert supported() == ""


class _Counting:
    """Notes the loop's turn at which each ``GetSession`` reached the servicer."""

    def __init__(self, turns: list[int]) -> None:
        self.turns = turns
        self.entered: list[int] = []

    async def get_session(
        self, request: pb.GetSessionRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> pb.Session:
        self.entered.append(self.turns[0])
        return pb.Session(id=request.session_id)


@contextlib.asynccontextmanager
async def _server(ahead: int, servicer: _Counting) -> AsyncIterator[tuple[int, CallsAhead]]:
    server = grpc.aio.server()
    methods = Recording(server)
    handler = grpc.unary_unary_rpc_method_handler(
        servicer.get_session,
        request_deserializer=pb.GetSessionRequest.FromString,
        response_serializer=pb.Session.SerializeToString,
    )
    methods.add_registered_method_handlers(SERVICE_NAME, {"GetSession": handler})
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    calls = CallsAhead(server, methods.handlers, [], ahead)
    calls.start()
    try:
        yield port, calls
    finally:
        await server.stop(grace=None)
        await calls.stop()


async def _turns_for_a_burst(ahead: int) -> int:
    """Turns of the loop from the moment a burst of calls is waiting in gRPC core to the
    moment the last of them reached the servicer."""
    loop = asyncio.get_running_loop()
    turns = [0]
    ticking = True

    def tick() -> None:  # a turn of a busy loop: other work holds it 1 ms
        turns[0] += 1
        time.sleep(0.001)
        if ticking:
            loop.call_soon(tick)

    servicer = _Counting(turns)
    async with _server(ahead, servicer) as (port, _):
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.AgentEngineStub(channel)
            request = pb.GetSessionRequest(session_id="s")
            await asyncio.to_thread(stub.GetSession, request, timeout=10)  # connected
            servicer.entered.clear()
            blocked, sent = threading.Event(), threading.Event()

            def burst() -> list[pb.Session]:
                blocked.wait(10)
                futures = [stub.GetSession.future(request, timeout=10) for _ in range(BURST)]
                sent.set()
                return [future.result() for future in futures]

            answers = asyncio.ensure_future(asyncio.to_thread(burst))
            await asyncio.sleep(0)  # the thread is asked for
            # The loop is busy while the burst is sent: the calls wait in gRPC core.
            blocked.set()
            assert sent.wait(10)
            # Still busy, for the last call's bytes to reach the server (nothing tells).
            time.sleep(0.3)  # noqa: ASYNC251 - the loop is meant to be held here
            start = turns[0]
            loop.call_soon(tick)
            await until(lambda: len(servicer.entered) == BURST, 10)
            ticking = False
            assert len(await answers) == BURST
            return max(servicer.entered) - start


async def test_a_burst_reaches_the_servicer_in_a_few_turns_not_one_call_per_turn() -> None:
    one_at_a_time = await _turns_for_a_burst(0)
    ahead = await _turns_for_a_burst(BURST)
    # grpc.aio's own way: a few turns per call (206-220 measured); taken ahead: all of them
    # together (5-6 measured; the bound leaves room for a call that reached core late).
    assert one_at_a_time >= BURST, one_at_a_time
    assert ahead <= 16, ahead


async def test_calls_taken_ahead_go_through_the_servers_interceptors() -> None:
    """A burst of undecodable ``Run`` requests is refused by ``MalformedRequests`` in its
    own words, whichever taker took each call."""
    settings = engine_settings(AGENTIK_ACCEPT_AHEAD="8")
    async with running_engine(settings) as harness:
        assert harness.server.calls_ahead.waiting > 0
        garbage: grpc.aio.UnaryStreamMultiCallable[bytes, bytes]
        garbage = harness.channel.unary_stream(f"/{RUN_METHOD}")

        async def one() -> grpc.StatusCode:
            call = garbage(b"\xff\xff\xff")
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in call:
                    pass
            assert "not a valid protobuf message" in (caught.value.details() or "")
            return caught.value.code()

        codes = await asyncio.gather(*(one() for _ in range(32)))
        assert set(codes) == {grpc.StatusCode.INVALID_ARGUMENT}
    assert harness.server.calls_ahead.waiting == 0  # the server stopped: its takers ended


async def test_no_calls_taken_ahead_when_set_to_zero() -> None:
    settings = engine_settings(AGENTIK_ACCEPT_AHEAD="0")
    async with running_engine(settings) as harness:
        assert harness.server.calls_ahead.waiting == 0
        session = await harness.stub.CreateSession(pb.CreateSessionRequest())
        assert session.id


def test_accept_ahead_out_of_bounds_is_refused_naming_it() -> None:
    from agentik.config import ConfigError

    with pytest.raises(ConfigError, match="accept_ahead"):
        engine_settings(AGENTIK_ACCEPT_AHEAD="5000")


async def test_a_grpcio_without_the_private_api_is_served_its_own_way(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("engine_service.accept.supported", lambda: "cygrpc._handle_rpc")
    async with running_engine(engine_settings()) as harness:
        assert harness.server.calls_ahead.waiting == 0
        session = await harness.stub.CreateSession(pb.CreateSessionRequest())
        assert session.id
    assert "lacks cygrpc._handle_rpc" in caplog.text
