"""Replays and live streams of more than 1,000 events, many readers at once: every id once.

Mid-stream every web worker stalls (SIGSTOP) until the engine's events pile up unread in its
sockets, then goes on (SIGCONT), as a CPU-starved or GC-paused worker would: each stream then
finds hundreds of events waiting at once. Written against the facade dropping one event
whenever 256 frames were waiting (issue 9): there nearly every stream lost one event in 257.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.faults.conftest import WITHIN, new_conversation
from tests.faults.ledger import Ledger, audit, follow, poll, send_request, store_view
from tests.faults.procs import NEEDS_PROCFS, NEEDS_SIGNALS, pause_workers
from tests.web.e2e.conftest import Stack

pytestmark = [
    pytest.mark.processes,
    pytest.mark.signals,
    pytest.mark.procfs,
    pytest.mark.load,
    NEEDS_PROCFS,
    NEEDS_SIGNALS,
    pytest.mark.timeout(180),
]

READERS = 24
RUNS = 20


async def _stall_workers(stack: Stack) -> None:
    piled = await pause_workers(stack.web.popen.pid, stack.grpc_port, WITHIN)
    assert piled > 0


async def test_two_dozen_concurrent_replays_of_a_2000_chunk_conversation_each_get_every_id_once(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    conversation_id = await new_conversation(http)
    sender = Ledger(conversation_id)
    # Paced, so that the answer is about as many events as tokens (tokens the engine reads
    # together are one): with too few, the replays end before the workers stall.
    turn = "[[chunks:2000]][[slow:0.003]]"
    assert await follow(http, sender, send_request(conversation_id, turn), WITHIN)
    streamed = sender.count("append_text")
    # Most tokens come alone; how many a loaded box joins is its speed to say (at most ~1,240
    # writes fit in 2,000 tokens 3 ms apart with a 5 ms flush gap).
    assert streamed > 400, f"only {streamed} text events: nothing much to replay"
    path = f"/agentik/conversations/{conversation_id}/events?after=0&until_idle=true"
    readers = {f"replay {i}": Ledger(conversation_id) for i in range(READERS)}
    replays = [
        asyncio.create_task(follow(http, reader, ("GET", path, None), WITHIN))
        for reader in readers.values()
    ]
    try:
        # Stalled as soon as one replay streams, while the others are still being read from
        # the engine: once every replay has begun, an engine whose SQLite reads run at once
        # on its loop may have sent the workers all 2,000 events of each already.
        await poll(lambda: any(r.frames for r in readers.values()), "a replay to start", WITHIN)
        await _stall_workers(stack)
        before_stall = sum(r.count("append_text") for r in readers.values())
        assert await asyncio.gather(*replays) == [True] * READERS
    finally:
        for replay in replays:
            replay.cancel()
    assert all(reader.resumes == 0 for reader in readers.values()), "a replay broke"
    after_stall = sum(r.count("append_text") for r in readers.values()) - before_stall
    assert after_stall > READERS, f"only {after_stall} text events after the stall"
    view = await store_view(http, f"127.0.0.1:{stack.grpc_port}", conversation_id, WITHIN)
    result = audit([("send", sender), *readers.items()], {conversation_id: view})
    assert result.clean(), str(result)
    assert result.received > streamed * (READERS + 1)
    for ledger in (sender, *readers.values()):
        assert ledger.count("append_text") == streamed
        assert ledger.text() == view.assistant_text()


async def test_twenty_concurrent_agentik_sends_of_twelve_hundred_chunks_each_get_every_id_once(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    conversations = [await new_conversation(http) for _ in range(RUNS)]
    senders = {f"send {i}": Ledger(c) for i, c in enumerate(conversations)}
    # Slow enough that the runs are still answering when the workers stop: a fast engine
    # (events in batches) had written all 1,200 chunks into the sockets before the stall.
    turn = "[[chunks:1200]][[slow:0.002]]"
    sends = [
        asyncio.create_task(
            follow(http, ledger, send_request(ledger.conversation_id, turn), WITHIN)
        )
        for ledger in senders.values()
    ]
    try:
        await poll(
            lambda: all(s.count("append_text") for s in senders.values()),
            "every send to stream text",
            WITHIN,
        )
        await _stall_workers(stack)
        before_stall = sum(s.count("append_text") for s in senders.values())
        assert await asyncio.gather(*sends) == [True] * RUNS
    finally:
        for send in sends:
            send.cancel()
    assert all(ledger.resumes == 0 for ledger in senders.values()), "a send stream broke"
    # The runs were still answering when the workers stopped (how many events 1,200 tokens
    # make is the machine's speed to say: a loaded box joins more of them into one).
    after_stall = sum(s.count("append_text") for s in senders.values()) - before_stall
    assert after_stall > RUNS, f"only {after_stall} text events after the stall"
    target = f"127.0.0.1:{stack.grpc_port}"
    views = {c: await store_view(http, target, c, WITHIN) for c in conversations}
    result = audit(senders.items(), views)
    assert result.clean(), str(result)
    for ledger in senders.values():
        view = views[ledger.conversation_id]
        stored = sum(1 for _, kind in view.engine if kind == "text_message_content")
        # Tokens the engine read together are one event: how many is the store's to say.
        assert ledger.count("append_text") == stored > 1
        assert ledger.text() == view.assistant_text()


async def _agui_run(
    http: httpx.AsyncClient, thread_id: str, text: str, events: list[dict[str, Any]]
) -> None:
    """Read one ``POST /agui`` run into ``events``; the stream must end at a frame boundary."""
    body = {
        "threadId": thread_id,
        "runId": str(uuid.uuid4()),
        "messages": [{"id": str(uuid.uuid4()), "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
    }
    buffer = b""
    deadline = time.monotonic() + WITHIN
    async with http.stream("POST", "/agui", json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for chunk in response.aiter_raw():
            buffer += chunk
            *blocks, buffer = buffer.split(b"\n\n")
            for block in blocks:
                data = [line[6:] for line in block.split(b"\n") if line.startswith(b"data: ")]
                if data:
                    events.append(json.loads(b"\n".join(data)))
            assert time.monotonic() < deadline, "the AG-UI run did not end in time"
    assert buffer == b"", "the AG-UI stream ended mid-frame"


async def test_twenty_concurrent_agui_runs_of_five_hundred_chunks_each_deliver_every_text_delta(
    stack: Stack, http: httpx.AsyncClient
) -> None:
    threads = [str(uuid.uuid4()) for _ in range(RUNS)]
    received: dict[str, list[dict[str, Any]]] = {t: [] for t in threads}
    # Slow enough that the runs are still answering when the workers stop (as the /agentik
    # sends above): the engine, sending in batches, and a worker reading on its asyncio loop
    # could otherwise be through all 500 chunks before the stall, and nothing piles up.
    turn = "[[chunks:500]][[slow:0.004]]"
    runs = [asyncio.create_task(_agui_run(http, t, turn, received[t])) for t in threads]
    try:
        await poll(
            lambda: all(len(events) > 2 for events in received.values()),
            "every AG-UI run to stream",
            WITHIN,
        )
        await _stall_workers(stack)
        before_stall = sum(len(events) for events in received.values())
        await asyncio.gather(*runs)
    finally:
        for run in runs:
            run.cancel()
    # The runs were still answering when the workers stopped.
    after_stall = sum(len(events) for events in received.values()) - before_stall
    assert after_stall > RUNS, f"only {after_stall} AG-UI events after the stall"
    target = f"127.0.0.1:{stack.grpc_port}"
    problems: dict[str, str] = {}
    for thread_id, events in received.items():
        view = await store_view(http, target, thread_id, WITHIN)
        deltas = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
        stored = sum(1 for _, kind in view.engine if kind == "text_message_content")
        if events[0]["type"] != "RUN_STARTED" or events[-1]["type"] != "RUN_FINISHED":
            problems[thread_id] = f"runs from {events[0]['type']} to {events[-1]['type']}"
        elif len(deltas) != stored or "".join(deltas) != view.assistant_text():
            problems[thread_id] = f"{stored - len(deltas)} of {stored} TEXT_MESSAGE_CONTENT lost"
        elif stored < 20:  # tokens read together are one event (how many: the box's speed)
            problems[thread_id] = f"only {stored} TEXT_MESSAGE_CONTENT stored of 500 tokens"
    assert not problems, f"{len(problems)} of {RUNS} AG-UI runs lost text: {problems}"
