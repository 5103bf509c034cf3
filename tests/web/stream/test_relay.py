"""The relay reads no more than ``QUEUE_BYTES`` of events ahead of an HTTP client that does
not read: big events are held back by gRPC's flow control (and the engine's store), not
piled up in the facade."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.conftest import WAIT
from web_facade.stream.relay import END, QUEUE_BYTES, EventRelay

SIZE = 1_000_000
COUNT = 40
AHEAD = QUEUE_BYTES // SIZE + 1
"""Most events the relay may hold beyond what was taken (one more is being put)."""


def _event(seq: int) -> pb.Event:
    content = pb.TextMessageContent(message_id="m", delta="x" * SIZE)
    return pb.Event(seq=seq, text_message_content=content)


class CountingCall:
    """Yields big events; records how far ahead of the reader it was asked to go."""

    def __init__(self) -> None:
        self.taken = 0
        self.most_ahead = 0
        self.ahead_reached = threading.Event()

    def __iter__(self) -> Iterator[pb.Event]:
        for seq in range(1, COUNT + 1):
            self.most_ahead = max(self.most_ahead, seq - self.taken)
            if seq - self.taken >= AHEAD:
                self.ahead_reached.set()
            yield _event(seq)

    def cancel(self) -> None:
        pass


def test_a_reader_that_does_not_read_holds_at_most_queue_bytes_in_the_relay() -> None:
    call = CountingCall()
    relay = EventRelay(call)
    assert call.ahead_reached.wait(WAIT)  # the relay read ahead as far as it may
    seqs = []
    while True:
        item = relay.get(WAIT)
        assert item is not None
        if item is END:
            break
        assert isinstance(item, pb.Event)
        seqs.append(item.seq)
        call.taken += 1
    assert seqs == list(range(1, COUNT + 1))
    assert call.most_ahead <= AHEAD + 1, call.most_ahead


class BatchedCall:
    """Events as the engine sends them to a caller that asked for ``batch_events``."""

    def __iter__(self) -> Iterator[pb.Event]:
        yield pb.Event(seq=1, run_started=pb.RunStarted())
        yield pb.Event(batch=[_small(2), _small(3), _small(4)])
        yield _small(5)

    def cancel(self) -> None:
        pass


def _small(seq: int) -> pb.Event:
    return pb.Event(seq=seq, text_message_content=pb.TextMessageContent(delta=str(seq)))


def test_a_batch_is_relayed_as_its_events_in_order() -> None:
    relay = EventRelay(BatchedCall())
    items = []
    while (item := relay.get(WAIT)) is not END:
        assert isinstance(item, pb.Event)
        items.append(item)
    assert [e.seq for e in items] == [1, 2, 3, 4, 5]
    assert all(e.WhichOneof("kind") for e in items)
