"""A write-behind flush still in flight when the run ends is neither lost nor repeated.

A store whose writes await (PostgreSQL) can be mid-commit when the run ends and the
periodic flusher is cancelled. The run's final store must then know what that flush
stored, or it writes the same events again (found by the 256-stream benchmark on
PostgreSQL: "event seq 2 does not follow 54").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.events import Event
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.stores import MemorySessionStore

WAIT = 10.0


class SlowCommitStore(MemorySessionStore):
    """Commits an append at once, then takes a while to say so (a network round trip)."""

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        await super().append_events(session_id, events, reserve_through=reserve_through)
        if events:
            await asyncio.sleep(0.3)  # longer than the whole answer takes


class SteadyModel(ChatModel):
    """Text deltas a little apart, so flushes happen while it speaks."""

    name = "steady"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(30):
            await asyncio.sleep(0.004)
            yield TextDelta(f"w{index} ")


async def test_a_run_ending_during_a_slow_flush_stores_each_event_once() -> None:
    store = SlowCommitStore()
    limits = EngineLimits(run=RunLimits(flush_interval=0.01), event_retention=0)
    engine = Engine(store, SteadyModel(), ToolRegistry(), limits)
    await engine.start()
    for attempt in range(3):  # the first flush outlasts the answer: the end lands mid-flush
        thread = f"t{attempt}"
        message = Message(id="u", role=Role.USER, content=[TextPart("go")])
        handle = await engine.start_run(
            ANONYMOUS, RunInput(session_id=thread, create_session=True, messages=[message])
        )
        async with asyncio.timeout(WAIT):
            seen = [event async for event in engine.run_events(handle)]
        assert isinstance(seen[-1].body, ev.RunFinished), seen[-1].body
        run = await store.get_run(thread, handle.run_id)
        assert run.status is RunStatus.SUCCEEDED, (run.error_code, run.error_message)
        stored = await store.read_events(thread, 0, 0)
        assert [e.seq for e in stored] == [e.seq for e in seen]
    await engine.shutdown(0)
