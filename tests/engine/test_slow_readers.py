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

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
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

CHUNK = "y" * 10_000
CHUNKS = 2_000
"""A 20 MB answer, streamed in 10 KB deltas."""
READERS = 3


@pytest.fixture
def traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


def _lost_and_duplicated(seqs: list[int], last: int) -> tuple[int, int]:
    duplicated = sum(n - 1 for n in Counter(seqs).values())
    return len(set(range(1, last + 1)) - set(seqs)), duplicated


async def test_readers_that_stop_reading_a_20_mb_answer_pin_a_bounded_amount_and_lose_nothing(
    llm: FakeOpenAI, tmp_path: Path, traced: None
) -> None:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="k",
        AGENTIK_STORE=f"sqlite:///{tmp_path / 'agentik.db'}",
        AGENTIK_STREAM_BUFFER_BYTES=str(1024 * 1024),
    )
    async with running_engine(settings) as harness:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        calls = []
        for index in range(READERS):
            llm.enqueue(FakeReply(text=[CHUNK] * CHUNKS))
            call = harness.stub.Run(
                pb.RunRequest(session_id=f"slow{index}", create_session=True, messages=[user("go")])
            )
            calls.append((call, [await next_event(call)]))  # open; then not read
        turns = [harness.engine.active_run(f"slow{i}") for i in range(READERS)]
        tasks = [turn.task for turn in turns if turn is not None and turn.task is not None]
        assert len(tasks) == READERS
        async with asyncio.timeout(6 * WAIT):
            await asyncio.wait(tasks)  # every run ended: its events are stored
        gc.collect()
        pinned = tracemalloc.get_traced_memory()[0] - before
        # Three 20 MB answers; what stays is each reader's next few events and the
        # sessions' buffers, bounded by the setting (121 MB before the bound).
        assert pinned < 12_000_000, pinned

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
            assert text_of(events) == CHUNK * CHUNKS
