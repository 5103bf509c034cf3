"""The first LLM request goes while the run's input is being stored; its answer is read,
and published, only once the input is stored. (A conversation's first run on a store that
takes openings stores its input as it begins: ``test_opening``. The store here declines
them, as every store does for a conversation with messages.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any

import pytest

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.context import RunContext
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import LLMError, StorageUnavailable
from engine_service.core.flush import Outbox
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import RunBegun, RunHold
from engine_service.stores import MemorySessionStore

WAIT = 10.0


class Answering(ChatModel):
    """Notes when each request is sent and whether its stream was closed."""

    name = "answering"

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.asked = asyncio.Event()
        self.answered = asyncio.Event()
        """Set as the first delta is handed over."""
        self.closed = 0

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        self.sent.append(time.monotonic())
        self.asked.set()
        try:
            self.answered.set()
            yield TextDelta("hello")
            yield TextDelta(" there")
        finally:
            self.closed += 1


class DeclinesOpenings(MemorySessionStore):
    """A store that takes no opening (``begin_run``): each run stores its input itself."""

    async def begin_run(self, *args: Any, **kw: Any) -> RunBegun:
        kw["opening"] = None
        return await super().begin_run(*args, **kw)


class SlowInput(DeclinesOpenings):
    """Stores a run's messages only once ``release`` is set (or fails, with ``failing``);
    notes when the first of them was stored."""

    def __init__(self, *, failing: bool = False) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.writing = asyncio.Event()
        """Set as a write of messages starts (and waits for ``release``)."""
        self.failing = failing
        self.stored_at: list[float] = []

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        self.writing.set()
        await self.release.wait()
        if self.failing:
            raise StorageUnavailable("storage unavailable: the disk is full")
        await super().append_messages(session_id, messages, title=title, now=now, hold=hold)
        self.stored_at.append(time.monotonic())


async def _start(engine: Engine) -> tuple[str, asyncio.Task[list[ev.Event]]]:
    """The run's id, and a follower of it to its end."""
    message = Message(id="u1", role=Role.USER, content=[TextPart("hi")])
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[message])
    )

    async def follow() -> list[ev.Event]:
        async with asyncio.timeout(WAIT):
            return [event async for event in engine.run_events(handle)]

    return handle.run_id, asyncio.ensure_future(follow())


async def _asked(model: Answering) -> None:
    async with asyncio.timeout(WAIT):
        await model.asked.wait()


def _kinds(events: list[ev.Event]) -> list[str]:
    """The events' kinds, a run of deltas as one."""
    kinds = [type(e.body).__name__ for e in events]
    return [k for i, k in enumerate(kinds) if not i or k != kinds[i - 1]]


async def test_the_first_request_is_sent_before_the_input_is_stored_and_read_after() -> None:
    store, model = SlowInput(), Answering()
    engine = Engine(store, model, ToolRegistry(), EngineLimits())
    await engine.start()
    _, followed = await _start(engine)
    await _asked(model)
    async with asyncio.timeout(WAIT):
        await model.answered.wait()  # the answer is in before the input is stored
    store.release.set()
    seen = await followed
    await engine.shutdown(0)
    events = await store.read_events("s", 0, 0)
    assert [e.seq for e in seen] == [e.seq for e in events]

    assert model.sent[0] < store.stored_at[0]  # sent while the input was being stored
    # Every event the flusher stored (it is not slowed) comes after the input's.
    assert _kinds(events) == [
        "RunStarted",
        "MessageStored",
        "TextMessageStart",
        "TextMessageContent",
        "TextMessageEnd",
        "MessageStored",
        "RunFinished",
    ]
    assert [m.role for m in await store.all_messages("s")] == [Role.USER, Role.ASSISTANT]
    assert model.closed == 1


async def test_an_input_that_cannot_be_stored_fails_the_run_and_its_answer_is_never_shown() -> None:
    store, model = SlowInput(failing=True), Answering()
    engine = Engine(store, model, ToolRegistry(), EngineLimits())
    await engine.start()
    run_id, followed = await _start(engine)
    await _asked(model)
    store.release.set()
    seen = await followed
    await engine.shutdown(0)

    assert isinstance(seen[-1].body, ev.RunError), seen[-1].body
    bodies = [e.body for e in await store.read_events("s", 0, 0)]
    assert not [b for b in bodies if isinstance(b, ev.TextMessageStart | ev.TextMessageContent)]
    assert (await store.get_run("s", run_id)).status is RunStatus.FAILED
    assert model.closed == 1  # the early request's stream was closed


async def test_a_run_stopped_while_its_input_is_stored_keeps_the_input_and_drops_the_answer() -> (
    None
):
    store, model = SlowInput(), Answering()
    engine = Engine(store, model, ToolRegistry(), EngineLimits())
    await engine.start()
    run_id, followed = await _start(engine)
    await _asked(model)
    assert await engine.stop_run(ANONYMOUS, "s", run_id) == (True, run_id)
    store.release.set()
    await followed
    await engine.shutdown(0)
    events = await store.read_events("s", 0, 0)

    assert (await store.get_run("s", run_id)).status is RunStatus.INTERRUPTED
    assert [m.id for m in await store.all_messages("s")] == ["u1"]
    assert "TextMessageStart" not in _kinds(events)
    assert model.closed == 1


async def test_with_a_token_budget_the_request_waits_for_the_input() -> None:
    store, model = SlowInput(), Answering()
    engine = Engine(store, model, ToolRegistry(), EngineLimits(tokens_per_day=10_000))
    await engine.start()
    _, followed = await _start(engine)
    async with asyncio.timeout(WAIT):
        await store.writing.wait()  # an early request would have gone before this write
    assert model.sent == []  # the budget is checked before the LLM is asked
    store.release.set()
    await followed
    await engine.shutdown(0)
    assert store.stored_at[0] <= model.sent[0]


class Down(ChatModel):
    """An LLM that cannot be reached."""

    name = "down"

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        self.asked.set()
        raise LLMError("llm_unavailable", "cannot reach the LLM endpoint")
        yield TextDelta("never")  # an async generator, as the real one


async def test_an_early_request_that_fails_fails_the_run_after_its_input_is_stored() -> None:
    store, model = SlowInput(), Down()
    engine = Engine(store, model, ToolRegistry(), EngineLimits())
    await engine.start()
    _, followed = await _start(engine)
    async with asyncio.timeout(WAIT):
        await model.asked.wait()
    store.release.set()
    seen = await followed
    await engine.shutdown(0)

    assert isinstance(seen[-1].body, ev.RunError) and seen[-1].body.code == "llm_unavailable"
    assert _kinds(seen) == ["RunStarted", "MessageStored", "RunError"]
    assert [m.id for m in await store.all_messages("s")] == ["u1"]


class Ordered(Answering):
    """Notes, in ``order``, when it is asked, next to the events the run publishes."""

    def __init__(self, order: list[str]) -> None:
        super().__init__()
        self.order = order

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        self.order.append("LLM asked")
        async for delta in super().stream(request):
            yield delta


async def test_the_first_request_is_sent_before_run_started_is_published(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    order: list[str] = []
    emit = Outbox.emit

    def noted(self: Outbox, body: ev.EventBody) -> ev.Event:
        order.append(type(body).__name__)
        return emit(self, body)

    monkeypatch.setattr(Outbox, "emit", noted)
    store, model = DeclinesOpenings(), Ordered(order)
    engine = Engine(store, model, ToolRegistry(), EngineLimits())
    await engine.start()
    _, followed = await _start(engine)
    seen = await followed
    await engine.shutdown(0)

    # The LLM answers while RUN_STARTED and the input are written; the answer is still
    # published after them.
    assert order[:2] == ["LLM asked", "RunStarted"], order
    assert _kinds(seen)[:3] == ["RunStarted", "MessageStored", "TextMessageStart"]


async def test_a_first_request_that_cannot_be_built_fails_the_run_after_run_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cannot build the messages")

    monkeypatch.setattr(RunContext, "_build", broken)
    store, model = MemorySessionStore(), Answering()
    engine = Engine(store, model, ToolRegistry(), EngineLimits())
    await engine.start()
    _, followed = await _start(engine)
    seen = await followed
    await engine.shutdown(0)

    assert model.sent == []
    assert _kinds(seen)[0] == "RunStarted"
    assert isinstance(seen[-1].body, ev.RunError) and seen[-1].body.code == "internal"
