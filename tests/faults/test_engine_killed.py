"""kill -9 of the engine with 20 streams open through the facade: the streams go on once a
new engine is up — the facade reopens each cut stream after its last relayed id within its
retry window, and a client whose stream still ends resumes with ``Last-Event-ID`` — and get
the closing events of their turns, with no id twice; the partial answers are kept."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import SIGNAL_MARKS, WITHIN, open_streams, restart_engine
from tests.faults.ledger import audit, store_view
from tests.web.e2e.conftest import Stack, free_port

pytestmark = SIGNAL_MARKS

CONVERSATIONS = 10
"""Each with a ``send`` stream and an ``/events`` follower: 20 streams."""
TURN = "[[slow:0.02]] [[chunks:400]]"
"""About 8 s of text per turn: every turn is mid-answer when the engine dies."""


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("engine-killed")
    # A fixed engine port, so the facade finds the new engine where the old one was.
    running = Stack(
        llm,
        logs,
        AGENTIK_STORE=f"sqlite:///{logs / 'store.db'}",
        AGENTIK_GRPC_ADDR=f"127.0.0.1:{free_port()}",
        # Every stream must have a thread even if one worker takes them all.
        AGENTIK_WEB_THREADS="96",
        AGENTIK_RESUME_RUNS="false",  # closed as interrupted: test_runs_resumed resumes
    )
    yield running
    running.stop()


async def test_streams_cut_by_an_engine_kill_resume_on_the_new_engine_without_a_repeated_id(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=20)
    try:
        seen_before = {name: ledger.last_id for name, ledger in ledgers.items()}
        finished = {name for name, ledger in ledgers.items() if ledger.frames[-1].type == "end"}
        restart_engine(stack)
        for run in runs:
            assert await run, "a stream did not reach its turn's end"
    finally:
        for run in runs:
            run.cancel()

    target = f"127.0.0.1:{stack.grpc_port}"
    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views, crashed=True)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    # No client saw an event the dead engine had not stored (issue 27, item 10).
    assert not result.skipped, result.skipped
    assert not finished, f"turns ended before the kill: {sorted(finished)}"
    for name, ledger in ledgers.items():
        assert ledger.frames[-1].type == "interrupted", name
        after = [f.id for f in ledger.frames if f.id is not None and f.id > seen_before[name]]
        assert after, f"{name} got nothing after the crash"
        kept = views[ledger.conversation_id].assistant_text()
        # The kept partial answer is what was stored: a prefix of what the client saw.
        assert kept and ledger.text().startswith(kept), name
    # The conversations are free: a new turn runs on the new engine.
    reply = await http.post(
        f"/agentik/conversations/{next(iter(conversations))}/send", json={"text": "again"}
    )
    assert reply.status_code == 200 and "event: end" in reply.text
