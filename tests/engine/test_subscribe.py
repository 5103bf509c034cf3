"""Subscribe: replay after a seq, then live; runs outlive their callers."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import WAIT, Harness, collect, kind, kinds, next_event, user
from tests.fakes.fake_openai import FakeOpenAI


async def read_until_finished(call: object) -> list[pb.Event]:
    events: list[pb.Event] = []
    async with asyncio.timeout(WAIT):
        while True:
            event = await next_event(call)
            events.append(event)
            if kind(event) in ("run_finished", "run_error"):
                return events


async def test_subscribe_replays_stored_events_then_follows_live_ones(harness: Harness) -> None:
    first = await collect(
        harness.stub.Run(pb.RunRequest(session_id="s", create_session=True, messages=[user("one")]))
    )
    follower = harness.stub.Subscribe(pb.SubscribeRequest(session_id="s", after_seq=0))
    replayed = await read_until_finished(follower)
    assert [e.SerializeToString() for e in replayed] == [e.SerializeToString() for e in first]

    second = await collect(
        harness.stub.Run(pb.RunRequest(session_id="s", messages=[user("[[slow:0.01]] two three")]))
    )
    live = await read_until_finished(follower)
    follower.cancel()
    assert [e.seq for e in live] == [e.seq for e in second]
    assert live[0].seq == first[-1].seq + 1
    assert [e.SerializeToString() for e in live] == [e.SerializeToString() for e in second]


async def test_two_subscribers_that_join_mid_run_see_identical_sequences(harness: Harness) -> None:
    runner = harness.stub.Run(
        pb.RunRequest(
            session_id="two", create_session=True, messages=[user("[[slow:0.02]] a b c d e f")]
        )
    )
    head = [await next_event(runner), await next_event(runner), await next_event(runner)]
    a = harness.stub.Subscribe(pb.SubscribeRequest(session_id="two", after_seq=0, until_idle=True))
    first_of_a = await next_event(a)
    b = harness.stub.Subscribe(pb.SubscribeRequest(session_id="two", after_seq=0, until_idle=True))
    rest = await collect(runner)
    seen_a = [first_of_a, *await collect(a)]
    seen_b = await collect(b)

    whole = head + rest
    assert [e.seq for e in seen_a] == [e.seq for e in whole]
    assert [e.seq for e in seen_b] == [e.seq for e in whole]
    assert [e.SerializeToString() for e in seen_a] == [e.SerializeToString() for e in seen_b]


async def test_subscribe_after_a_seq_returns_exactly_the_events_after_it(harness: Harness) -> None:
    events = await collect(
        harness.stub.Run(
            pb.RunRequest(session_id="x", create_session=True, messages=[user("a b c")])
        )
    )
    cut = events[3].seq
    resumed = await collect(
        harness.stub.Subscribe(pb.SubscribeRequest(session_id="x", after_seq=cut, until_idle=True))
    )
    assert [e.seq for e in resumed] == [e.seq for e in events[4:]]


async def test_subscribe_after_a_seq_past_the_last_stored_is_invalid_argument(
    harness: Harness,
) -> None:
    events = await collect(
        harness.stub.Run(pb.RunRequest(session_id="p", create_session=True, messages=[user("a")]))
    )
    last = events[-1].seq
    at_end = harness.stub.Subscribe(
        pb.SubscribeRequest(session_id="p", after_seq=last, until_idle=True)
    )
    assert await collect(at_end) == []
    past = harness.stub.Subscribe(
        pb.SubscribeRequest(session_id="p", after_seq=last + 1, until_idle=True)
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await collect(past)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == (
        f"after_seq {last + 1} is past the session's last event ({last}): resume after an"
        " event this session sent"
    )


async def test_a_run_whose_caller_went_away_completes_and_can_be_picked_up(
    harness: Harness, llm: FakeOpenAI
) -> None:
    call = harness.stub.Run(
        pb.RunRequest(
            session_id="gone", create_session=True, messages=[user("[[slow:0.03]] a b c d")]
        )
    )
    seen = [await next_event(call), await next_event(call)]
    call.cancel()

    rest = await collect(
        harness.stub.Subscribe(
            pb.SubscribeRequest(session_id="gone", after_seq=seen[-1].seq, until_idle=True)
        )
    )
    assert rest[0].seq == seen[-1].seq + 1
    assert kinds(rest)[-1] == "run_finished"
    assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    stored = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="gone"))).messages
    assert stored[-1].status == pb.MESSAGE_STATUS_COMPLETE
    assert stored[-1].content[0].text.text == "Echo: a b c d"


async def test_cancel_on_disconnect_interrupts_the_run_when_its_caller_goes(
    harness: Harness, llm: FakeOpenAI
) -> None:
    call = harness.stub.Run(
        pb.RunRequest(
            session_id="cod",
            create_session=True,
            cancel_on_disconnect=True,
            messages=[user("[[slow:0.05]] a b c d e f g h")],
        )
    )
    async with asyncio.timeout(WAIT):
        while kind(await next_event(call)) != "text_message_content":
            pass
    call.cancel()
    rest = await collect(
        harness.stub.Subscribe(pb.SubscribeRequest(session_id="cod", after_seq=1, until_idle=True))
    )
    assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert await llm.wait_connection_closed_async(within=WAIT)


async def test_subscribe_to_an_idle_session_with_until_idle_ends_after_the_replay(
    harness: Harness,
) -> None:
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="quiet"))
    assert (
        await collect(
            harness.stub.Subscribe(pb.SubscribeRequest(session_id="quiet", until_idle=True))
        )
        == []
    )
