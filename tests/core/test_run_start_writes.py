"""A run's start waits for as few writes as can be: a run stores RUN_STARTED and the
client's new messages in its begin's transaction (``begin_run``'s opening); when its
begin cannot take them (a store that declines), it stores them in one write of its own
(``Outbox.store_messages``), one transaction on SQLite. A follower sees them only once
that write committed."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.events import Event
from engine_service.core.models import Message, Role, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import RunBegun, RunHold
from engine_service.llm.offline import OfflineChatModel
from engine_service.stores import SqliteSessionStore

WAIT = 10.0

Write = tuple[str, list[str], list[str]]
"""What a write held: its operation, its events' kinds and its messages' ids."""


class Recording(SqliteSessionStore):
    """Notes every write of events or messages, in order; declines the openings while
    ``openings`` is false."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[Write] = []
        self.openings = True

    async def begin_run(self, *args: Any, **kw: Any) -> RunBegun:
        if not self.openings:
            kw["opening"] = None
        begun = await super().begin_run(*args, **kw)
        ids = [e.body.message.id for e in begun.opened if isinstance(e.body, ev.MessageStored)]
        self.writes.append(("begin", _kinds(begun.opened), ids))
        return begun

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        self.writes.append(("events", _kinds(events), []))
        await super().append_events(session_id, events, reserve_through=reserve_through)

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        self.writes.append(("messages", [], [m.id for m in messages]))
        await super().append_messages(session_id, messages, title=title, now=now, hold=hold)

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
        self.writes.append(("both", _kinds(events), [m.id for m in messages]))
        await super().append_messages_and_events(
            session_id,
            messages,
            events,
            reserve_through=reserve_through,
            title=title,
            now=now,
            hold=hold,
        )


def _kinds(events: Sequence[Event]) -> list[str]:
    return [type(e.body).__name__ for e in events]


async def _run(store: Recording, session_id: str, text: str, *, follow: bool) -> list[Event]:
    engine = Engine(store, OfflineChatModel(), ToolRegistry(), EngineLimits())
    await engine.start()
    message = Message(id=f"{session_id}-{text}", role=Role.USER, content=[TextPart(text)])
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id=session_id, create_session=True, messages=[message])
    )
    seen: list[Event] = []
    if follow:  # the caller waits for the run's events, as every transport does
        async with asyncio.timeout(WAIT):
            seen = [event async for event in engine.run_events(handle)]
    await engine.shutdown(WAIT)  # lets the run finish
    return seen or await store.read_events(session_id, 0, 0)


async def test_run_started_and_the_input_are_stored_in_one_write(tmp_path: Path) -> None:
    store = Recording(tmp_path / "runs.db")
    try:
        for follow, session_id in ((True, "followed"), (False, "alone")):
            store.writes.clear()
            seen = await _run(store, session_id, "first", follow=follow)
            # The first run's begin holds both; nothing else holds either.
            first = f"{session_id}-first"
            assert store.writes[0] == ("begin", ["RunStarted", "MessageStored"], [first])
            assert len([w for w in store.writes if first in w[2]]) == 1, store.writes
            # A later run: its begin holds both too.
            store.writes.clear()
            seen += await _run(store, session_id, "second", follow=follow)
            second = f"{session_id}-second"
            assert store.writes[0] == ("begin", ["RunStarted", "MessageStored"], [second])
            assert len([w for w in store.writes if second in w[2]]) == 1, store.writes
            # Declined by the store: the run's first write of its own holds both.
            store.writes.clear()
            store.openings = False
            seen += await _run(store, session_id, "third", follow=follow)
            store.openings = True
            third = f"{session_id}-third"
            assert store.writes[0] == ("begin", [], []), store.writes
            assert store.writes[1] == ("both", ["RunStarted"], [third]), store.writes
            assert len([w for w in store.writes if third in w[2]]) == 1, store.writes

            stored = await store.read_events(session_id, 0, 0)
            if follow:
                assert [e.seq for e in seen] == [e.seq for e in stored]
            starts = [i for i, e in enumerate(stored) if isinstance(e.body, ev.RunStarted)]
            assert len(starts) == 3
            for start in starts:
                assert _kinds(stored[start : start + 2]) == ["RunStarted", "MessageStored"]
            assert isinstance(stored[-1].body, ev.RunFinished)
            assert [m.role for m in await store.all_messages(session_id)] == [
                Role.USER,
                Role.ASSISTANT,
            ] * 3
    finally:
        await store.close()
