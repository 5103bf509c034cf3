"""``core.unsettled``: a run whose end waited for the store, settled once it writes again.

Two engines on one PostgreSQL database, each with its own pool. A's writes fail while its
run answers: the run ends there unstored, and its lease lapses. B takes the run over
(``resume_runs``) and answers it again; A's store writes again while B still answers. A's
late settle then finds the run B's: the followers on A must follow it there to B's end,
every seq once, as they do when a run is lost while it runs (``Engine._run_done``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import StorageUnavailable
from engine_service.core.events import Event
from engine_service.core.models import Message, Role, RunInput, RunStatus, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.stores.postgres import PostgresSessionStore

WAIT = 10.0
LEASE = 0.6


class SteadyModel(ChatModel):
    """Text deltas, ``gap`` seconds apart; with ``gate``, ``before`` of them, then the rest
    once the gate opens (``answering`` is set as it starts waiting)."""

    name = "steady"

    def __init__(
        self, count: int, gap: float = 0.005, *, before: int = 0, gate: asyncio.Event | None = None
    ) -> None:
        self.count, self.gap, self.before, self.gate = count, gap, before, gate
        self.answering = asyncio.Event()

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for index in range(self.count):
            if self.gate is not None and index == self.before:
                self.answering.set()
                await self.gate.wait()
            await asyncio.sleep(self.gap)
            yield TextDelta(f"w{index} ")


class FailingWrites(PostgresSessionStore):
    """One replica's pool on the shared database, whose writes fail while ``failing``: its
    events, its run's end, its lease renewals and the health probe."""

    failing = False

    def _check(self) -> None:
        if self.failing:
            raise StorageUnavailable("storage unavailable: the database is unreachable")

    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        self._check()
        await super().append_events(session_id, events, reserve_through=reserve_through)

    async def append_messages_and_events(self, *args: object, **kwargs: object) -> None:
        self._check()
        await super().append_messages_and_events(*args, **kwargs)  # type: ignore[arg-type]

    async def finish_run(self, *args: object, **kwargs: object) -> None:
        self._check()
        await super().finish_run(*args, **kwargs)  # type: ignore[arg-type]

    async def renew_leases(self, *args: object, **kwargs: object) -> int:
        self._check()
        return await super().renew_leases(*args, **kwargs)  # type: ignore[arg-type]

    async def note_alive(self, *args: object, **kwargs: object) -> None:
        self._check()
        await super().note_alive(*args, **kwargs)  # type: ignore[arg-type]

    async def check_writable(self) -> None:
        self._check()
        await super().check_writable()


def _engine(store: PostgresSessionStore, model: ChatModel) -> Engine:
    limits = EngineLimits(lease_seconds=LEASE, event_retention=0, resume_runs=True)
    return Engine(store, model, ToolRegistry(), limits)


async def _until(check: Callable[[], Awaitable[bool] | bool]) -> None:
    """Wait (bounded) until ``check()`` holds."""
    async with asyncio.timeout(WAIT):
        while True:
            held = check()
            if held if isinstance(held, bool) else await held:
                return
            await asyncio.sleep(0.005)


def _lost_and_repeated(seen: list[Event], stored: list[Event]) -> tuple[list[int], list[int]]:
    counts = Counter(event.seq for event in seen)
    lost = sorted({event.seq for event in stored} - set(counts))
    return lost, sorted(seq for seq, count in counts.items() if count > 1)


async def test_followers_of_a_run_settled_late_follow_it_to_its_end_on_the_replica_that_took_it(
    pg_url: str,
) -> None:
    a_store, b_store = FailingWrites(pg_url), PostgresSessionStore(pg_url)
    gate = asyncio.Event()
    b_model = SteadyModel(60, before=10, gate=gate)
    a, b = _engine(a_store, SteadyModel(2000)), _engine(b_store, b_model)
    await a.start()
    await b.start()
    try:
        said = Message(id="u", role=Role.USER, content=[TextPart("go")])
        handle = await a.start_run(
            ANONYMOUS, RunInput(session_id="s", create_session=True, messages=[said])
        )

        async def own_stream() -> list[Event]:
            return [event async for event in a.run_events(handle)]

        async def until_idle() -> list[Event]:
            return [event async for event in a.subscribe(ANONYMOUS, "s", 0, until_idle=True)]

        streams = [asyncio.create_task(own_stream())]
        streams += [asyncio.create_task(until_idle()) for _ in range(2)]
        await _until(lambda: _stored_past(b_store, 20))  # A answers
        a_store.failing = True  # A's run ends unstored; its lease lapses
        await _until(lambda: a.runs_in_flight == 0)
        assert "s" in a._unsettled
        async with asyncio.timeout(WAIT):
            await b_model.answering.wait()  # B took the run over and answers it
        a_store.failing = False  # A's probe writes: the late settle finds the run B's
        await _until(lambda: "s" not in a._unsettled)
        gate.set()  # B answers to the end
        async with asyncio.timeout(WAIT):
            followed = await asyncio.gather(*streams)
        await _until(lambda: b.runs_in_flight == 0)

        stored = await b_store.read_events("s", 0, 100_000)
        end = stored[-1]
        assert isinstance(end.body, ev.RunFinished) and end.body.outcome is ev.Outcome.SUCCESS
        assert (await b_store.get_run("s", handle.run_id)).status is RunStatus.SUCCEEDED
        assert {event.run_id for event in stored} == {handle.run_id}
        for seen in followed:
            assert _lost_and_repeated(seen, stored) == ([], [])
            assert seen == stored, "a stream on A did not follow the run to B's end"
        assert "s" not in a._hubs._hubs  # the hub went with its followers
    finally:
        gate.set()
        await a.shutdown(0)
        await b.shutdown(0)
        await a_store.close()
        await b_store.close()


async def _stored_past(store: PostgresSessionStore, seq: int) -> bool:
    return (await store.get_session("s")).last_seq > seq
