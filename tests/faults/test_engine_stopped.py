"""An engine that stops answering (SIGSTOP, a frozen VM, a silent partition) with its socket
still open: the facade's keepalive pings find it, and every stream through it ends with an
``engine_unavailable`` error instead of sending heartbeats for ever. Once the engine goes on,
each client resumes after its last id: no id lost, none twice (the audit on the store)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import SIGNAL_MARKS, WITHIN, new_conversation
from tests.faults.ledger import Ledger, audit, follow, poll, send_request, store_view
from tests.web.e2e.conftest import Stack

pytestmark = SIGNAL_MARKS

KEEPALIVE = 2.0
"""``[web] engine_keepalive`` in seconds: a ping every 2 s, unanswered after 2 more."""
ENDED_WITHIN = 45.0
"""Seconds for every stream to end once the engine stopped: the ping's answer missed
(~4 s), then the relay's resume window (10 s) against an engine that still does not answer."""
TURN = "[[slow:0.02]] [[chunks:1500]]"
"""About 30 s of text: the turn is mid-answer when the engine stops, and when it goes on."""


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("engine-stopped")
    running = Stack(
        llm,
        logs,
        AGENTIK_STORE=f"sqlite:///{logs / 'store.db'}",
        AGENTIK_WEB_ENGINE_KEEPALIVE=str(KEEPALIVE),
        AGENTIK_RESUME_RUNS="false",
    )
    yield running
    running.stop()


async def test_streams_of_a_stopped_engine_end_with_an_error_and_resume_without_a_lost_id(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    conversations = [await new_conversation(http) for _ in range(2)]
    ledgers: dict[str, Ledger] = {}
    tasks: list[asyncio.Task[bool]] = []
    for index, conversation_id in enumerate(conversations):
        sender = ledgers[f"send {index}"] = Ledger(conversation_id)
        follower = ledgers[f"follow {index}"] = Ledger(conversation_id)
        events = f"/agentik/conversations/{conversation_id}/events?after=0"
        tasks += [
            asyncio.create_task(
                follow(http, sender, send_request(conversation_id, TURN), 3 * ENDED_WITHIN)
            ),
            asyncio.create_task(follow(http, follower, ("GET", events, None), 3 * ENDED_WITHIN)),
        ]
    pid = stack.engine.popen.pid

    def cut(ledger: Ledger) -> bool:
        """The stream open at the stop ended on the facade's id-less error frame."""
        first = ledger.connections[0] if ledger.connections else None
        return first is not None and first.ended.startswith("error frame")

    try:
        await poll(
            lambda: all(ledger.count("append_text") >= 10 for ledger in ledgers.values()),
            "every stream to be mid-turn",
            WITHIN,
        )
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            await poll(
                lambda: all(cut(ledger) for ledger in ledgers.values()),
                "every stream to end on an error while the engine is stopped",
                ENDED_WITHIN,
            )
            took = time.monotonic() - stopped_at
        finally:
            os.kill(pid, signal.SIGCONT)
        # The engine goes on: each client resumes after its last id, to the turn's end.
        finished = await asyncio.wait_for(asyncio.gather(*tasks), 2 * WITHIN)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert all(finished)
    assert took >= KEEPALIVE, f"the streams ended {took:.1f} s after the stop, before a ping"
    for name, ledger in ledgers.items():
        assert "engine_unavailable" in ledger.connections[0].ended, (name, ledger.connections)
        assert ledger.frames[-1].type == "end", name
    target = f"127.0.0.1:{stack.grpc_port}"
    views = {c: await store_view(http, target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
