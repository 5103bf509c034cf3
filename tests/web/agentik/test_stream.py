"""SSE framing, heartbeats and cancellation, over a scripted stand-in for a gRPC stream."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.conftest import WAIT
from tests.web.sse_frames import SseParser
from web_facade.agentik.events import frame
from web_facade.agentik.stream import AgentikStream
from web_facade.stream import DRAINING, HEARTBEAT, EventRelay


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


_DONE = object()


class ScriptedCall:
    """Yields what the test feeds it, like a server-streaming call; ``cancel`` ends it."""

    def __init__(self) -> None:
        self.items: queue.Queue[object] = queue.Queue()
        self.cancelled = threading.Event()

    def __iter__(self) -> Iterator[pb.Event]:
        while True:
            item = self.items.get(timeout=WAIT)
            if self.cancelled.is_set():
                raise FakeRpcError(grpc.StatusCode.CANCELLED, "cancelled")
            if item is _DONE:
                return
            if isinstance(item, grpc.RpcError):
                raise item
            assert isinstance(item, pb.Event)
            yield item

    def cancel(self) -> None:
        self.cancelled.set()
        self.items.put(_DONE)


def _text(seq: int, delta: str) -> pb.Event:
    return pb.Event(
        seq=seq, run_id="r", text_message_content=pb.TextMessageContent(message_id="m", delta=delta)
    )


def _body(call: ScriptedCall, heartbeat: float = 10.0) -> tuple[EventRelay, Iterator[bytes]]:
    relay = EventRelay(call)
    return relay, iter(AgentikStream(relay, heartbeat))


def test_the_stream_opens_at_once_with_a_retry_hint() -> None:
    call = ScriptedCall()
    _, body = _body(call)
    assert next(body) == b"retry: 1000\n\n"
    call.cancel()


def test_relayed_events_become_frames_and_the_body_ends_with_the_grpc_stream() -> None:
    call = ScriptedCall()
    call.items.put(_text(1, "a"))
    call.items.put(pb.Event(seq=2, run_id="r", text_message_end=pb.TextMessageEnd(message_id="m")))
    call.items.put(_text(3, "b"))
    call.items.put(_DONE)
    relay, body = _body(call)
    parser = SseParser()
    frames = [f for chunk in body for f in parser.feed(chunk)]
    assert [(f.id, f.event) for f in frames if f.data] == [(1, "append_text"), (3, "append_text")]
    assert parser.pending == b""
    assert relay.join(WAIT)


def test_an_idle_stream_writes_heartbeat_comments() -> None:
    call = ScriptedCall()
    _, body = _body(call, heartbeat=0.05)
    next(body)
    assert next(body) == HEARTBEAT
    assert next(body) == HEARTBEAT
    body.close()  # type: ignore[attr-defined]


def test_closing_the_body_cancels_the_grpc_call_and_ends_the_relay() -> None:
    call = ScriptedCall()
    relay, body = _body(call)
    next(body)
    body.close()  # type: ignore[attr-defined]
    assert call.cancelled.is_set()
    assert relay.join(WAIT)


def test_a_broken_grpc_stream_ends_with_an_error_frame_without_id() -> None:
    call = ScriptedCall()
    call.items.put(_text(1, "a"))
    call.items.put(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
    _, body = _body(call)
    frames = [f for chunk in body for f in SseParser().feed(chunk)]
    last = frames[-1]
    assert last.id is None
    assert last.data == {"type": "error", "code": "engine_unavailable", "message": "Socket closed"}


def test_a_draining_worker_ends_idle_streams_at_a_frame_boundary() -> None:
    call = ScriptedCall()
    _, body = _body(call)
    next(body)
    DRAINING.set()
    try:
        assert list(body) == []
    finally:
        DRAINING.clear()
    assert call.cancelled.is_set()


def test_events_that_arrive_together_are_written_in_order() -> None:
    call = ScriptedCall()
    for seq in range(1, 6):
        call.items.put(_text(seq, str(seq)))
    relay, body = _body(call)
    assert relay.peek(WAIT) is not None
    received: list[int | None] = []
    parser = SseParser()
    while len(received) < 5:
        received += [f.id for f in parser.feed(next(body)) if f.data]
    assert received == [1, 2, 3, 4, 5]
    call.cancel()


@pytest.mark.parametrize("seq", [None, 0, 12])
def test_frames_use_lf_only_and_an_id_line_only_when_given(seq: int | None) -> None:
    encoded = frame(seq, "end", {"type": "end"})
    assert b"\r" not in encoded
    assert encoded.startswith(b"id: ") == (seq is not None)
    assert encoded.endswith(b'event: end\ndata: {"type":"end"}\n\n')
