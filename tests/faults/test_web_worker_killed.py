"""kill -9 of a gunicorn web worker with 50 SSE streams open: clients resume, nothing is lost."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.faults.conftest import SIGNAL_MARKS, WITHIN, open_streams
from tests.faults.ledger import audit, poll, store_view
from tests.faults.procs import NEEDS_PROCFS, kill_busiest_worker, worker_pids
from tests.web.e2e.conftest import STARTUP, Stack

pytestmark = [*SIGNAL_MARKS, pytest.mark.procfs, NEEDS_PROCFS]

CONVERSATIONS = 25
"""Each with a ``send`` stream and an ``/events`` follower: 50 streams."""
TURN = "[[slow:0.02]] [[chunks:300]]"
"""About 6 s of text per turn, so every turn is mid-stream when the worker dies."""


async def test_streams_cut_by_a_killed_web_worker_resume_on_another_and_lose_or_repeat_nothing(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=3)
    try:
        master = stack.web.popen.pid
        killed, cut = kill_busiest_worker(master, stack.http_port)
        assert cut > 0, "the killed worker held no stream"
        assert await asyncio.gather(*runs) == [True] * len(runs)
    finally:
        for run in runs:
            run.cancel()

    resumed = sum(1 for ledger in ledgers.values() if ledger.resumes)
    assert resumed > 0, f"no stream resumed, yet the killed worker held {cut} connections"
    target = f"127.0.0.1:{stack.grpc_port}"
    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    for ledger in ledgers.values():
        assert ledger.frames[-1].type == "end"
        assert ledger.text() == views[ledger.conversation_id].assistant_text()
        view = views[ledger.conversation_id]
        # 300 tokens 20 ms apart: one event each, unless the engine read some together.
        stored = sum(1 for _, kind in view.engine if kind == "text_message_content")
        assert ledger.count("append_text") == stored > 30
    # gunicorn replaced the dead worker.
    await poll(
        lambda: killed not in worker_pids(master) and len(worker_pids(master)) == 2,
        "gunicorn to respawn the killed worker",
        STARTUP,
    )
