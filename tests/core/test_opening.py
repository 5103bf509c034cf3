"""A conversation's first run stores its RUN_STARTED and the client's messages as it begins
(``SessionStore.begin_run``'s opening): under load, where every write waits for the
store's next group commit, its first token waits for two writes (the run's begin, the
answer's start) instead of three. What the caller sees is what the store holds; a run
refused after its begin still ends with RUN_ERROR after its RUN_STARTED."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from engine_service.core import events as ev
from engine_service.core.agents import Agents
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import Overloaded
from engine_service.core.events import Event
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import RunBegun
from tests.core.test_message_stored_writes import SlowWrites, Words, _kinds
from tests.polling import until

WAIT = 10.0


class SlowBegins(SlowWrites):
    """``SlowWrites`` whose ``begin_run`` is a slow write too, noted with its opening's
    events; ``openings=False`` declines every opening (as a store may)."""

    def __init__(self, *, openings: bool = True) -> None:
        super().__init__(openings=openings)

    async def begin_run(self, *args: Any, **kw: Any) -> RunBegun:
        begun = await super().begin_run(*args, **kw)
        await self._slow("begin", begun.opened, len(begun.opened) - 1 if begun.opened else 0)
        return begun


async def _run(
    engine: Engine, store: SlowBegins, session_id: str, *texts: str
) -> tuple[list[Event], list[tuple[str, list[str], int]]]:
    """The run's events as its caller saw them, and the writes noted from its start until
    it saw the first token. ``texts``: the client's messages (a history sent again, then
    the new one, as an AG-UI client does)."""
    messages = [
        Message(id=f"{session_id}-{text}", role=Role.USER, content=[TextPart(text)])
        for text in texts
    ]
    start = len(store.writes)
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id=session_id, create_session=True, messages=messages)
    )
    seen: list[Event] = []
    writes: list[tuple[str, list[str], int]] = []
    async with asyncio.timeout(WAIT):
        async for event in engine.run_events(handle):
            if isinstance(event.body, ev.TextMessageContent) and not writes:
                writes = store.writes[start:]
            seen.append(event)
    return seen, writes


class NotedWords(Words):
    """``Words`` that notes the messages of every request it is sent."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.sent: list[list[Message]] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        self.sent.append(list(request.messages))
        async for delta in super().stream(request):
            yield delta


def _engine(store: SlowBegins, model: ChatModel) -> Engine:
    return Engine(store, model, ToolRegistry(), EngineLimits(resume_runs=False))


@pytest.mark.parametrize("openings", [True, False])
async def test_a_run_waits_for_two_writes_before_its_first_token(openings: bool) -> None:
    store = SlowBegins(openings=openings)
    model = NotedWords(3)
    engine = _engine(store, model)
    await engine.start()
    seen, writes = await _run(engine, store, "s", "first")
    # A later run: the client sends the history again, with its new message.
    second, later = await _run(engine, store, "s", "first", "second")
    await engine.shutdown(WAIT)
    if openings:
        # The begin holds RUN_STARTED and the input's MESSAGE_STORED; the next write is
        # the answer's start. (On the code before: begin, input, answer: three.)
        assert writes[0] == ("begin", ["RunStarted", "MessageStored"], 1), writes
        assert len(writes) == 2 and "TextMessageStart" in writes[1][1], writes
        # The later run too, with only its new message (on the code before: begin, a
        # read of what it starts from, input, answer).
        assert later[0] == ("begin", ["RunStarted", "MessageStored"], 1), later
        assert len(later) == 2 and "TextMessageStart" in later[1][1], later
    else:  # declined: the run stores its input itself, one write more
        assert writes[0] == ("begin", [], 0), writes
        assert writes[1] == ("both", ["RunStarted"], 1), writes
        assert len(writes) == 3 and "TextMessageStart" in writes[2][1], writes
        assert later[0] == ("begin", [], 0) and later[1] == ("both", ["RunStarted"], 1), later
    # Either way the caller saw what the store holds, in order, nothing twice.
    stored = await store.read_events("s", 0, 0)
    assert [e.seq for e in seen + second] == [e.seq for e in stored]
    assert _kinds([*seen[:2], *second[:2]]) == ["RunStarted", "MessageStored"] * 2
    assert _kinds(second).count("MessageStored") == 2  # the new message, the answer
    assert [m.id for m in await store.all_messages("s")][::2] == ["s-first", "s-second"]
    session = await store.get_session("s")
    assert session.title == "first" and session.message_count == 4
    # The LLM was sent the whole conversation, each message once.
    assert [m.id for m in model.sent[-1] if m.role is Role.USER] == [
        "s-first",
        "s-second",
    ]


class Silent(ChatModel):
    """Never answers (the run waits until stopped)."""

    name = "silent"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        await asyncio.Event().wait()
        yield TextDelta("never")


async def test_a_run_refused_after_its_opening_ends_with_run_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SlowBegins()
    engine = _engine(store, Silent())
    await engine.start()

    def full(self: Agents, *args: object) -> None:
        raise Overloaded("agent 'default' is running its maximum of 1 runs")

    with monkeypatch.context() as patched:
        patched.setattr(Agents, "for_run", full)
        message = Message(id="u", role=Role.USER, content=[TextPart("hi")])
        with pytest.raises(Overloaded):
            await engine.start_run(
                ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[message])
            )
    stored = await store.read_events("s", 0, 0)
    assert _kinds(stored) == ["RunStarted", "MessageStored", "RunError"]
    assert [e.seq for e in stored] == [1, 2, 3]
    assert isinstance(stored[-1].body, ev.RunError) and stored[-1].body.code == "overloaded"
    (run,) = await store.list_runs("s")
    assert run.status is RunStatus.FAILED
    # The conversation is free: the next run takes it (and stores its own input).
    handle = await engine.start_run(
        ANONYMOUS,
        RunInput(
            session_id="s",
            messages=[Message(id="u2", role=Role.USER, content=[TextPart("again")])],
        ),
    )
    engine.stop_all()
    async with asyncio.timeout(WAIT):
        rest: Sequence[Event] = [e async for e in engine.run_events(handle)]
    await engine.shutdown(WAIT)
    assert rest[0].seq == 4 and isinstance(rest[-1].body, ev.RunFinished)


async def test_a_second_client_watching_a_new_conversation_sees_the_opening_at_once() -> None:
    """Subscribed before the first run: RUN_STARTED and the input's MESSAGE_STORED reach
    it while the LLM has not answered (here, never does until the run is stopped)."""
    store = SlowBegins()
    engine = _engine(store, Silent())
    await engine.start()
    session = await engine.create_session(ANONYMOUS, session_id="watched")
    watched: list[Event] = []
    two = asyncio.Event()

    async def watch() -> None:
        async for event in engine.subscribe(ANONYMOUS, session.id, 0):
            watched.append(event)
            if len(watched) == 2:
                two.set()

    watcher = asyncio.ensure_future(watch())
    hub = engine._hubs.hub(session)  # the conversation's hub, which the watcher joins
    await until(lambda: hub.waiting, WAIT)  # it waits there for the next stored write
    message = Message(id="u", role=Role.USER, content=[TextPart("hi")])
    handle = await engine.start_run(ANONYMOUS, RunInput(session_id=session.id, messages=[message]))
    assert store.writes[0][0] == "begin" and store.writes[0][1], store.writes  # opened
    async with asyncio.timeout(WAIT):
        await two.wait()
    assert _kinds(watched) == ["RunStarted", "MessageStored"]
    engine.stop_all()
    async with asyncio.timeout(WAIT):
        caller = [e async for e in engine.run_events(handle)]
    await engine.shutdown(WAIT)
    watcher.cancel()
    assert [e.seq for e in caller[:2]] == [e.seq for e in watched[:2]]
