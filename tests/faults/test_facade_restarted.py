"""SIGTERM of the facade with 50 streams open, a new facade on the same port: all resume."""

from __future__ import annotations

import asyncio

import httpx

from tests.faults.conftest import SIGNAL_MARKS, WITHIN, open_streams
from tests.faults.ledger import audit, store_view
from tests.web.e2e.conftest import Stack

pytestmark = SIGNAL_MARKS

CONVERSATIONS = 25
"""Each with a ``send`` stream and an ``/events`` follower: 50 streams."""
TURN = "[[slow:0.02]] [[chunks:300]]"
"""About 6 s of text per turn: the turns outlive the facade."""


async def test_streams_of_a_sigterm_stopped_facade_end_at_a_frame_boundary_and_resume_on_a_new_one(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=3)
    try:
        # gunicorn drains: each open stream ends at its next frame boundary, then the master
        # exits. The clients keep trying to resume meanwhile (connections refused).
        await asyncio.to_thread(stack.web.stop)
        cut = [name for name, ledger in ledgers.items() if ledger.connections[0].ended]
        await asyncio.to_thread(stack.start_web)
        assert await asyncio.gather(*runs) == [True] * len(runs)
    finally:
        for run in runs:
            run.cancel()

    first_ends = {name: ledger.connections[0].ended for name, ledger in ledgers.items()}
    assert set(cut) == set(ledgers), (
        f"streams still open after the facade stopped: {set(ledgers) - set(cut)}"
    )
    assert set(first_ends.values()) == {"eof"}, (
        f"not every stream ended at a frame boundary: {first_ends}"
    )
    assert all(ledger.resumes >= 1 for ledger in ledgers.values())
    target = f"127.0.0.1:{stack.grpc_port}"
    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    for ledger in ledgers.values():
        assert ledger.frames[-1].type == "end"
        view = views[ledger.conversation_id]
        # 300 tokens 20 ms apart: one event each, unless the engine read some together.
        stored = sum(1 for _, kind in view.engine if kind == "text_message_content")
        assert ledger.count("append_text") == stored > 30
        assert ledger.text() == views[ledger.conversation_id].assistant_text()
