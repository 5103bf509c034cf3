"""A run's stream out of a session's follow: its events only, as they came together, up to
its terminal event; flattened back to single events for callers that take them one by one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from engine_service.core import events as ev
from engine_service.core import follow
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.follow import Hubs, flat, of_run
from engine_service.core.models import Message, Role, RunInput, RunStatus, Session, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import Signal, SignalKind
from engine_service.stores import MemorySessionStore

WAIT = 10.0


def _event(seq: int, run_id: str, body: ev.EventBody) -> ev.Event:
    return ev.Event(seq=seq, time=0.0, session_id="s", run_id=run_id, body=body)


def _text(seq: int, run_id: str) -> ev.Event:
    return _event(seq, run_id, ev.TextMessageContent(message_id="m", delta=str(seq)))


async def _lists(*lists: list[ev.Event]) -> AsyncIterator[list[ev.Event]]:
    for events in lists:
        yield events


async def _all(lists: AsyncIterator[list[ev.Event]]) -> list[list[int]]:
    return [[event.seq for event in events] async for events in lists]


def test_a_runs_stream_keeps_its_events_as_they_came_and_ends_at_its_terminal_event() -> None:
    session = _lists(
        [_text(1, "other"), _event(2, "r", ev.RunStarted()), _text(3, "r")],
        [_text(4, "other")],  # nothing of the run: no empty list
        [_text(5, "r"), _event(6, "r", ev.RunFinished()), _text(7, "r")],
        [_text(8, "r")],  # after its end: never read
    )
    assert asyncio.run(_all(of_run(session, "r"))) == [[2, 3], [5, 6]]


def test_flat_gives_the_events_of_the_lists_one_by_one_in_order() -> None:
    async def seqs() -> list[int]:
        return [e.seq async for e in flat(_lists([_text(1, "r"), _text(2, "r")], [_text(3, "r")]))]

    assert asyncio.run(seqs()) == [1, 2, 3]


class _CountedReads(MemorySessionStore):
    """A memory store that counts the reads of a session."""

    def __init__(self) -> None:
        super().__init__()
        self.session_reads = 0

    async def get_session(self, session_id: str) -> Session:
        self.session_reads += 1
        return await super().get_session(session_id)


class _Words(ChatModel):
    name = "words"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for word in ("one ", "two ", "three"):
            yield TextDelta(word)


def _input(session_id: str) -> RunInput:
    message = Message(id=f"u-{session_id}", role=Role.USER, content=[TextPart("go")])
    return RunInput(session_id=session_id, create_session=True, messages=[message])


async def test_a_run_s_own_stream_starts_from_its_hub_without_reading_the_store() -> None:
    store = _CountedReads()
    engine = Engine(store, _Words(), ToolRegistry(), EngineLimits(resume_runs=False))
    handle = await engine.start_run(ANONYMOUS, _input("s1"))
    reads = store.session_reads

    events = [event async for event in engine.run_events(handle)]

    assert store.session_reads == reads  # followed from the hub: no read of the session
    names = [type(event.body).__name__ for event in events]
    assert names[0] == "RunStarted" and names[-1] == "RunFinished"
    text = "".join(e.body.delta for e in events if isinstance(e.body, ev.TextMessageContent))
    assert text == "one two three"


async def test_a_run_followed_after_it_ended_still_gives_all_its_events() -> None:
    # The handle's session is from the run's start; once the run has let go of its hub
    # the stream reads the session again, and the stored events are all there.
    store = _CountedReads()
    engine = Engine(store, _Words(), ToolRegistry(), EngineLimits(resume_runs=False))
    handle = await engine.start_run(ANONYMOUS, _input("s2"))
    for _ in range(500):  # until the run has ended and let go of its hub (5 s at most)
        if not (await store.get_session("s2")).active_run_id and not engine._hubs.running(
            "s2", handle.run_id
        ):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the run did not end")

    events = [event async for event in engine.run_events(handle)]

    names = [type(event.body).__name__ for event in events]
    assert names[0] == "RunStarted" and names[-1] == "RunFinished"
    text = "".join(e.body.delta for e in events if isinstance(e.body, ev.TextMessageContent))
    assert text == "one two three"


class _Steady(ChatModel):
    name = "steady"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(60):
            await asyncio.sleep(0.002)
            yield TextDelta(f"w{index} ")


async def test_followers_cancelled_mid_run_leave_the_others_every_event_once() -> None:
    # Thirty followers of one session; every other one is cancelled while the run streams
    # (each waits on a future of its own). The rest see every stored event once, in order:
    # 0 lost, 0 duplicated, the same as a replay of the store.
    store = MemorySessionStore()
    engine = Engine(store, _Steady(), ToolRegistry(), EngineLimits(resume_runs=False))
    handle = await engine.start_run(ANONYMOUS, _input("s3"))

    async def follow() -> list[int]:
        return [e.seq async for e in engine.subscribe(ANONYMOUS, "s3", 0, until_idle=True)]

    async def own_stream() -> list[int]:
        return [e.seq async for e in engine.run_events(handle)]

    own_task = asyncio.ensure_future(own_stream())
    followers = [asyncio.ensure_future(follow()) for _ in range(30)]
    for follower in followers[1::2]:
        await asyncio.sleep(0.004)  # while the run streams (60 tokens 2 ms apart)
        follower.cancel()
    done = await asyncio.gather(*followers[::2])
    own = await own_task

    stored = [e.seq for e in await store.read_events("s3", 0, 10_000)]
    assert stored == list(range(1, len(stored) + 1))
    for seqs in done:
        assert seqs == stored  # none lost, none twice
    assert own == [seq for seq in stored if seq >= own[0]]
    assert all(follower.cancelled() for follower in followers[1::2])


class _HeldReads(MemorySessionStore):
    """A shared memory store whose event reads, while ``held``, answer with what the store
    held when they began once ``release`` is set: a read in flight while another replica
    stores its next events (a database read's snapshot predates their commit)."""

    def __init__(self) -> None:
        super().__init__(shared=True)
        self.held = False
        self.reading = asyncio.Event()
        self.release = asyncio.Event()

    async def read_events(self, session_id: str, after_seq: int, limit: int) -> list[ev.Event]:
        events = await super().read_events(session_id, after_seq, limit)
        if self.held:
            self.reading.set()
            await self.release.wait()
        return events


async def test_a_read_in_flight_while_another_replica_stores_loses_none_of_its_events() -> None:
    """A follower of another replica's session reads stored events the hub no longer holds,
    and finds none (retention removed them); while it reads, the other replica stores the
    next events and says so. The empty read is not taken for those events removed: the
    follower reads them next, 0 lost."""
    store = _HeldReads()
    await store.create_session("s", "", datetime.now(UTC))
    await store.append_events("s", [_text(seq, "r1") for seq in (1, 2, 3)])  # time 0: old
    await store.prune_events(datetime.now(UTC))
    hubs = Hubs(
        store,
        max_event_bytes=1_000_000,
        is_local=lambda session_id: False,
        is_unsettled=lambda session_id: False,
        accepting=lambda: True,
    )
    seen: list[int] = []

    async def follow() -> None:
        async for event in hubs.follow("s", 0, until_idle=False):
            seen.append(event.seq)
            if event.seq == 6:
                return

    store.held = True
    follower = asyncio.ensure_future(follow())
    async with asyncio.timeout(WAIT):
        await store.reading.wait()  # its read (after seq 0) began: it finds nothing
        store.held = False
        fresh = [ev.Event(seq, time.time(), "s", "r2", ev.RunStarted()) for seq in (4, 5, 6)]
        await store.append_events("s", fresh)  # another replica stores its run's events
        hubs.on_signal(Signal(SignalKind.EVENTS, "s", "r2", last_seq=6))  # and says so
        store.release.set()
        await follower
    assert seen == [4, 5, 6]


class _HeldPoll(MemorySessionStore):
    """A shared memory store whose session reads after the first ``free`` ones, while
    ``held``, answer with what the store held when they began once ``release`` is set: a
    follower's poll whose snapshot predates a run that takes the session meanwhile."""

    def __init__(self, free: int) -> None:
        super().__init__(shared=True)
        self.free = free
        self.held = True
        self.reading = asyncio.Event()
        self.release = asyncio.Event()
        self.answered = asyncio.Event()

    async def get_session(self, session_id: str) -> Session:
        session = await super().get_session(session_id)
        if self.free:
            self.free -= 1
        elif self.held:
            self.held = False
            self.reading.set()
            await self.release.wait()
            self.answered.set()  # the caller goes on at once, before anyone else runs
        return session


@pytest.mark.parametrize("until_idle", [True, False])
async def test_a_poll_that_read_before_a_run_here_began_leaves_the_run_its_hub(
    monkeypatch: pytest.MonkeyPatch, until_idle: bool
) -> None:
    """A follower of a session no run of this engine holds polls the store; while the
    read is in flight, a run here takes the session. The poll's answer (no active run)
    does not overwrite the run's place in the hub, and the hub stays once that follower
    leaves: the run's own stream, made next, follows the run to its end."""
    monkeypatch.setattr(follow, "REMOTE_POLL_INTERVAL", 0.01)
    store = _HeldPoll(free=1)  # the follower's first read is not held; its poll is
    now = datetime.now(UTC)
    await store.create_session("s", "", now)
    local: set[str] = set()
    hubs = Hubs(
        store,
        max_event_bytes=1_000_000,
        is_local=lambda session_id: session_id in local,
        is_unsettled=lambda session_id: False,
        accepting=lambda: True,
    )

    async def watch() -> None:
        async for _ in hubs.follow_lists("s", 0, until_idle=False):
            pass

    watcher = asyncio.ensure_future(watch())
    async with asyncio.timeout(WAIT):
        await store.reading.wait()  # its poll read the store: no run
        begun = await store.begin_run("s", "r1", now, create=False)  # a run here, as _launch
        hub = hubs.hub(begun.session)
        hub.begin("r1", begun.session.last_seq, begun.session.reserved_seq)
        local.add("s")
        store.release.set()
        await store.answered.wait()
    watcher.cancel()  # that client leaves
    await asyncio.gather(watcher, return_exceptions=True)
    assert hub.active_run_id == "r1"
    assert hubs._hubs.get("s") is hub

    first = hub.publish("r1", ev.RunStarted())
    await store.append_events("s", [first])
    hub.stored(first.seq)
    seen: list[int] = []
    shown = asyncio.Event()

    async def run_stream() -> None:
        async for events in hubs.follow_lists("s", 0, until_idle=until_idle):
            seen.extend(event.seq for event in events)
            shown.set()
            if 2 in seen:
                return

    stream = asyncio.ensure_future(run_stream())
    async with asyncio.timeout(WAIT):
        await shown.wait()
    last = hub.publish("r1", ev.RunFinished())
    await store.finish_run("s", "r1", RunStatus.SUCCEEDED, datetime.now(UTC), events=[last])
    hub.stored(last.seq)
    hub.end("r1")
    local.discard("s")
    hubs.drop_if_unused(hub)
    async with asyncio.timeout(WAIT):
        await stream
    assert seen == [1, 2]


def test_a_hub_stays_while_a_run_here_holds_its_session_whatever_it_was_told() -> None:
    """``drop_if_unused`` keeps the hub of a session a run of this engine holds, even one
    pointed at no active run: that run publishes to this hub, not to a new one."""
    local = {"s"}
    hubs = Hubs(
        MemorySessionStore(shared=True),
        max_event_bytes=1_000_000,
        is_local=lambda session_id: session_id in local,
        is_unsettled=lambda session_id: False,
        accepting=lambda: True,
    )
    now = datetime.now(UTC)
    hub = hubs.hub(Session(id="s", title="", created_at=now, updated_at=now))
    hub.begin("r1", 0, 8)
    hub.catch_up(0, "")  # a stale answer of the store
    hubs.drop_if_unused(hub)
    assert hubs._hubs.get("s") is hub
    local.clear()  # the run ended here
    hubs.drop_if_unused(hub)
    assert "s" not in hubs._hubs
