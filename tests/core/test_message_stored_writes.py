"""MESSAGE_STORED costs no write of its own when the run's next event follows soon: it
waits up to ``RunLimits.confirm_gap`` for it (``core.flush``), so under load, where every
write is slower than the flush gap, the input's goes with the answer's start and the
answer's with the run's end. The answer's message is stored with the events published
before it, in one write. Nothing waits longer than the gap: a MESSAGE_STORED the run's next
event is far behind is stored, and seen, on its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import StorageUnavailable
from engine_service.core.events import Event
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import RunBegun
from engine_service.stores import MemorySessionStore

WAIT = 10.0
SLOW = 0.015
"""Each write takes this long: more than the flush gap (5 ms), as under load."""

Write = tuple[str, list[str], int]
"""A write: its operation, its events' kinds, how many messages it held."""


class SlowWrites(MemorySessionStore):
    """A store whose every write takes ``SLOW`` seconds and is noted, in order. It takes
    no opening unless told (``begin_run``): the run stores its input, and publishes its
    MESSAGE_STORED, itself, as on a conversation with messages."""

    def __init__(self, *, openings: bool = False) -> None:
        super().__init__()
        self.writes: list[Write] = []
        self.openings = openings

    async def begin_run(self, *args: Any, **kw: Any) -> RunBegun:
        if not self.openings:
            kw["opening"] = None
        return await super().begin_run(*args, **kw)

    async def _slow(self, kind: str, events: Sequence[Event], messages: int) -> None:
        self.writes.append((kind, _kinds(events), messages))
        await asyncio.sleep(SLOW)

    async def append_events(self, session_id: str, events: Sequence[Event], **kw: Any) -> None:
        await self._slow("events", events, 0)
        await super().append_events(session_id, events, **kw)

    async def append_messages(
        self, session_id: str, messages: Sequence[Message], **kw: Any
    ) -> None:
        await self._slow("messages", [], len(messages))
        await super().append_messages(session_id, messages, **kw)

    async def append_messages_and_events(
        self, session_id: str, messages: Sequence[Message], events: Sequence[Event], **kw: Any
    ) -> None:
        await self._slow("both", events, len(messages))
        # One write: not the default's two (each of which would be noted and slow).
        await MemorySessionStore.append_messages(
            self, session_id, messages, title=kw.get("title", ""), now=kw.get("now")
        )
        await MemorySessionStore.append_events(
            self, session_id, events, reserve_through=kw.get("reserve_through", 0)
        )

    async def finish_run(self, *args: Any, **kw: Any) -> None:
        await self._slow("finish", kw.get("events", ()), 0)
        await super().finish_run(*args, **kw)


def _kinds(events: Sequence[Event]) -> list[str]:
    return [type(e.body).__name__ for e in events]


class Words(ChatModel):
    """``think`` seconds, then ``count`` words, one per turn of the loop."""

    name = "words"

    def __init__(self, count: int, think: float = 0.0) -> None:
        self.count = count
        self.think = think

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        await asyncio.sleep(self.think)
        for index in range(self.count):
            await asyncio.sleep(0)
            yield TextDelta(f"w{index} ")


def _engine(store: MemorySessionStore, model: ChatModel, confirm_gap: float = 0.05) -> Engine:
    limits = EngineLimits(run=RunLimits(confirm_gap=confirm_gap), resume_runs=False)
    return Engine(store, model, ToolRegistry(), limits)


async def _followed_run(engine: Engine) -> list[tuple[float, Event]]:
    """Start a run in session ``s`` and follow it to its end: each event with when it came
    (seconds after the start)."""
    message = Message(id="u", role=Role.USER, content=[TextPart("go")])
    started = time.monotonic()
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[message])
    )
    seen: list[tuple[float, Event]] = []
    async with asyncio.timeout(WAIT):
        async for event in engine.run_events(handle):
            seen.append((time.monotonic() - started, event))
    return seen


async def test_under_slow_writes_message_stored_shares_the_next_events_write() -> None:
    store = SlowWrites()
    engine = _engine(store, Words(3))
    await engine.start()
    seen = await _followed_run(engine)
    await engine.shutdown(WAIT)
    writes = store.writes
    # No write holds MESSAGE_STORED alone: the input's goes with the answer's start, the
    # answer's with the run's end (on the code before, each was a write of its own).
    assert ("events", ["MessageStored"], 0) not in writes, writes
    with_start = [w for w in writes if "TextMessageStart" in w[1]]
    assert with_start and with_start[0][1][0] == "MessageStored", writes
    assert writes[-1] == ("finish", ["MessageStored", "RunFinished"], 0), writes
    # The answer is stored with its end, in one write.
    assert [w for w in writes if w[2] and "TextMessageEnd" in w[1]], writes
    # Followers saw exactly what the store holds, in order, the answer whole.
    stored = await store.read_events("s", 0, 0)
    assert [e.seq for _, e in seen] == [e.seq for e in stored]
    assert [type(e.body) for e in stored].count(ev.MessageStored) == 2
    text = "".join(e.body.delta for e in stored if isinstance(e.body, ev.TextMessageContent))
    assert text == "w0 w1 w2 "
    assert [m.role for m in await store.all_messages("s")] == [Role.USER, Role.ASSISTANT]


async def test_a_message_stored_with_nothing_after_it_is_seen_within_the_confirm_gap() -> None:
    """The LLM takes 1 s to answer: the input's MESSAGE_STORED does not wait for it."""
    store = SlowWrites()
    engine = _engine(store, Words(2, think=1.0), confirm_gap=0.05)
    await engine.start()
    seen = await _followed_run(engine)
    await engine.shutdown(WAIT)
    confirmed = [at for at, e in seen if isinstance(e.body, ev.MessageStored)]
    first_token = next(at for at, e in seen if isinstance(e.body, ev.TextMessageContent))
    assert first_token >= 1.0
    # Its message's write (15 ms), then at most the gap and its own write: well before
    # the answer (a wait for the next event would have shown it at 1 s).
    assert confirmed[0] < 0.6, seen
    assert ("events", ["MessageStored"], 0) in store.writes, store.writes


async def test_with_no_confirm_gap_message_stored_is_stored_like_any_event() -> None:
    """``confirm_gap=0``: the flusher stores MESSAGE_STORED as soon as the gap allows."""
    store = SlowWrites()
    engine = _engine(store, Words(3, think=0.2), confirm_gap=0.0)
    await engine.start()
    await _followed_run(engine)
    await engine.shutdown(WAIT)
    assert ("events", ["MessageStored"], 0) in store.writes, store.writes


class AnswerWriteFails(SlowWrites):
    """The write holding the run's answer fails, as a transaction rolled back: nothing of
    it is stored."""

    async def append_messages_and_events(
        self, session_id: str, messages: Sequence[Message], events: Sequence[Event], **kw: Any
    ) -> None:
        if any(m.role is Role.ASSISTANT for m in messages):
            self.writes.append(("failed", _kinds(events), len(messages)))
            raise StorageUnavailable("storage unavailable: disk full")
        await super().append_messages_and_events(session_id, messages, events, **kw)


async def test_a_failed_answer_write_leaves_no_message_stored_and_loses_no_event() -> None:
    store = AnswerWriteFails()
    engine = _engine(store, Words(3))
    await engine.start()
    seen = await _followed_run(engine)
    await engine.shutdown(WAIT)
    assert any(w[0] == "failed" for w in store.writes), store.writes
    stored = await store.read_events("s", 0, 0)
    # What the follower saw is what the store holds: nothing lost, nothing twice.
    assert [e.seq for _, e in seen] == [e.seq for e in stored]
    assert len({e.seq for e in stored}) == len(stored)
    assert isinstance(stored[-1].body, ev.RunError)
    # Only the input is stored, and only the input is said to be.
    assert [m.role for m in await store.all_messages("s")] == [Role.USER]
    confirmed = [e.body.message.id for e in stored if isinstance(e.body, ev.MessageStored)]
    assert confirmed == ["u"]
    # The answer's events published before its write are kept, in order.
    text = "".join(e.body.delta for e in stored if isinstance(e.body, ev.TextMessageContent))
    assert text == "w0 w1 w2 "
