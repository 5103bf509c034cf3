"""``core.turn``: a run's end, whatever the store says while the run is being stopped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.deliveries import Delivery
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import InvalidInput
from engine_service.core.events import Event
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import RunHold
from engine_service.stores import MemorySessionStore

WAIT = 10.0


class RefusingWrites(MemorySessionStore):
    """Refuses every write of messages once ``refusing`` is set, for a reason of its own
    (not another replica holding the run)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = False

    async def append_messages_and_events(
        self,
        session_id: str,
        messages: Sequence[Message],
        events: Sequence[Event],
        *,
        reserve_through: int = 0,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        if self.refusing and messages:
            raise InvalidInput("a refusal of the store's own")
        await super().append_messages_and_events(
            session_id,
            messages,
            events,
            reserve_through=reserve_through,
            title=title,
            now=now,
            hold=hold,
        )


class Talker(ChatModel):
    """A long answer, a little at a time."""

    name = "talker"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(2_000):
            await asyncio.sleep(0.002)
            yield TextDelta(f"w{index} ")


def _said(text: str) -> Message:
    return Message(id=f"u-{text}", role=Role.USER, content=[TextPart(text)])


async def test_a_stopped_run_whose_answer_the_store_refuses_ends_and_frees_the_conversation() -> (
    None
):
    """The store refuses the stopped run's partial answer, and no other replica has the
    run: the run ends (RUN_ERROR, failed) instead of leaving the conversation busy here."""
    store = RefusingWrites()
    engine = Engine(store, Talker(), ToolRegistry(), EngineLimits())
    await engine.start()
    try:
        handle = await engine.start_run(
            ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[_said("go")])
        )
        events = engine.run_events(handle)
        async with asyncio.timeout(WAIT):
            async for event in events:
                if isinstance(event.body, ev.TextMessageContent):
                    break
            store.refusing = True
            assert await engine.stop_run(ANONYMOUS, "s", handle.run_id) == (True, handle.run_id)
            rest = [event async for event in events]
        end = rest[-1].body
        assert isinstance(end, ev.RunError), end
        assert (end.code, end.message) == (
            "storage_unavailable",
            "storage unavailable: the store refused the events",
        )
        assert (await store.get_run("s", handle.run_id)).status is RunStatus.FAILED
        store.refusing = False
        async with asyncio.timeout(WAIT):  # the conversation takes its next turn
            again = await engine.start_run(
                ANONYMOUS, RunInput(session_id="s", messages=[_said("again")])
            )
            assert await engine.stop_run(ANONYMOUS, "s", again.run_id) == (True, again.run_id)
            assert [e async for e in engine.run_events(again)]
    finally:
        await engine.shutdown(0)


class Short(ChatModel):
    """A one-word answer."""

    name = "short"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        yield TextDelta("done")


async def test_a_webhook_that_cannot_be_made_does_not_keep_the_run_from_ending() -> None:
    """Making the run's webhook delivery fails (a bug there): the run's end is stored all
    the same, and the conversation takes its next turn."""
    store = MemorySessionStore()
    engine = Engine(store, Short(), ToolRegistry(), EngineLimits())

    async def broken(_run: object) -> list[Delivery]:
        raise RuntimeError("a bug in the payload")

    engine.notices.end_deliveries = broken  # type: ignore[method-assign,assignment]
    await engine.start()
    try:
        for text in ("one", "two"):
            async with asyncio.timeout(WAIT):
                handle = await engine.start_run(
                    ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[_said(text)])
                )
                events = [event async for event in engine.run_events(handle)]
            assert isinstance(events[-1].body, ev.RunFinished)
            assert (await store.get_run("s", handle.run_id)).status is RunStatus.SUCCEEDED
    finally:
        await engine.shutdown(0)
