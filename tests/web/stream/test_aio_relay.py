"""The asyncio relay (``web_facade/stream/aio_relay.py``) against scripted ``grpc.aio``-like
calls: its read-ahead bound, resume without loss or duplicates, errors, refusals and cancel.
Both readers against the real engine: ``test_stream_readers.py``."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.web.conftest import WAIT
from web_facade.errors import from_rpc_error
from web_facade.stream import aio_relay
from web_facade.stream.aio_relay import AioRelay
from web_facade.stream.relay import END, QUEUE_BYTES, Resume, opened

# -- the asyncio relay against scripted calls ------------------------------------------


def _unavailable() -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "cut"
    )


class ScriptedCall:
    """Yields its events, then raises ``error`` or waits until cancelled (``hang``)."""

    def __init__(
        self,
        events: list[pb.Event],
        error: grpc.RpcError | None = None,
        hang: bool = False,
        before: Callable[[int], None] | None = None,
    ) -> None:
        self.events = events
        self.error = error
        self.hang = hang
        self.before = before
        self.cancelled = threading.Event()

        self._next = 0

    async def read(self) -> Any:
        index = self._next
        if index < len(self.events):
            self._next += 1
            if self.before is not None:
                self.before(index)
            return self.events[index]
        if self.error is not None:
            raise self.error
        if self.hang:
            await asyncio.sleep(3600)
        return grpc.aio.EOF

    def cancel(self) -> bool:
        self.cancelled.set()
        return True


class EndsLater(ScriptedCall):
    """Yields its events, then ends a moment later (as the engine's stream ends just after
    the run's last event)."""

    async def read(self) -> Any:
        if self._next < len(self.events):
            return await super().read()
        await asyncio.sleep(0.2)
        return grpc.aio.EOF


class ScriptedEngine:
    """A ``grpc.aio`` stub's stream methods, answering with scripted calls."""

    def __init__(self, runs: list[ScriptedCall], subscriptions: list[ScriptedCall]) -> None:
        self.runs = runs
        self.subscriptions = subscriptions
        self.subscribed: list[pb.SubscribeRequest] = []
        self.interrupted: list[pb.InterruptRequest] = []
        self.interrupt_sent = threading.Event()

    def Run(self, request: pb.RunRequest, metadata: Any = None) -> ScriptedCall:
        return self.runs.pop(0)

    def Subscribe(self, request: pb.SubscribeRequest, metadata: Any = None) -> ScriptedCall:
        self.subscribed.append(request)
        return self.subscriptions.pop(0)

    async def Interrupt(
        self,
        request: pb.InterruptRequest,
        timeout: float,  # noqa: ASYNC109 (grpc.aio's signature)
        metadata: Any = None,
    ) -> pb.InterruptResponse:
        self.interrupted.append(request)
        self.interrupt_sent.set()
        return pb.InterruptResponse()


def _text(seq: int, size: int = 1) -> pb.Event:
    delta = pb.TextMessageContent(message_id="m", delta="x" * size)
    return pb.Event(seq=seq, session_id="s", run_id="r", text_message_content=delta)


def _started() -> pb.Event:
    return pb.Event(seq=1, session_id="s", run_id="r", run_started=pb.RunStarted())


def _finished(seq: int) -> pb.Event:
    return pb.Event(seq=seq, session_id="s", run_id="r", run_finished=pb.RunFinished())


def _drain(relayed: AioRelay) -> list[Any]:
    items = []
    while True:
        item = relayed.get(WAIT)
        assert item is not None, "the relay went quiet"
        items.append(item)
        if not isinstance(item, pb.Event):
            return items


def test_the_asyncio_relay_reads_no_more_than_queue_bytes_ahead_of_its_reader() -> None:
    size, count = 1_000_000, 40
    ahead = QUEUE_BYTES // size + 1
    taken = [0]
    most = [0]

    def before(index: int) -> None:
        most[0] = max(most[0], index + 1 - taken[0])

    call = ScriptedCall([_text(seq, size) for seq in range(1, count + 1)], before=before)
    relayed = AioRelay(ScriptedEngine([call], []), "Run", pb.RunRequest())
    seqs = []
    while (item := relayed.get(WAIT)) is not END:
        assert isinstance(item, pb.Event)
        seqs.append(item.seq)
        taken[0] += 1
    assert seqs == list(range(1, count + 1))
    assert ahead <= most[0] <= ahead + 1, most[0]
    assert relayed.join(WAIT)


def test_the_asyncio_relay_resumes_a_cut_stream_without_loss_or_duplicates() -> None:
    run = ScriptedCall([_started(), _text(2), _text(3)], error=_unavailable())
    again = ScriptedCall([pb.Event(batch=[_text(2), _text(3), _text(4)]), _finished(5)])
    engine = ScriptedEngine([run], [again])
    request = pb.RunRequest(session_id="s", run_id="r")
    relayed = AioRelay(engine, "Run", request, Resume.of_run(engine, request))
    items = _drain(relayed)
    assert items[-1] is END
    assert [event.seq for event in items[:-1]] == [1, 2, 3, 4, 5]
    (subscription,) = engine.subscribed
    assert (subscription.session_id, subscription.after_seq, subscription.until_idle) == (
        "s",
        3,
        True,
    )


def test_the_asyncio_relay_hands_on_an_error_it_cannot_resume() -> None:
    run = ScriptedCall([_started()], error=_unavailable())
    relayed = AioRelay(ScriptedEngine([run], []), "Run", pb.RunRequest())  # no Resume
    items = _drain(relayed)
    assert isinstance(items[-1], grpc.RpcError)
    assert from_rpc_error(items[-1]).status == 503


def test_an_engine_refusal_is_raised_when_the_asyncio_relay_opens() -> None:
    refused = grpc.aio.AioRpcError(
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.aio.Metadata(),
        grpc.aio.Metadata(("agentik-error", "busy")),
        "the thread is busy",
    )
    engine = ScriptedEngine([ScriptedCall([], error=refused)], [])
    relayed = AioRelay(engine, "Run", pb.RunRequest())
    with pytest.raises(grpc.RpcError) as caught:
        opened(relayed, WAIT)
    assert from_rpc_error(caught.value).status == 409


def test_cancelling_the_asyncio_relay_cancels_the_call_and_interrupts_a_resumed_run() -> None:
    run = ScriptedCall([_started()], error=_unavailable())
    again = ScriptedCall([_text(2)], hang=True)
    engine = ScriptedEngine([run], [again])
    request = pb.RunRequest(session_id="s", run_id="r", cancel_on_disconnect=True)
    relayed = AioRelay(engine, "Run", request, Resume.of_run(engine, request))
    assert [relayed.get(WAIT).seq, relayed.get(WAIT).seq] == [1, 2]  # type: ignore[union-attr]
    relayed.cancel()
    relayed.cancel()  # safe to repeat
    assert again.cancelled.wait(WAIT)
    assert relayed.join(WAIT)
    assert engine.interrupt_sent.wait(WAIT)
    assert [(i.session_id, i.run_id) for i in engine.interrupted] == [("s", "r")]


def test_cancelling_a_plain_asyncio_relay_cancels_the_call_and_interrupts_nothing() -> None:
    call = ScriptedCall([_started()], hang=True)
    engine = ScriptedEngine([call], [])
    request = pb.RunRequest(session_id="s", run_id="r", cancel_on_disconnect=True)
    relayed = AioRelay(engine, "Run", request, Resume.of_run(engine, request))
    assert relayed.get(WAIT) is not None
    relayed.cancel()
    assert call.cancelled.wait(WAIT)
    assert relayed.join(WAIT)
    assert not engine.interrupted
    assert not aio_relay._background


def test_a_relay_whose_reader_saw_the_last_event_lets_the_call_end_by_itself() -> None:
    call = EndsLater([_started(), _finished(2)])
    engine = ScriptedEngine([call], [])
    request = pb.RunRequest(session_id="s", run_id="r")
    relayed = AioRelay(engine, "Run", request, Resume.of_run(engine, request))
    assert [relayed.get(WAIT).seq, relayed.get(WAIT).seq] == [1, 2]  # type: ignore[union-attr]
    relayed.cancel(finished=True)
    assert relayed.join(WAIT)
    assert not call.cancelled.is_set()  # it ended: nothing was cancelled


def test_a_finished_relay_whose_call_does_not_end_is_cancelled_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(aio_relay, "FINISH_GRACE", 0.05)
    call = ScriptedCall([_started(), _finished(2)], hang=True)
    engine = ScriptedEngine([call], [])
    request = pb.RunRequest(session_id="s", run_id="r")
    relayed = AioRelay(engine, "Run", request, Resume.of_run(engine, request))
    assert [relayed.get(WAIT).seq, relayed.get(WAIT).seq] == [1, 2]  # type: ignore[union-attr]
    relayed.cancel(finished=True)
    assert call.cancelled.wait(WAIT)
    assert relayed.join(WAIT)


def test_the_asyncio_relay_resumes_a_stream_the_engine_cut_for_reading_slowly_only() -> None:
    """DEADLINE_EXCEEDED with ``agentik-error: write_timeout`` ([engine] write_timeout) is
    the engine's cut of a slow reader, and goes on; any other DEADLINE_EXCEEDED ends it."""
    trailer = grpc.aio.Metadata(("agentik-error", "write_timeout"))
    for trailing, resumed in ((trailer, True), (grpc.aio.Metadata(), False)):
        cut = grpc.aio.AioRpcError(
            grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), trailing, "cut"
        )
        run = ScriptedCall([_started(), _text(2)], error=cut)
        again = ScriptedCall([_text(3), _finished(4)])
        engine = ScriptedEngine([run], [again])
        request = pb.RunRequest(session_id="s", run_id="r")
        items = _drain(AioRelay(engine, "Run", request, Resume.of_run(engine, request)))
        if resumed:
            assert items[-1] is END
            assert [event.seq for event in items[:-1]] == [1, 2, 3, 4]
        else:
            assert items[-1] is cut
            assert not engine.subscribed
