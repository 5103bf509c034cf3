"""The transcript: a run's input, and the title it gives an untitled conversation, stored
in one write."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import pytest

from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.models import (
    Message,
    ReconcileMode,
    Role,
    RunInput,
    Session,
    TextPart,
)
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import RunBegun, RunHold
from engine_service.stores import MemorySessionStore

WAIT = 10.0


class Hello(ChatModel):
    name = "hello"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        yield TextDelta("hello")


class CountingCalls(MemorySessionStore):
    """Notes each write of messages and each rename, and each run's begin that stored an
    opening (with the title it gave); declines openings when told."""

    def __init__(self, *, openings: bool = True) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []
        self.openings = openings

    async def begin_run(self, *args: Any, **kw: Any) -> RunBegun:
        if not self.openings:
            kw["opening"] = None
        begun = await super().begin_run(*args, **kw)
        if begun.opened:
            self.calls.append(("begin", begun.session.title))
        return begun

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        self.calls.append(("append", title))
        await super().append_messages(session_id, messages, title=title, now=now, hold=hold)

    async def rename_session(self, session_id: str, title: str, now: datetime) -> Session:
        self.calls.append(("rename", title))
        return await super().rename_session(session_id, title, now)


async def _run(engine: Engine, store: CountingCalls, text: str, mode: ReconcileMode) -> None:
    message = Message(id=f"m-{len(store.calls)}", role=Role.USER, content=[TextPart(text)])
    handle = await engine.start_run(
        ANONYMOUS,
        RunInput(session_id="s", create_session=True, messages=[message], reconcile=mode),
    )
    async with asyncio.timeout(WAIT):
        async for _ in engine.run_events(handle):
            pass


@pytest.mark.parametrize("openings", [True, False])
async def test_the_first_run_stores_its_message_and_the_title_it_gives_in_one_write(
    openings: bool,
) -> None:
    store = CountingCalls(openings=openings)
    engine = Engine(store, Hello(), ToolRegistry(), EngineLimits())
    await engine.start()
    await _run(engine, store, "Plan a trip to Lisbon", ReconcileMode.APPEND)
    await _run(engine, store, "and back", ReconcileMode.APPEND)
    await engine.shutdown(0)

    inputs = [call for call in store.calls if call[0] == "rename" or call[1]]
    # With the run's begin (its opening) or in the run's own write: no separate rename;
    # the later run's begin (its opening too) left the title as it was.
    if openings:
        assert inputs == [("begin", "Plan a trip to Lisbon")] * 2
    else:
        assert inputs == [("append", "Plan a trip to Lisbon")]
    assert (await store.get_session("s")).title == "Plan a trip to Lisbon"
    history = await store.all_messages("s")
    assert [m.role for m in history] == [Role.USER, Role.ASSISTANT] * 2


async def test_a_first_run_that_replaces_the_history_names_the_conversation_too() -> None:
    store = CountingCalls()
    engine = Engine(store, Hello(), ToolRegistry(), EngineLimits())
    await engine.start()
    await _run(engine, store, "Replace it all", ReconcileMode.REPLACE)
    await engine.shutdown(0)

    assert ("rename", "Replace it all") in store.calls
    assert (await store.get_session("s")).title == "Replace it all"
