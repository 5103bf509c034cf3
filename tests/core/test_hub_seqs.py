"""No follower ever sees a seq the store does not hold; the run still reserves seqs ahead.

Followers see what is stored, so what a client saw is what a replay shows, whatever
happens to the engine after. The reserved block keeps a crashed run's closing events
after every seq the dead engine handed out, stored or not.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.flush import JOIN_CHARS
from engine_service.core.hub import SessionHub
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.stores import MemorySessionStore

WAIT = 10.0


class BurstModel(ChatModel):
    """Answers with ``count`` text deltas, as fast as the loop takes them, each too long
    to be joined with the next (``core.flush``): one event each."""

    name = "burst"

    def __init__(self, count: int) -> None:
        self.count = count

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(self.count):
            yield TextDelta(f"w{index} ".ljust(JOIN_CHARS // 2 + 1, "."))


def test_the_hub_shows_followers_only_stored_events_even_inside_the_reserved_block() -> None:
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=10)
    for _ in range(4):
        hub.publish("r", ev.StepStarted("x"))

    assert hub.since(0) == []
    assert [e.seq for e in hub.unflushed()] == [1, 2, 3, 4]
    hub.stored(3)
    assert [e.seq for e in hub.since(1)] == [2, 3]
    assert [e.seq for e in hub.unflushed()] == [4]
    hub.stored(4)
    assert [e.seq for e in hub.since(0)] == [1, 2, 3, 4]


async def test_every_event_a_follower_gets_is_stored_when_it_gets_it() -> None:
    store = MemorySessionStore()
    limits = EngineLimits(run=RunLimits(seq_block=8))
    engine = Engine(store, BurstModel(300), ToolRegistry(), limits)
    await engine.start()
    message = Message(id="u", role=Role.USER, content=[TextPart("go")])
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id="t", create_session=True, messages=[message])
    )

    seen: list[int] = []
    async with asyncio.timeout(WAIT):
        async for event in engine.run_events(handle):
            session = await store.get_session("t")
            assert event.seq <= session.last_seq, event.seq
            seen.append(event.seq)
    await engine.shutdown(1.0)

    stored = [e.seq for e in await store.read_events("t", 0, 0)]
    assert seen == stored == list(range(1, len(stored) + 1))
    assert len(seen) > 300  # the run went far past its first block of 8
    assert (await store.get_session("t")).reserved_seq >= seen[-1]
