"""The relay reads no more than ``QUEUE_BYTES`` of events ahead of an HTTP client that does
not read: big events are held back by gRPC's flow control (and the engine's store), not
piled up in the facade. A stream the engine cut for that (``[engine] write_timeout``) goes
on where it stopped."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from flask import Flask

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.polling import wait_until
from tests.web.agui.agui_reader import AguiReader, assert_well_formed, text
from tests.web.conftest import WAIT, BackgroundEngine, engine_settings
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


CHUNK = 512 * 1024
"""A text delta of the answer below: 48 of them, 24 MB, more than the relay reads ahead
(``QUEUE_BYTES``) and gRPC holds for it together, so the engine's writes wait."""


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_a_stream_the_engine_cut_for_reading_slowly_goes_on_where_it_stopped(
    mode: str, llm: FakeOpenAI, make_app: Callable[..., Flask]
) -> None:
    """An AG-UI client pauses: the relay stops reading at ``QUEUE_BYTES``, and the engine
    cuts its stream past ``[engine] write_timeout`` (1 s here; the facade would keep the
    client for ``[web] write_timeout``). When the client reads again it gets the whole
    answer, once: the relay read the cut stream to its status and went on after the last
    seq it relayed."""
    settings = engine_settings(
        llm,
        AGENTIK_ENGINE_WRITE_TIMEOUT="1",
        AGENTIK_LLM_MAX_ANSWER_BYTES=str(64 * 1024 * 1024),
    )
    engine = BackgroundEngine(settings)
    target = engine.start()
    try:
        assert engine.server is not None
        stalls = engine.server.stalls
        llm.enqueue(FakeReply(text=["y" * CHUNK] * 48))
        client = make_app(target, AGENTIK_WEB_STREAM_READER=mode).test_client()
        body = {
            "threadId": f"agui-{uuid.uuid4().hex}",
            "runId": uuid.uuid4().hex,
            "messages": [{"id": "m1", "role": "user", "content": "go"}],
        }
        response = client.post("/agui", json=body, buffered=False)
        assert response.status_code == 200, response.get_data()
        chunks: Iterator[bytes] = iter(response.response)  # type: ignore[arg-type]
        first = next(chunks)  # then the client pauses
        wait_until(lambda: stalls.cut, WAIT, "the engine's stream cut")
        assert stalls.cut == 1
        events = AguiReader(itertools.chain([first], chunks)).read_to_end()
        assert_well_formed(events)
        assert text(events) == "y" * CHUNK * 48
    finally:
        engine.stop()
