"""``batch_events``: the events ready together come as one message's ``batch`` (issue 25:
fewer gRPC messages, and fewer wake-ups of the facade's reader, under load); the events
are the same, in the same order, as without it; a caller that does not ask gets single
events."""

from __future__ import annotations

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from engine_service.servicer import BATCH_BYTES, batched
from tests.engine.harness import Harness, collect, user


def _unpacked(messages: list[pb.Event]) -> list[pb.Event]:
    return [event for message in messages for event in (message.batch or [message])]


async def test_a_replay_asked_in_batches_is_few_messages_holding_the_same_events(
    harness: Harness,
) -> None:
    # Many events, however the LLM's tokens arrive (those read together are one event):
    # a dozen short runs of at least seven events each.
    whole: list[pb.Event] = []
    for n in range(12):
        request = pb.RunRequest(session_id="b", create_session=n == 0, messages=[user("x")])
        whole += await collect(harness.stub.Run(request))
    assert len(whole) >= 84
    single = await collect(
        harness.stub.Subscribe(pb.SubscribeRequest(session_id="b", until_idle=True))
    )
    batched = await collect(
        harness.stub.Subscribe(
            pb.SubscribeRequest(session_id="b", until_idle=True, batch_events=True)
        )
    )
    assert all(not message.batch for message in single)
    assert len(batched) < len(whole) / 4
    assert all(not m.batch or (not m.WhichOneof("kind") and m.seq == 0) for m in batched)
    got = [e.SerializeToString() for e in _unpacked(batched)]
    assert got == [e.SerializeToString() for e in single] == [e.SerializeToString() for e in whole]


async def test_a_run_asked_in_batches_streams_every_event_of_the_run_once_in_order(
    harness: Harness,
) -> None:
    messages = await collect(
        harness.stub.Run(
            pb.RunRequest(
                session_id="r",
                create_session=True,
                messages=[user("[[chunks:80]] y")],
                batch_events=True,
            )
        )
    )
    events = _unpacked(messages)
    seqs = [e.seq for e in events]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert events[0].WhichOneof("kind") == "run_started"
    assert events[-1].WhichOneof("kind") == "run_finished"
    replay = await collect(
        harness.stub.Subscribe(pb.SubscribeRequest(session_id="r", until_idle=True))
    )
    assert [e.SerializeToString() for e in events] == [e.SerializeToString() for e in replay]


def _text(seq: int, size: int) -> ev.Event:
    body = ev.TextMessageContent(message_id="m", delta="x" * size)
    return ev.Event(seq=seq, time=0.0, session_id="s", run_id="r", body=body)


def test_events_too_big_together_for_one_message_go_one_by_one() -> None:
    small = batched([_text(1, 10), _text(2, 10)])
    assert len(small) == 1 and [e.seq for e in small[0].batch] == [1, 2]
    assert batched([_text(1, 10)])[0].seq == 1  # one event: itself, no batch
    big = [_text(seq, BATCH_BYTES // 3) for seq in (1, 2, 3, 4)]
    sent = batched(big)
    assert [m.seq for m in sent] == [1, 2, 3, 4]
    assert all(not m.batch and m.ByteSize() < BATCH_BYTES for m in sent)
