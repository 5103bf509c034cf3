"""How many event streams are open (``core.streams``): each principal has its own limit
(``[auth] max_streams_per_caller``) and the engine one for all (``[engine] max_streams``);
``Run``, ``Subscribe`` and A2A's streams all count, a stream over a limit is refused naming
it, and every stream gives its slot back however it ends. Real engine, real gRPC."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from a2a.types import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    a2a_pb2_grpc,
)

from agentik.a2a.rules import FIRST_WINDOW
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.engine import Engine
from tests.engine.auth_helpers import TOKENS_ENV, as_, outcome, trailers
from tests.engine.harness import (
    WAIT,
    Harness,
    collect,
    engine_settings,
    next_event,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI


def _settings(llm: FakeOpenAI, **env: str) -> Any:
    return engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key", AGENTIK_LLM_MAX_RETRIES="0", **env
    )


async def _conversation(h: Harness, session_id: str, who: str | None, text: str = "hi") -> None:
    """A conversation with one run: a stream that follows it from the start has events."""
    request = pb.RunRequest(session_id=session_id, create_session=True, messages=[user(text)])
    await collect(h.stub.Run(request, metadata=as_(who) if who else None))


async def _held(h: Harness, session_id: str, who: str | None) -> Any:
    """A Subscribe that is open (its first event read) and stays open."""
    request = pb.SubscribeRequest(session_id=session_id, after_seq=0)
    call = h.stub.Subscribe(request, metadata=as_(who) if who else None)
    await next_event(call)
    return call


async def _until(check: Any) -> None:
    async with asyncio.timeout(WAIT):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def _a2a_message() -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="hi")])
    )


async def test_a_principal_past_its_streams_is_refused_naming_the_setting_and_others_go_on(
    llm: FakeOpenAI,
) -> None:
    settings = _settings(llm, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_MAX_STREAMS_PER_CALLER="2")
    async with running_engine(settings) as h:
        await _conversation(h, "a", "alice")
        await _conversation(h, "b", "bob")
        held = [await _held(h, "a", "alice") for _ in range(2)]

        refused = [
            h.stub.Subscribe(pb.SubscribeRequest(session_id="a"), metadata=as_("alice")),
            h.stub.Run(  # a run's stream is a stream too: no run starts
                pb.RunRequest(session_id="a2", create_session=True, messages=[user("x")]),
                metadata=as_("alice"),
            ),
        ]
        a2a: Any = a2a_pb2_grpc.A2AServiceStub(h.channel)  # type: ignore[no-untyped-call]
        refused += [
            a2a.SendStreamingMessage(_a2a_message(), metadata=as_("alice")),
            a2a.SubscribeToTask(SubscribeToTaskRequest(id="nosuchtask"), metadata=as_("alice")),
        ]
        for call in refused:
            events, error = await outcome(call)
            assert not events and error is not None
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
            assert str(error.details()).startswith("you (alice) have 2 event streams open, the")
            assert "[auth] max_streams_per_caller" in str(error.details())
            assert trailers(error)["agentik-error"] == "rate_limited"
            assert int(trailers(error)["retry-after"]) >= 1
        engine: Engine = h.engine
        assert engine.runs_in_flight == 0
        session = await h.stub.GetSession(
            pb.GetSessionRequest(session_id="a"), metadata=as_("alice")
        )
        assert session.id == "a"  # a unary call is no stream

        bobs = await _held(h, "b", "bob")  # bob has his own
        for call in held:
            call.cancel()
        await _until(lambda: engine.streams.held("alice") == 0)
        again = await _held(h, "a", "alice")  # hers ended: she may open more
        for call in (bobs, again):
            call.cancel()
        await _until(lambda: len(engine.streams) == 0 and engine.followers == 0)


async def test_the_engine_past_its_streams_refuses_every_caller_naming_the_setting(
    llm: FakeOpenAI,
) -> None:
    async with running_engine(_settings(llm, AGENTIK_MAX_STREAMS="2")) as h:
        await _conversation(h, "a", None)
        held = [await _held(h, "a", None) for _ in range(2)]
        events, error = await outcome(h.stub.Subscribe(pb.SubscribeRequest(session_id="a")))
        assert not events and error is not None
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "2 event streams open, the most [engine] max_streams" in str(error.details())
        assert trailers(error)["agentik-error"] == "overloaded"
        held[0].cancel()
        await _until(lambda: len(h.engine.streams) == 1)
        held.append(await _held(h, "a", None))
        for call in held:
            call.cancel()
        await _until(lambda: len(h.engine.streams) == 0)


async def test_streams_whose_clients_never_read_give_back_every_slot_and_follower_when_cut(
    llm: FakeOpenAI,
) -> None:
    """Clients that never read a 400 KB event, then go away: nothing of them stays in the
    engine (the memory an engine process keeps after such streams is its allocator's, not
    objects it holds: docs/reliability.md)."""
    async with running_engine(_settings(llm)) as h:
        await _conversation(h, "big", None, "y" * 400_000)
        request = pb.SubscribeRequest(session_id="big", after_seq=0)
        calls = [h.stub.Subscribe(request) for _ in range(20)]  # never read
        engine: Engine = h.engine
        await _until(lambda: len(engine.streams) == 20 and engine.followers == 20)
        for call in calls:
            call.cancel()
        await _until(lambda: len(engine.streams) == 0 and engine.followers == 0)


async def test_subscribe_to_task_at_the_callers_last_stream_takes_one_slot(
    llm: FakeOpenAI,
) -> None:
    """A2A's SubscribeToTask replays the task's run from its first event, looking back a
    window of events and widening it (``FIRST_WINDOW``, eight times wider each time):
    with one stream open of a caller's two, a subscription to a run begun more than
    eight windows back is her second stream, allowed; a third is refused."""
    settings = _settings(llm, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_MAX_STREAMS_PER_CALLER="2")
    async with running_engine(settings) as h:
        a2a: Any = a2a_pb2_grpc.A2AServiceStub(h.channel)  # type: ignore[no-untyped-call]
        request = _a2a_message()
        request.message.parts[0].text = "[[chunks:4000]][[slow:0.005]]"
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        sent = await a2a.SendMessage(request, metadata=as_("alice"))  # a unary call: no stream
        task = sent.task
        held = h.stub.Subscribe(
            pb.SubscribeRequest(session_id=task.context_id), metadata=as_("alice")
        )
        while (await next_event(held)).seq <= 8 * FIRST_WINDOW:
            pass  # the replay must widen its look twice
        engine: Engine = h.engine
        assert engine.streams.held("alice") == 1
        subscribed = a2a.SubscribeToTask(SubscribeToTaskRequest(id=task.id), metadata=as_("alice"))
        async with asyncio.timeout(WAIT):
            first = await subscribed.read()
        assert first.task.id == task.id
        assert engine.streams.held("alice") == 2
        events, error = await outcome(
            h.stub.Subscribe(pb.SubscribeRequest(session_id=task.context_id), metadata=as_("alice"))
        )
        assert not events and error is not None
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
        assert str(error.details()).startswith("you (alice) have 2 event streams open, the")
        assert trailers(error)["agentik-error"] == "rate_limited"
        await a2a.CancelTask(CancelTaskRequest(id=task.id), metadata=as_("alice"))
        for call in (held, subscribed):
            call.cancel()
        await _until(lambda: len(engine.streams) == 0 and engine.followers == 0)
