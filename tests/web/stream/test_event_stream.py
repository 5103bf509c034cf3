"""The shared stream loop, through a minimal protocol: one line per event, hooks marked."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.conftest import WAIT
from web_facade.stream import BATCH, DRAINING, HEARTBEAT, EventRelay, EventStream


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE


class Call:
    """Yields its events at once; then, unless ``ends``, waits until cancelled."""

    def __init__(self, events: list[pb.Event], *, ends: bool = True) -> None:
        self._events = events
        self._ends = ends
        self.drained = threading.Event()
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[pb.Event]:
        yield from self._events
        self.drained.set()
        if not self._ends:
            self.cancelled.wait(WAIT)

    def cancel(self) -> None:
        self.cancelled.set()


class Lines(EventStream):
    """``<seq>\\n`` per event; done after the event with seq ``last``."""

    def __init__(self, relay: EventRelay, last: int = 0, heartbeat: float = WAIT) -> None:
        super().__init__(relay, heartbeat)
        self.last = last

    def encode_event(self, event: pb.Event) -> bytes:
        if event.seq == self.last:
            self.done = True
        return f"{event.seq}\n".encode()

    def encode_error(self, error: grpc.RpcError) -> bytes:
        return b"error\n"

    def on_end(self) -> bytes:
        return b"end\n"

    def on_drain(self) -> bytes:
        return b"drain\n"


def _events(count: int) -> list[pb.Event]:
    return [pb.Event(seq=seq) for seq in range(1, count + 1)]


def _waiting(call: Call) -> EventRelay:
    relay = EventRelay(call)
    assert call.drained.wait(WAIT)
    return relay


def test_events_waiting_together_are_written_in_chunks_of_at_most_a_batch_each_once() -> None:
    count = 3 * BATCH + 10
    chunks = list(Lines(_waiting(Call(_events(count)))))

    lines = b"".join(chunks).decode().split()
    assert lines == [*map(str, range(1, count + 1)), "end"]
    assert max(chunk.count(b"\n") for chunk in chunks) <= BATCH


def test_nothing_is_taken_from_the_relay_after_the_protocols_last_event() -> None:
    relay = _waiting(Call(_events(10), ends=False))
    stream = Lines(relay, last=4)

    assert b"".join(stream).decode().split() == ["1", "2", "3", "4"]
    assert relay.get_nowait() == pb.Event(seq=5)


def test_a_broken_engine_stream_ends_with_the_protocols_error() -> None:
    class Broken(Call):
        def __iter__(self) -> Iterator[pb.Event]:
            yield from self._events
            raise Unavailable()

    assert b"".join(Lines(EventRelay(Broken(_events(2))))).split() == [b"1", b"2", b"error"]


def test_an_idle_stream_opens_with_a_heartbeat_and_writes_one_each_interval() -> None:
    call = Call([], ends=False)
    body = iter(Lines(EventRelay(call), heartbeat=0.05))

    assert [next(body), next(body), next(body)] == [HEARTBEAT] * 3
    body.close()  # type: ignore[attr-defined]
    assert call.cancelled.is_set()


def test_a_draining_worker_ends_the_stream_with_the_protocols_last_words() -> None:
    call = Call(_events(1), ends=False)
    body = iter(Lines(_waiting(call)))
    assert next(body) == b"1\n"

    DRAINING.set()
    try:
        assert list(body) == [b"drain\n"]
    finally:
        DRAINING.clear()
    assert call.cancelled.is_set()


def test_closing_a_body_that_was_never_read_cancels_the_engine_call() -> None:
    call = Call([], ends=False)
    relay = EventRelay(call)

    Lines(relay).close()

    assert call.cancelled.is_set()
    assert relay.join(WAIT)


def test_a_bug_in_a_protocols_encoder_ends_the_stream_and_cancels_the_call() -> None:
    class Buggy(Lines):
        def encode_event(self, event: pb.Event) -> bytes:
            raise ValueError("bug")

        def on_failure(self, exc: Exception) -> bytes:
            return f"failed: {exc}\n".encode()

    call = Call(_events(1), ends=False)

    assert list(Buggy(_waiting(call))) == [b"failed: bug\n"]
    assert call.cancelled.is_set()


def test_a_stream_that_opened_on_its_first_event_still_heartbeats_while_quiet() -> None:
    call = Call(_events(1), ends=False)
    body = iter(Lines(_waiting(call), heartbeat=0.05))

    assert next(body) == b"1\n"
    assert next(body) == HEARTBEAT
    body.close()  # type: ignore[attr-defined]
