"""A client that does not read pins no more than ``[engine] stream_buffer_bytes`` in the engine.

Before the bound, three clients that never read a 20 MB answer held the whole of each
answer in the engine (the session's buffer, kept for readers that are behind) for as long
as they stayed connected: 121 MB traced here. Now the buffer forgets stored events past the
setting and a reader that is behind reads them from the store, a bounded batch at a time.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    WAIT,
    collect,
    engine_settings,
    kind,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply

READERS = 3
BUFFER = 1024 * 1024
"""``stream_buffer_bytes`` here."""
EVENT = 1024 * 1024
"""``max_event_bytes`` (the default)."""


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def _steady_memory() -> int:
    """Traced memory once what is in flight has settled: the least of a few samples, a
    few loop turns apart (a reader may be in the middle of a store read at one of them)."""
    samples = []
    for _ in range(5):
        for _ in range(20):
            await asyncio.sleep(0)
        gc.collect()
        samples.append(tracemalloc.get_traced_memory()[0])
    return min(samples)


def _lost_and_duplicated(seqs: list[int], last: int) -> tuple[int, int]:
    duplicated = sum(n - 1 for n in Counter(seqs).values())
    return len(set(range(1, last + 1)) - set(seqs)), duplicated


@pytest.mark.parametrize(
    ("chunk", "chunks"),
    [(10_000, 2_000), (1_000_000, 20)],
    ids=["10 KB deltas", "1 MB deltas"],
)
async def test_readers_that_stop_reading_a_20_mb_answer_pin_a_bounded_amount_and_lose_nothing(
    llm: FakeOpenAI, tmp_path: Path, traced: None, chunk: int, chunks: int
) -> None:
    """A 20 MB answer, in small deltas or in deltas near the event limit."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="k",
        AGENTIK_STORE=f"sqlite:///{tmp_path / 'agentik.db'}",
        AGENTIK_STREAM_BUFFER_BYTES=str(BUFFER),
        # Past the default bound of an answer (8 MiB): what is measured is the readers.
        AGENTIK_LLM_MAX_ANSWER_BYTES=str(32 * 1024 * 1024),
    )
    async with running_engine(settings) as harness:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        calls = []
        for index in range(READERS):
            # A millisecond per chunk: every run is still answering when the last one opens
            # (an engine storing at full speed had ended the first 20 MB before that).
            llm.enqueue(FakeReply(text=["y" * chunk] * chunks, delay=0.001))
            call = harness.stub.Run(
                pb.RunRequest(session_id=f"slow{index}", create_session=True, messages=[user("go")])
            )
            calls.append((call, [await next_event(call)]))  # open; then not read
        assert harness.engine.runs_in_flight == READERS
        async with asyncio.timeout(6 * WAIT):
            while harness.engine.runs_in_flight:  # noqa: ASYNC110
                await asyncio.sleep(0.05)  # until every run ended: its events are stored
        pinned = await _steady_memory() - before
        # Three 20 MB answers; what stays is each session's buffer (the setting, and the
        # event that tips it over) and what each reader holds: its next event (as an
        # event, as protobuf and as bytes in gRPC's send), and a store read in flight.
        # Measured: 8 MB (10 KB deltas), 7 to 17 MB (1 MB deltas, once 25 MB); 121 and
        # 123 MB before the bound.
        assert pinned < READERS * (BUFFER + 8 * EVENT), pinned

        # The first reader reads on from where it stopped; the others were cut and
        # resume after the last id they saw. Not one id lost or repeated.
        first, seen = calls[0]
        seen.extend(await collect(first))
        for index, (call, head) in enumerate(calls[1:], 1):
            call.cancel()
            head.extend(
                await collect(
                    harness.stub.Subscribe(
                        pb.SubscribeRequest(
                            session_id=f"slow{index}", after_seq=head[-1].seq, until_idle=True
                        )
                    )
                )
            )
        for _, events in calls:
            assert kind(events[-1]) == "run_finished"
            assert _lost_and_duplicated([e.seq for e in events], events[-1].seq) == (0, 0)
            assert text_of(events) == "y" * chunk * chunks
