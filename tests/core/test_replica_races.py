"""Races across replicas: every follower gets every seq exactly once, and ends.

Engines here are driven in process through the ``Engine`` API (no gRPC): two engines,
each with its own store on the same database (PostgreSQL) or one shared memory store.
Every follower's seqs are counted: none lost, none repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from engine_service.build import build_model
from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import Signal, SignalKind
from engine_service.stores.postgres import PostgresSessionStore
from tests.engine.harness import StoreFor, engine_settings
from tests.fakes.fake_openai import FakeOpenAI

LEASE = 0.6
WAIT = 8.0


@pytest.fixture
def pg_store_for(pg_url: str) -> StoreFor:
    return lambda: PostgresSessionStore(pg_url)


@contextlib.asynccontextmanager
async def engines(
    llm: FakeOpenAI,
    store_for: StoreFor,
    count: int = 2,
    retention: float = 0,
    *,
    resume: bool = False,
) -> AsyncIterator[list[Engine]]:
    """``resume``: a run whose lease lapsed is resumed by the replica that claims it
    (``[engine] resume_runs``); off, it is closed as interrupted."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key", AGENTIK_LLM_MAX_RETRIES="0"
    )
    started: list[Engine] = []
    try:
        for _ in range(count):
            limits = EngineLimits(
                lease_seconds=LEASE, event_retention=retention, resume_runs=resume
            )
            engine = Engine(store_for(), build_model(settings), ToolRegistry(), limits)
            await engine.start()
            started.append(engine)
        yield started
    finally:
        stores = []
        for engine in started:
            await engine.shutdown(0)
            if engine.store not in stores:
                stores.append(engine.store)
        for store in stores:
            await store.close()


def said(text: str) -> Message:
    return Message(id="", role=Role.USER, content=[TextPart(text)])


async def start(engine: Engine, session_id: str, text: str, *, create: bool = False) -> str:
    handle = await engine.start_run(
        ANONYMOUS,
        RunInput(session_id=session_id, messages=[said(text)], create_session=create),
    )
    return handle.run_id


async def finish(engine: Engine, session_id: str, run_id: str) -> list[ev.Event]:
    """Follow ``session_id`` on ``engine`` until run ``run_id`` ends."""
    events: list[ev.Event] = []
    async with asyncio.timeout(WAIT):
        async for event in engine.subscribe(ANONYMOUS, session_id, 0):
            events.append(event)
            if event.run_id == run_id and isinstance(event.body, ev.TERMINAL):
                break
    return events


async def follow_until_runs_end(
    engine: Engine, session_id: str, after_seq: int, run_ids: set[str] | None, count: int = 1
) -> list[ev.Event]:
    """Follow until ``count`` terminal events (of ``run_ids`` when given) were seen."""
    events: list[ev.Event] = []
    ended = 0
    async with asyncio.timeout(WAIT):
        async for event in engine.subscribe(ANONYMOUS, session_id, after_seq):
            events.append(event)
            if isinstance(event.body, ev.TERMINAL) and (run_ids is None or event.run_id in run_ids):
                ended += 1
                if ended == count:
                    break
    return events


def check_seqs(events: list[ev.Event], first: int, last: int) -> None:
    seqs = Counter(e.seq for e in events)
    duplicated = sorted(s for s, n in seqs.items() if n > 1)
    lost = sorted(set(range(first, last + 1)) - set(seqs))
    assert (lost, duplicated) == ([], []), f"lost {lost[:20]}, duplicated {duplicated[:20]}"
    assert [e.seq for e in events] == sorted(seqs)


async def stored_seqs(engine: Engine, session_id: str) -> list[int]:
    return [e.seq for e in await engine.store.read_events(session_id, 0, 100_000)]


async def test_fifty_followers_on_b_get_every_seq_of_a_fast_run_once(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        run_id = await start(a, "s", "[[chunks:500]]")
        followers = [
            asyncio.create_task(follow_until_runs_end(b, "s", 0, {run_id})) for _ in range(50)
        ]
        on_a = await finish(a, "s", run_id)
        last = on_a[-1].seq
        for events in await asyncio.gather(*followers):
            check_seqs(events, 1, last)
            assert events[-1].seq == last
        assert await stored_seqs(a, "s") == list(range(1, last + 1))


async def test_followers_subscribing_on_b_as_a_run_begins_and_ends_miss_nothing(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        for round_ in range(6):
            # Followers join around the start: before, during and right after begin_run.
            early = [
                asyncio.create_task(follow_until_runs_end(b, "s", 0, None, count=round_ + 1))
                for _ in range(5)
            ]
            await asyncio.sleep(0)
            starting = asyncio.create_task(start(a, "s", "[[chunks:30]]"))
            during = [
                asyncio.create_task(follow_until_runs_end(b, "s", 0, None, count=round_ + 1))
                for _ in range(5)
            ]
            run_id = await starting
            on_a = await finish(a, "s", run_id)
            last = on_a[-1].seq
            for events in await asyncio.gather(*early, *during):
                check_seqs(events, 1, last)
            # Joining right as it ended: until_idle ends after everything, no repeat.
            async with asyncio.timeout(WAIT):
                idle = [e async for e in b.subscribe(ANONYMOUS, "s", 0, until_idle=True)]
            check_seqs(idle, 1, last)


async def test_back_to_back_runs_alternating_replicas_with_followers_on_both(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        runs = 8
        followers = [
            asyncio.create_task(follow_until_runs_end(engine, "s", 0, None, count=runs))
            for engine in (a, b)
            for _ in range(5)
        ]
        await asyncio.sleep(0.05)
        last = 0
        for index in range(runs):
            engine = (a, b)[index % 2]
            run_id = await start(engine, "s", "[[chunks:40]]")
            events = await follow_until_runs_end(engine, "s", last, {run_id})
            last = events[-1].seq
        for events in await asyncio.gather(*followers):
            check_seqs(events, 1, last)
        assert await stored_seqs(a, "s") == list(range(1, last + 1))


async def test_subscribe_after_seq_in_the_middle_of_a_live_run_elsewhere(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        run_id = await start(a, "s", "[[chunks:300]][[slow:0.003]]")
        joined: list[asyncio.Task[list[ev.Event]]] = []
        seen = 0
        async with asyncio.timeout(WAIT):
            async for event in a.subscribe(ANONYMOUS, "s", 0):
                seen = event.seq
                if seen % 20 == 0:
                    joined.append(
                        asyncio.create_task(follow_until_runs_end(b, "s", seen - 3, {run_id}))
                    )
                if isinstance(event.body, ev.TERMINAL):
                    break
        for index, events in enumerate(await asyncio.gather(*joined)):
            check_seqs(events, (index + 1) * 20 - 2, seen)


async def test_deleting_a_session_on_b_while_a_runs_it_is_busy(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    from engine_service.core.errors import SessionBusy

    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        run_id = await start(a, "s", "[[chunks:50]][[slow:0.01]]")
        with pytest.raises(SessionBusy):
            await b.delete_session(ANONYMOUS, "s")
        events = await finish(a, "s", run_id)
        check_seqs(events, 1, events[-1].seq)
        await b.delete_session(ANONYMOUS, "s")


async def test_interrupt_on_b_for_a_run_that_just_ended_on_a(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        first = await start(a, "s", "hello")
        await finish(a, "s", first)
        # A's follower may see the end before it is stored; wait until it is.
        async with asyncio.timeout(WAIT):
            while (await b.store.get_session("s")).active_run_id:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        assert await b.stop_run(ANONYMOUS, "s", first) == (False, "")
        assert await b.stop_run(ANONYMOUS, "s") == (False, "")
        # A stale stop signal (sent as the run ended) must not stop the next run.
        second = await start(a, "s", "[[chunks:40]][[slow:0.005]]")
        await b.store.signal(Signal(SignalKind.STOP, "s", first))
        events = await finish(a, "s", second)
        final = events[-1].body
        assert isinstance(final, ev.RunFinished) and final.outcome is not ev.Outcome.CANCELLED
        check_seqs(events, 1, events[-1].seq)


async def test_a_zombie_whose_run_was_closed_elsewhere_stops_and_writes_nothing_more(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    """A's lease keeper stops (a stalled replica) while its turn keeps streaming: B closes
    the run; A must stop it without writing, and every follower ends on B's closing end."""
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        # 3 s of answer: B takes the run over well before its end (lease 0.6 s), loaded box too.
        run_id = await start(a, "s", "[[chunks:300]][[slow:0.01]]")
        on_a = [asyncio.create_task(follow_until_runs_end(a, "s", 0, {run_id})) for _ in range(3)]
        on_b = [asyncio.create_task(follow_until_runs_end(b, "s", 0, {run_id})) for _ in range(3)]
        await asyncio.sleep(0.2)
        assert a.runs_in_flight == 1 and a._leases is not None
        await a._leases.stop()  # a zombie: its run goes on, its lease lapses
        followed = await asyncio.gather(*on_a, *on_b)
        # The run ends cleanly (a run whose task raised would hold its session forever).
        async with asyncio.timeout(WAIT):
            while a.runs_in_flight:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        await asyncio.sleep(3.0)  # the LLM stream would have ended by now: nothing more is written
        stored = await a.store.read_events("s", 0, 100_000)
        seqs = [e.seq for e in stored]
        assert seqs == sorted(set(seqs))
        end = stored[-1]
        assert isinstance(end.body, ev.RunFinished) and end.body.outcome is ev.Outcome.CANCELLED
        run = await b.store.get_run("s", run_id)
        assert (run.status.value, run.error_code) == ("interrupted", "abandoned")
        for events in followed:
            got = [e.seq for e in events]
            assert got == sorted(set(got)), "a follower saw a seq twice or out of order"
            assert events[-1] == end, "a follower did not end on the stored end"
        for events in followed[3:]:
            assert [e.seq for e in events] == seqs  # B reads the store: exactly its events
        messages = await b.store.all_messages("s")
        assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT]
        session = await b.store.get_session("s")
        assert not session.active_run_id and session.last_seq == end.seq
        # The session goes on: the next run (on A) numbers after the close.
        second = await start(a, "s", "hi")
        after = await finish(a, "s", second)
        tail = [e.seq for e in after if e.run_id == second]
        assert tail == list(range(end.seq + 1, end.seq + 1 + len(tail)))


async def test_a_zombie_whose_run_was_resumed_elsewhere_stops_and_the_run_ends_whole(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    """As above, with ``resume_runs``: B resumes the run (same id) and finishes it with
    the whole answer; A stops writing; followers on both replicas see one run whose cut
    answer is superseded, in order, ending on B's end."""
    async with engines(llm, store_for, resume=True) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        # 3 s of answer: B takes the run over well before its end (lease 0.6 s), loaded box too.
        run_id = await start(a, "s", "[[chunks:300]][[slow:0.01]]")
        on_a = [asyncio.create_task(follow_until_runs_end(a, "s", 0, {run_id})) for _ in range(3)]
        on_b = [asyncio.create_task(follow_until_runs_end(b, "s", 0, {run_id})) for _ in range(3)]
        await asyncio.sleep(0.2)
        assert a.runs_in_flight == 1 and a._leases is not None
        await a._leases.stop()  # a zombie: its run goes on, its lease lapses
        followed = await asyncio.gather(*on_a, *on_b)
        async with asyncio.timeout(WAIT):
            while a.runs_in_flight or b.runs_in_flight:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        stored = await a.store.read_events("s", 0, 100_000)
        seqs = [e.seq for e in stored]
        assert seqs == sorted(set(seqs))
        assert {e.run_id for e in stored} == {run_id}
        end = stored[-1]
        assert isinstance(end.body, ev.RunFinished) and end.body.outcome is ev.Outcome.SUCCESS
        customs = [e.body.name for e in stored if isinstance(e.body, ev.Custom)]
        assert customs == ["superseded", "resumed"]
        run = await b.store.get_run("s", run_id)
        assert run.status is RunStatus.SUCCEEDED
        for events in followed:
            got = [e.seq for e in events]
            assert got == sorted(set(got)), "a follower saw a seq twice or out of order"
            assert events[-1] == end, "a follower did not end on the stored end"
        for events in followed[3:]:
            assert [e.seq for e in events] == seqs  # B reads the store: exactly its events
        messages = await b.store.all_messages("s")
        assert [m.role for m in messages] == [Role.USER, Role.ASSISTANT]
        assert messages[-1].content == [TextPart("".join(f"w{i} " for i in range(300)))]


async def _b_answers_after_a_lets_go(a: Engine, b: Engine, session_id: str, run_id: str) -> bool:
    """Wait until A has let go of the run and B answers it; False if B ended it first. A
    lets go as B claims the run (the claim moves the session past A's seqs), a moment
    before B launches it."""
    while a.runs_in_flight:  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    while not b.runs_in_flight:
        if (await b.store.get_run(session_id, run_id)).status is not RunStatus.RUNNING:
            return False
        await asyncio.sleep(0.005)
    return True


def deaf_to_ends(engine: Engine) -> None:
    """``engine`` never hears that another replica's run ended (its ENDED signals are
    lost, as a notification is with its listener's connection)."""
    hear = engine._hubs.on_signal

    def on_signal(signal: Signal) -> None:
        if signal.kind is not SignalKind.ENDED:
            hear(signal)

    engine._hubs.on_signal = on_signal  # type: ignore[method-assign]


@pytest.mark.parametrize("hears_the_end", [True, False], ids=["end_signalled", "end_unheard"])
async def test_on_a_zombie_the_runs_stream_and_until_idle_followers_follow_the_resume_to_its_end(
    llm: FakeOpenAI, store_for: StoreFor, hears_the_end: bool
) -> None:
    """A's lease lapses mid-answer and B resumes the run; A notices while B still answers.
    On A, the run's own stream and ``until_idle`` followers do not end there: they follow
    the run on B from the store to B's end, every seq once, and A's hub goes with them.
    When B's end signal never reaches A, they find the end in the store (their poll)."""
    async with engines(llm, store_for, resume=True) as (a, b):
        if not hears_the_end:
            deaf_to_ends(a)
        await a.create_session(ANONYMOUS, session_id="s")
        # 3 s of answer, asked again on B from the start: B still answers when A notices.
        handle = await a.start_run(
            ANONYMOUS, RunInput(session_id="s", messages=[said("[[chunks:300]][[slow:0.01]]")])
        )

        async def until_idle() -> list[ev.Event]:
            return [e async for e in a.subscribe(ANONYMOUS, "s", 0, until_idle=True)]

        async def own_stream() -> list[ev.Event]:
            return [e async for e in a.run_events(handle)]

        async def b_answering_when_a_let_go() -> bool:
            return await _b_answers_after_a_lets_go(a, b, "s", handle.run_id)

        async with asyncio.timeout(3 * WAIT):
            streams = [asyncio.create_task(own_stream())]
            streams += [asyncio.create_task(until_idle()) for _ in range(3)]
            await asyncio.sleep(0.2)
            assert a.runs_in_flight == 1 and a._leases is not None
            await a._leases.stop()  # a zombie: its run goes on, its lease lapses
            assert await b_answering_when_a_let_go(), "B ended the run before A noticed"
            followed = await asyncio.gather(*streams)
            while b.runs_in_flight:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        stored = await a.store.read_events("s", 0, 100_000)
        end = stored[-1]
        assert isinstance(end.body, ev.RunFinished) and end.body.outcome is ev.Outcome.SUCCESS
        assert [e.body.name for e in stored if isinstance(e.body, ev.Custom)] == [
            "superseded",
            "resumed",
        ]
        seqs = [e.seq for e in stored]
        for events in followed:
            got = [e.seq for e in events]
            lost, repeated = sorted(set(seqs) - set(got)), len(got) - len(set(got))
            assert (lost[:20], repeated) == ([], 0), f"{len(lost)} lost, {repeated} repeated"
            assert events == stored, "a stream on A did not follow the run to B's end"
        assert "s" not in a._hubs._hubs, "A's hub for the lost run stayed"


async def test_a_zombies_hub_for_a_run_resumed_elsewhere_goes_with_its_last_follower(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    """A's follower leaves while B still answers the run A lost, and B's end signal never
    reaches A: A's hub, pointed at the run on B, goes with the follower, not with an end
    signal that may never come (no hub left behind per lost run)."""
    async with engines(llm, store_for, resume=True) as (a, b):
        deaf_to_ends(a)
        await a.create_session(ANONYMOUS, session_id="s")
        run_id = await start(a, "s", "[[chunks:300]][[slow:0.01]]")

        async def follow() -> None:
            async for _ in a.subscribe(ANONYMOUS, "s", 0, until_idle=True):
                pass

        async with asyncio.timeout(3 * WAIT):
            follower = asyncio.create_task(follow())
            await asyncio.sleep(0.2)
            assert a._leases is not None
            await a._leases.stop()  # a zombie: its run goes on, its lease lapses
            assert await _b_answers_after_a_lets_go(a, b, "s", run_id), "B ended the run first"
            assert "s" in a._hubs._hubs  # the follower follows the run on B
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
            assert b.runs_in_flight == 1, "B ended the run before the follower left"
            assert "s" not in a._hubs._hubs, "A's hub stayed after its last follower"


async def test_followers_on_b_finish_when_its_listener_connection_is_killed(
    llm: FakeOpenAI, pg_store_for: StoreFor
) -> None:
    import psycopg

    async with engines(llm, pg_store_for) as (a, b):
        assert isinstance(b.store, PostgresSessionStore)
        await a.create_session(ANONYMOUS, session_id="s")
        run_id = await start(a, "s", "[[chunks:200]][[slow:0.005]]")
        followers = [
            asyncio.create_task(follow_until_runs_end(b, "s", 0, {run_id})) for _ in range(5)
        ]
        await asyncio.sleep(0.1)
        async with await psycopg.AsyncConnection.connect(b.store._dsn, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
            )
            assert len(await cursor.fetchall()) >= 1
        on_a = await finish(a, "s", run_id)
        for events in await asyncio.gather(*followers):
            check_seqs(events, 1, on_a[-1].seq)


async def test_a_claim_racing_a_renewal_takes_the_run_or_leaves_it(
    store_for: StoreFor,
) -> None:
    from datetime import UTC, datetime, timedelta

    from engine_service.core.store import Lease

    store = store_for()
    other = store_for()
    try:
        for index in range(20):
            session_id = f"s{index}"
            now = datetime.now(UTC)
            expired = Lease("r", now - timedelta(seconds=1))
            run_id = f"run{index}"
            await store.begin_run(session_id, run_id, now, create=True, lease=expired)
            until = now + timedelta(seconds=30)
            renewed, claimed = await asyncio.gather(
                store.renew_leases("r", until),
                other.claim_expired_runs("s", datetime.now(UTC), until),
            )
            run = await store.get_run(session_id, run_id)
            mine = [c for c in claimed if c.session_id == session_id]
            if mine:
                assert run.replica == "s" and len(mine) == 1
            else:
                assert run.replica == "r" and renewed >= 1
            await store.finish_run(session_id, run_id, RunStatus.INTERRUPTED, now)
    finally:
        await store.close()
        if other is not store:
            await other.close()


async def test_retention_pruning_on_two_replicas_at_once(pg_store_for: StoreFor) -> None:
    from datetime import UTC, datetime, timedelta

    first, second = pg_store_for(), pg_store_for()
    try:
        await first.create_session("s", "", datetime.now(UTC))
        old = [ev.Event(seq, 1.0, "s", "run", ev.RunStarted()) for seq in range(1, 501)]
        await first.append_events("s", old)
        before = datetime.now(UTC) - timedelta(seconds=10)
        counts = await asyncio.gather(
            *(store.prune_events(before) for store in (first, second, first, second))
        )
        assert sum(counts) == 500
        assert await second.read_events("s", 0, 1000) == []
    finally:
        await first.close()
        await second.close()


async def test_a_run_whose_end_a_follower_saw_is_stored_as_ended(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    """The terminal event is stored before anyone sees it: a client that got RUN_FINISHED
    may start the next turn at once, on any replica, without being told the session is
    busy."""
    async with engines(llm, store_for) as (a, b):
        await a.create_session(ANONYMOUS, session_id="s")
        for index in range(15):
            run_id = await start(a, "s", f"[[chunks:{5 + index % 4}]]")
            events = await follow_until_runs_end(a, "s", 0, {run_id})
            assert isinstance(events[-1].body, ev.RunFinished)
            run = await b.store.get_run("s", run_id)
            assert run.status is RunStatus.SUCCEEDED, (index, run.status)
            next_id = await start(b, "s", "next")
            await follow_until_runs_end(b, "s", 0, {next_id})
