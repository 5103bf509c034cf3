"""Followers see an event only once the store holds it, whatever the engine's fate.

Issue 27, item 10: a replica stalled past its lease showed its clients events that were
never stored, because they were shown once their seq was reserved rather than stored.
Here two engines share one store (``MemorySessionStore(shared=True)``); A's run outlives
its lease, and B closes it. Every event A's clients get must be in the store when they
get it, and what they got must be exactly what a replay shows.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    ReasoningDelta,
    TextDelta,
)
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import StorageUnavailable
from engine_service.core.events import Event
from engine_service.core.flush import JOIN_CHARS
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.rounds import DELTAS_PER_TURN
from engine_service.core.store import SessionStore, SignalKind
from engine_service.stores import MemorySessionStore, SqliteSessionStore

WAIT = 10.0
LEASE = 0.3


class SteadyModel(ChatModel):
    """``count`` text deltas, ``gap`` seconds apart."""

    name = "steady"

    def __init__(self, count: int, gap: float = 0.005) -> None:
        self.count = count
        self.gap = gap

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(self.count):
            await asyncio.sleep(self.gap)
            yield TextDelta(f"w{index} ")


class FailingWrites(MemorySessionStore):
    """A shared memory store whose event writes fail while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__(shared=True)
        self.failing = False

    def _check(self) -> None:
        if self.failing:
            raise StorageUnavailable("storage unavailable: the disk is full")

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        self._check()
        await super().append_events(session_id, events, reserve_through=reserve_through)

    async def finish_run(self, *args: object, **kwargs: object) -> None:
        self._check()
        await super().finish_run(*args, **kwargs)  # type: ignore[arg-type]

    async def check_writable(self) -> None:
        self._check()


def _engine(store: SessionStore, model: ChatModel) -> Engine:
    limits = EngineLimits(lease_seconds=LEASE, event_retention=0, resume_runs=False)
    return Engine(store, model, ToolRegistry(), limits)


async def _start(engine: Engine, text: str = "go") -> RunInput:
    message = Message(id="u", role=Role.USER, content=[TextPart(text)])
    run_input = RunInput(session_id="s", create_session=True, messages=[message])
    await engine.start_run(ANONYMOUS, run_input)
    return run_input


async def _follow_checking(engine: Engine, store: SessionStore) -> list[ev.Event]:
    """Follow session ``s`` until it is idle; each event must be stored when it arrives."""
    seen: list[ev.Event] = []
    async for event in engine.subscribe(ANONYMOUS, "s", 0, until_idle=True):
        last_stored = (await store.get_session("s")).last_seq
        assert event.seq <= last_stored, f"seq {event.seq} seen, the store holds {last_stored}"
        seen.append(event)
    return seen


async def _until(check: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (bounded) until ``check()`` holds."""
    async with asyncio.timeout(WAIT):
        while True:
            held = check()
            if held if isinstance(held, bool) else await held:
                return
            await asyncio.sleep(0.005)


async def _stored(store: SessionStore, seq: int) -> bool:
    return (await store.get_session("s")).last_seq >= seq


async def test_a_zombie_whose_writes_the_store_refuses_shows_its_followers_none_of_them() -> None:
    """A's lease lapses while its run streams, and its listener is down as well: it learns
    of the takeover only when the store refuses its next write."""
    store = MemorySessionStore(shared=True)
    a = _engine(store, SteadyModel(400))
    b = _engine(store, SteadyModel(1))
    await a.start()
    await b.start()
    store._watchers.remove(a._on_signal)  # A's listener is down: no ENDED signal for it
    run_input = await _start(a)
    followers = [asyncio.create_task(_follow_checking(a, store)) for _ in range(3)]
    assert a._leases is not None
    await _until(lambda: _stored(store, 20))  # the run streams
    await a._leases.stop()  # A stalls as far as its leases go; its run streams on

    async with asyncio.timeout(WAIT):
        followed = await asyncio.gather(*followers)
    stored = await store.read_events("s", 0, 0)
    end = stored[-1]
    assert isinstance(end.body, ev.RunFinished) and end.body.outcome is ev.Outcome.CANCELLED
    run = await store.get_run("s", run_input.run_id)
    assert (run.status, run.error_code) == (RunStatus.INTERRUPTED, "abandoned")
    for seen in followed:
        assert seen == stored  # exactly the replay: nothing unstored, nothing lost or repeated
    await a.shutdown(0)
    await b.shutdown(0)


async def test_with_a_shared_store_the_end_of_a_run_that_could_not_be_stored_waits_unseen() -> None:
    """With several engines the run's end is shown only once stored: another replica may
    close the run first, and its end would then differ from the one shown."""
    store = FailingWrites()
    engine = _engine(store, SteadyModel(400))
    await engine.start()
    await _start(engine)
    follower = asyncio.create_task(_follow_checking(engine, store))
    await _until(lambda: _stored(store, 20))  # the run streams
    store.failing = True  # the run fails, and its end cannot be stored
    await _until(lambda: engine.runs_in_flight == 0)  # ended unstored
    assert not engine.storage_ok
    assert not follower.done()
    store.failing = False  # the probe stores the end: now the follower gets it

    async with asyncio.timeout(WAIT):
        seen = await follower
    stored = await store.read_events("s", 0, 0)
    assert seen == stored
    assert isinstance(seen[-1].body, ev.RunError) and seen[-1].body.code == "storage_unavailable"
    await engine.shutdown(0)


async def test_a_replica_whose_leases_lapsed_stops_a_run_closed_elsewhere_unseen() -> None:
    """A's renewals failed for a lease time (it stops its runs, and closes what was open)
    while B had already closed the run and kept its partial answer: A's closing writes are
    refused, and its followers end on B's stored end."""
    store = MemorySessionStore(shared=True)
    a = _engine(store, SteadyModel(400))
    b = _engine(store, SteadyModel(1))
    await a.start()
    await b.start()
    store._watchers.remove(a._on_signal)  # A hears nothing of B's close
    ended = asyncio.Event()
    await store.watch(lambda s: ended.set() if s.kind is SignalKind.ENDED else None)
    await _start(a)
    followers = [asyncio.create_task(_follow_checking(a, store)) for _ in range(2)]
    assert a._leases is not None
    await _until(lambda: _stored(store, 20))  # the answer is open
    await a._leases.stop()
    async with asyncio.timeout(WAIT):
        await ended.wait()  # B closed the run
    a._leases_lost()  # what A does once its renewals failed for a lease time

    async with asyncio.timeout(WAIT):
        followed = await asyncio.gather(*followers)
    # The run ended cleanly (a run whose task raised would hold its session forever).
    await _until(lambda: a.runs_in_flight == 0)
    stored = await store.read_events("s", 0, 0)
    for seen in followed:
        assert seen == stored
    assert [m.role for m in await store.all_messages("s")] == [Role.USER, Role.ASSISTANT]
    await a.shutdown(0)
    await b.shutdown(0)


class CountingWrites(MemorySessionStore):
    """A memory store that notes when each write of events starts, and what it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[tuple[float, list[type]]] = []

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        self.writes.append((time.monotonic(), [type(e.body) for e in events]))
        await super().append_events(session_id, events, reserve_through=reserve_through)


class BurstThenPause(ChatModel):
    """After ``think`` seconds, ``count`` deltas as fast as they come (one per loop turn),
    then, with ``pause``, one more after it."""

    name = "burst"

    def __init__(self, count: int, pause: float = 0.0, think: float = 0.0) -> None:
        self.count = count
        self.pause = pause
        self.think = think

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        await asyncio.sleep(self.think)
        for index in range(self.count):
            yield TextDelta(f"w{index} ")
        if self.pause:
            await asyncio.sleep(self.pause)
            yield TextDelta("late")


def _paced_engine(store: SessionStore, model: ChatModel, gap: float) -> Engine:
    limits = EngineLimits(run=RunLimits(flush_gap=gap), event_retention=0, resume_runs=False)
    return Engine(store, model, ToolRegistry(), limits)


async def _run_to_end(engine: Engine, store: SessionStore) -> list[ev.Event]:
    run_input = await _start(engine)
    async with asyncio.timeout(WAIT):
        while True:
            if (await store.get_run("s", run_input.run_id)).status is not RunStatus.RUNNING:
                return await store.read_events("s", 0, 0)
            await asyncio.sleep(0.01)


async def test_a_fast_burst_is_stored_in_few_writes_paced_by_the_flush_gap() -> None:
    """An LLM faster than the store: the deltas go a gap's worth per write, not a write
    (and a message to every follower) for every few of them."""
    store = CountingWrites()
    engine = _paced_engine(store, SteadyModel(200, gap=0.0005), gap=0.02)
    await engine.start()
    stored = await _run_to_end(engine, store)
    await engine.shutdown(0)
    contents = [e.body.delta for e in stored if isinstance(e.body, ev.TextMessageContent)]
    assert "".join(contents) == "".join(f"w{index} " for index in range(200))
    # The deltas published while a write waited are joined: no more than a few per write.
    assert len(contents) <= len(store.writes) + 1, (len(contents), len(store.writes))
    # 200 deltas over 0.1 s or more, at one write per 20 ms at most: not one per delta.
    starts = [at for at, _ in store.writes]
    assert len(starts) <= (starts[-1] - starts[0]) / 0.02 + 4, len(starts)
    # The starts are stamped inside the store, a turn of the loop after the gap began: a
    # descheduled process shortens one gap, never most of them (unpaced: ~1 ms each). The
    # answer's end goes with its message, once the answer is whole: that write is not paced.
    assert ev.TextMessageEnd in store.writes[-1][1]
    gaps = [b - a for a, b in itertools.pairwise(starts[2:-1])]
    assert min(gaps) >= 0.01 and statistics.median(gaps) >= 0.018, gaps


class TextThenReasoning(ChatModel):
    """A token, another 50 ms later, and 50 ms after that the start of reasoning."""

    name = "text-then-reasoning"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        yield TextDelta("a")
        await asyncio.sleep(0.05)
        yield TextDelta("b")
        await asyncio.sleep(0.05)
        yield ReasoningDelta("hm")


async def test_the_start_of_an_answer_is_stored_at_once_with_what_waited_for_the_gap() -> None:
    """Within the gap a token waits for the next write; the start of an answer (here
    reasoning after text) is stored at once, with what waited."""
    store = CountingWrites()
    engine = _paced_engine(store, TextThenReasoning(), gap=0.3)
    await engine.start()
    await _run_to_end(engine, store)
    await engine.shutdown(0)
    writes = store.writes
    first = next(i for i, (_, kinds) in enumerate(writes) if ev.TextMessageStart in kinds)
    started = next(i for i, (_, kinds) in enumerate(writes) if ev.ReasoningStart in kinds)
    assert started == first + 1  # "b" waited for it: no write of its own
    assert ev.TextMessageContent in writes[started][1]
    assert writes[started][0] - writes[first][0] < 0.2  # not the 0.3 s gap


async def test_a_token_after_a_pause_longer_than_the_gap_is_stored_at_once() -> None:
    store = CountingWrites()
    engine = _paced_engine(store, BurstThenPause(1, pause=0.4, think=0.05), gap=0.3)
    await engine.start()
    await _run_to_end(engine, store)
    await engine.shutdown(0)
    first = next(i for i, (_, kinds) in enumerate(store.writes) if ev.TextMessageStart in kinds)
    first_token = store.writes[first][0]
    late = next(at for at, kinds in store.writes[first + 1 :] if ev.TextMessageContent in kinds)
    assert 0.35 < late - first_token < 0.55  # as it came, 0.4 s on: no gap to wait out


class Ticker:
    """Counts the turns of the loop it runs on."""

    def __init__(self) -> None:
        self.turns = 0

    async def run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)


class NeverAwaits(ChatModel):
    """``count`` deltas without ever awaiting; notes the ticker's turns at the first and
    the last."""

    name = "never-awaits"

    def __init__(self, count: int, ticker: Ticker) -> None:
        self.count = count
        self.ticker = ticker
        self.turns: list[int] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(self.count):
            if index in (1, self.count - 1):
                self.turns.append(self.ticker.turns)
            yield TextDelta(f"w{index} ")


async def test_a_model_that_never_awaits_still_lets_the_loop_run_every_few_deltas() -> None:
    ticker = Ticker()
    model = NeverAwaits(400, ticker)
    store = CountingWrites()
    engine = _paced_engine(store, model, gap=0.005)
    ticking = asyncio.create_task(ticker.run())
    try:
        await engine.start()
        stored = await _run_to_end(engine, store)
        await engine.shutdown(0)
    finally:
        ticking.cancel()
    contents = [e.body.delta for e in stored if isinstance(e.body, ev.TextMessageContent)]
    assert "".join(contents) == "".join(f"w{index} " for index in range(400))
    first, last = model.turns
    # The reader lets the loop run after DELTAS_PER_TURN deltas at most (398 read between).
    assert last - first >= 398 // DELTAS_PER_TURN - 2, (first, last)


class SlowToReturn(SqliteSessionStore):
    """SQLite whose writes of events return 3 ms after they committed: deltas published
    meanwhile meet an event that is stored but not yet shown."""

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        await super().append_events(session_id, events, reserve_through=reserve_through)
        await asyncio.sleep(0.003)


class TextReasoningText(ChatModel):
    """Bursts of ``count`` deltas: text, reasoning, text again (one per loop turn)."""

    name = "bursts"

    def __init__(self, count: int) -> None:
        self.count = count

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for part, kind in (("a", TextDelta), ("r", ReasoningDelta), ("b", TextDelta)):
            for index in range(self.count):
                yield kind(f"{part}{index} ")
                await asyncio.sleep(0)


async def test_deltas_that_come_faster_than_writes_are_joined_and_what_followers_get_is_stored(
    tmp_path: Path,
) -> None:
    """Deltas published while a write is under way are joined into one event, never into
    an event a write already took: each of three followers gets exactly the events the
    store holds (seq and body), and the text is whole, in fewer events than deltas."""
    store = SlowToReturn(tmp_path / "s.db")
    engine = _paced_engine(store, TextReasoningText(400), gap=0.0)
    await engine.start()
    message = Message(id="u", role=Role.USER, content=[TextPart("go")])
    handle = await engine.start_run(
        ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[message])
    )

    async def follow() -> list[tuple[int, object]]:
        return [(e.seq, e.body) async for e in engine.run_events(handle)]

    async with asyncio.timeout(WAIT):
        seen = await asyncio.gather(follow(), follow(), follow())
    await engine.shutdown(0)
    stored = [(e.seq, e.body) for e in await store.read_events("s", 0, 0)]
    await store.close()

    assert seen[0] == seen[1] == seen[2] == stored  # 0 lost, 0 duplicated, 0 changed
    texts = [b.delta for _, b in stored if isinstance(b, ev.TextMessageContent)]
    thoughts = [b.delta for _, b in stored if isinstance(b, ev.ReasoningMessageContent)]
    expected = "".join(f"a{index} " for index in range(400))
    assert "".join(texts) == expected + "".join(f"b{index} " for index in range(400))
    assert "".join(thoughts) == "".join(f"r{index} " for index in range(400))
    assert len(texts) < 400 and len(thoughts) < 200, (len(texts), len(thoughts))
    assert all(len(delta) <= JOIN_CHARS for delta in texts + thoughts)
