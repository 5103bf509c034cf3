"""A server stream whose client stops reading is cut once one write has waited longer than
``[engine] write_timeout`` (``engine_service.stalled_writes``): DEADLINE_EXCEEDED naming the
setting, its follower given back at once and its slot once gRPC lets go of the call; the
run goes on and ends, and the client resumes after the last seq it got with nothing lost or
repeated. A client that reads, however slowly, is never cut. Real engine, real gRPC."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import grpc
from a2a.types import Message, Part, Role, SendMessageRequest, a2a_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.engine import Engine
from tests.engine.auth_helpers import TOKENS_ENV, as_, outcome, trailers
from tests.engine.harness import (
    WAIT,
    Harness,
    collect,
    engine_settings,
    kind,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply

CHUNK = 256 * 1024
"""Bytes of one text delta: what gRPC holds for a client that does not read is a few MB
(its HTTP/2 window and the message in flight), so a write waits after a dozen or so."""


def _settings(llm: FakeOpenAI, **env: str) -> Any:
    return engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="k",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_ENGINE_WRITE_TIMEOUT="1",
        AGENTIK_LLM_MAX_ANSWER_BYTES=str(64 * 1024 * 1024),
        **env,
    )


async def _until(check: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def _lost_and_duplicated(events: list[pb.Event]) -> tuple[int, int]:
    seqs = [event.seq for event in events]
    duplicated = sum(n - 1 for n in Counter(seqs).values())
    return len(set(range(seqs[0], events[-1].seq + 1)) - set(seqs)), duplicated


async def _resumed(h: Harness, session_id: str, seen: list[pb.Event], who: Any) -> list[pb.Event]:
    """``seen``, then what a Subscribe after its last seq gives until the session is idle."""
    request = pb.SubscribeRequest(session_id=session_id, after_seq=seen[-1].seq, until_idle=True)
    return seen + await collect(h.stub.Subscribe(request, metadata=who))


async def test_a_stream_whose_client_stops_reading_is_cut_and_resumes_without_loss(
    llm: FakeOpenAI,
) -> None:
    """The run's own stream and a subscriber both read one event and stop while a 24 MB
    answer streams: each is cut, its follower given back at once, and its slot once gRPC
    lets go of it: when its client has read what gRPC held and the status naming the
    setting, or left. The run ends; each client resumes after its last seq."""
    settings = _settings(llm, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_MAX_STREAMS_PER_CALLER="2")
    alice = as_("alice")
    async with running_engine(settings) as h:
        engine: Engine = h.engine
        llm.enqueue(FakeReply(text=["y" * CHUNK] * 96, delay=0.01))
        run = h.stub.Run(
            pb.RunRequest(session_id="s", create_session=True, messages=[user("go")]),
            metadata=alice,
        )
        run_seen = [await next_event(run)]
        subscriber = h.stub.Subscribe(pb.SubscribeRequest(session_id="s"), metadata=alice)
        sub_seen = [await next_event(subscriber)]
        assert engine.streams.held("alice") == 2  # then neither reads

        await _until(lambda: h.server.stalls.cut == 2 and engine.followers == 0)
        # gRPC still holds what it took for them: so do their slots.
        assert engine.streams.held("alice") == 2
        await _until(lambda: engine.runs_in_flight == 0)  # the run went on to its end
        stored = await h.stub.GetRun(
            pb.GetRunRequest(session_id="s", run_id=run_seen[0].run_id), metadata=alice
        )
        assert stored.status == pb.RUN_STATUS_SUCCEEDED

        held, error = await outcome(run)  # what gRPC held for it, then the status
        assert error is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "[engine] write_timeout" in str(error.details()), error.details()
        assert "resume with Subscribe after the last seq" in str(error.details())
        assert trailers(error)["agentik-error"] == "write_timeout"
        run_seen += held
        subscriber.cancel()  # the other client goes away instead
        await _until(lambda: engine.streams.held("alice") == 0)
        again = [h.stub.Subscribe(pb.SubscribeRequest(session_id="s"), metadata=alice)]
        again.append(h.stub.Subscribe(pb.SubscribeRequest(session_id="s"), metadata=alice))
        for call in again:
            assert kind(await next_event(call)) == "run_started"  # accepted: slots are free
        for call in again:
            call.cancel()

        for seen in (run_seen, sub_seen):
            events = await _resumed(h, "s", seen, alice)
            assert kind(events[-1]) == "run_finished"
            assert events[0].seq == 1
            assert _lost_and_duplicated(events) == (0, 0)
            assert text_of(events) == "y" * CHUNK * 96
        assert h.server.stalls.cut == 2


async def test_a_client_that_reads_slowly_is_never_cut(llm: FakeOpenAI) -> None:
    """A subscriber reads an event every 20 ms, slower than the engine has them: once gRPC
    holds all it may for it, each write waits until it has read most of that, a few MB
    (gRPC's flow control): 0.2 to 0.3 s each here, 2 s and more in all. The run's own
    stream, which stopped reading, is cut meanwhile."""
    chunks = 120
    async with running_engine(_settings(llm)) as h:
        llm.enqueue(FakeReply(text=["y" * CHUNK] * chunks))
        run = h.stub.Run(pb.RunRequest(session_id="s", create_session=True, messages=[user("go")]))
        run_seen = [await next_event(run)]
        slow: Any = h.stub.Subscribe(pb.SubscribeRequest(session_id="s", until_idle=True))
        events: list[pb.Event] = []
        async with asyncio.timeout(3 * WAIT):
            while (event := await slow.read()) is not grpc.aio.EOF:
                events.append(event)
                await asyncio.sleep(0.02)
        assert await slow.code() == grpc.StatusCode.OK
        assert _lost_and_duplicated(events) == (0, 0)
        assert text_of(events) == "y" * CHUNK * chunks
        assert h.server.stalls.cut == 1  # the run's stream, not the slow one
        held, error = await outcome(run)
        assert error is not None and error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # gRPC held a fraction of the answer for a client that did not read: the slow
        # reader's writes waited on its reads for most of the answer.
        assert len(run_seen + held) < chunks // 3


async def test_an_a2a_stream_whose_client_stops_reading_is_cut_too(llm: FakeOpenAI) -> None:
    """A2A's ``SendStreamingMessage`` is watched as ``Run`` is: cut, its follower given
    back, and its slot once its client leaves."""
    async with running_engine(_settings(llm)) as h:
        engine: Engine = h.engine
        llm.enqueue(FakeReply(text=["y" * CHUNK] * 64))
        a2a: Any = a2a_pb2_grpc.A2AServiceStub(h.channel)  # type: ignore[no-untyped-call]
        message = Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="go")])
        call = a2a.SendStreamingMessage(SendMessageRequest(message=message))
        await call.read()  # then it reads no more
        await _until(lambda: h.server.stalls.cut == 1 and engine.followers == 0)
        assert len(engine.streams) == 1
        call.cancel()
        await _until(lambda: len(engine.streams) == 0 and engine.runs_in_flight == 0)
