"""kill -9 of the one engine (SQLite) with 20 streams open through the facade, runs resumed
(``[engine] resume_runs``, the default): once the engine is started again, every cut run goes
on under its own id and ends in success with the fake LLM's whole answer as its last stored
message. Every stream (``send`` and ``/events`` follower) counts 0 lost and 0 duplicated
ids against the store, and gets at most one ``retry`` (the superseded partial) per cut.

``test_engine_killed.py`` is the same fault with ``resume_runs = false`` (closed as
interrupted)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import SIGNAL_MARKS, WITHIN, open_streams, restart_engine
from tests.faults.ledger import Ledger, audit, store_view
from tests.web.e2e.conftest import Stack, free_port

pytestmark = SIGNAL_MARKS

CONVERSATIONS = 10
"""Each with a ``send`` stream and an ``/events`` follower: 20 streams."""
CHUNKS = 400
TURN = f"[[slow:0.02]] [[chunks:{CHUNKS}]]"
"""About 8 s of text per turn: every turn is mid-answer when the engine dies."""
ANSWER = "".join(f"w{i} " for i in range(CHUNKS))


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("engine-killed-resumed")
    # A fixed engine port, so the facade finds the new engine where the old one was.
    running = Stack(
        llm,
        logs,
        AGENTIK_STORE=f"sqlite:///{logs / 'store.db'}",
        AGENTIK_GRPC_ADDR=f"127.0.0.1:{free_port()}",
        AGENTIK_WEB_THREADS="96",  # every stream has a thread even if one worker takes all
    )
    yield running
    running.stop()


def _run_id(ledger: Ledger) -> str:
    """The run of the last frame that names one."""
    for frame in reversed(ledger.frames):
        if frame.data and frame.data.get("run_id"):
            return str(frame.data["run_id"])
    return ""


async def test_streams_cut_by_an_engine_kill_go_on_and_every_run_finishes_its_answer(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    ledgers, runs = await open_streams(http, CONVERSATIONS, TURN, mid_turn=20)
    try:
        finished = {name for name, ledger in ledgers.items() if ledger.frames[-1].type == "end"}
        run_ids = {name: _run_id(ledger) for name, ledger in ledgers.items()}
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
    assert not result.skipped, result.skipped  # no client saw an event not stored
    assert not finished, f"turns ended before the kill: {sorted(finished)}"
    for name, ledger in ledgers.items():
        # The same run goes on (its id kept) and ends in success.
        assert ledger.frames[-1].type == "end", (name, ledger.frames[-1].type)
        assert (ledger.frames[-1].data or {}).get("outcome") == "success", name
        assert _run_id(ledger) == run_ids[name], name
        assert ledger.count("retry") <= 1, name  # at most one superseded partial per cut
    for conversation_id, view in views.items():
        # The whole answer is the last stored message; the cut partial is not stored.
        assert view.assistant_text() == ANSWER, conversation_id
    # The conversations are free: a new turn runs on the new engine.
    reply = await http.post(
        f"/agentik/conversations/{next(iter(conversations))}/send", json={"text": "again"}
    )
    assert reply.status_code == 200 and "event: end" in reply.text
