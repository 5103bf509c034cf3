"""How runs begin on a PostgreSQL store shared by several engines: of runs racing for one
session exactly one begins, and a run's opening is stored (in the writer's batch or the long
way) and told to the other replicas, or declined when its messages are too long."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import psycopg.errors
import pytest

from engine_service.core import events as ev
from engine_service.core.errors import SessionBusy
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.core.store import Opening, RunBegun, Signal, SignalKind
from engine_service.stores.postgres import PostgresSessionStore
from engine_service.stores.postgres.begin import OPENING_BYTES
from tests.stores.heard import Heard

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def test_two_stores_racing_begin_run_let_exactly_one_through(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two
    for round_ in range(10):
        session_id = f"s{round_}"
        outcomes = await asyncio.gather(
            *(
                store.begin_run(session_id, f"r{round_}-{i}", at(1), create=True)
                for i in range(6)
                for store in (a, b)
            ),
            return_exceptions=True,
        )
        won = [o for o in outcomes if not isinstance(o, BaseException)]
        assert len(won) == 1, outcomes
        assert all(isinstance(o, SessionBusy) for o in outcomes if isinstance(o, BaseException))
        assert sum(o.created for o in won) == 1
        running = [r for r in await a.list_runs(session_id) if r.status is RunStatus.RUNNING]
        assert [r.id for r in running] == [won[0].session.active_run_id]


async def _begin_opened(store: PostgresSessionStore) -> RunBegun:
    """Run ``r1`` begun in a new conversation ``s1`` with an opening of one message."""
    user = Message(id="u1", role=Role.USER, content=[TextPart("hi")], run_id="r1")
    opening = Opening([user], [ev.RunStarted(), ev.MessageStored(user)], "hi")
    return await store.begin_run("s1", "r1", at(0), create=True, agent="", opening=opening)


async def test_a_run_begun_with_its_opening_tells_the_other_replicas_of_its_events(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    a, b = two
    heard = Heard()
    await b.watch(heard)
    begun = await _begin_opened(a)
    assert [e.seq for e in begun.opened] == [1, 2]
    # Begun at seq 0, then its two events: a follower on b reads them from the store.
    assert (await heard.next(1.0))[1] == Signal(SignalKind.BEGUN, "s1", "r1", 0)
    assert (await heard.next(1.0))[1] == Signal(SignalKind.EVENTS, "s1", "r1", 2)
    stored = await b.read_events("s1", 0, 0)
    assert [(e.seq, type(e.body)) for e in stored] == [(1, ev.RunStarted), (2, ev.MessageStored)]
    assert (await b.get_session("s1")).title == "hi"


def _only_the_long_way(store: PostgresSessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every batched begin with an opening hits a race its checks missed (an integrity
    error), so ``begin_run`` takes the long way."""
    first = store._batch.first

    async def raced(statements: Any) -> Any:
        if any("agentik.begun" in sql for sql, _ in statements):
            raise psycopg.errors.UniqueViolation("a race")
        return await first(statements)

    monkeypatch.setattr(store._batch, "first", raced)


async def test_an_opening_is_stored_the_long_way_too(
    two: tuple[PostgresSessionStore, PostgresSessionStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batched begin hit a race its checks missed (an integrity error): the long way
    begins the run and stores its opening in its own transaction."""
    a, _ = two
    _only_the_long_way(a, monkeypatch)
    begun = await _begin_opened(a)
    assert [e.seq for e in begun.opened] == [1, 2]
    assert (begun.session.last_seq, begun.session.message_count) == (2, 1)
    assert [e.seq for e in await a.read_events("s1", 0, 0)] == [1, 2]
    assert [m.id for m in await a.all_messages("s1")] == ["u1"]


@pytest.mark.parametrize("way", ["batched", "long"])
async def test_a_later_runs_opening_is_stored_and_told_either_way(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
    monkeypatch: pytest.MonkeyPatch,
    way: str,
) -> None:
    """A later run whose client sent the history again with a new message: its begin reads
    what it starts from and stores only the new message, in the batch or the long way."""
    a, b = two
    await _begin_opened(a)
    await a.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1))
    if way == "long":
        _only_the_long_way(a, monkeypatch)
    heard = Heard()
    await b.watch(heard)
    old = Message(id="u1", role=Role.USER, content=[TextPart("hi")], run_id="r2")
    new = Message(id="u2", role=Role.USER, content=[TextPart("again")], run_id="r2")
    bodies: list[ev.EventBody] = [ev.RunStarted(), ev.MessageStored(old), ev.MessageStored(new)]
    begun = await a.begin_run(
        "s1", "r2", at(2), create=False, opening=Opening([old, new], bodies, "again")
    )
    assert begun.context is not None
    checkpoint, history, known = begun.context
    assert (checkpoint, [m.id for m in history], known) == (None, ["u1"], {"u1"})
    assert [(e.seq, type(e.body)) for e in begun.opened] == [
        (3, ev.RunStarted),
        (4, ev.MessageStored),
    ]
    session = begun.session
    assert (session.last_seq, session.message_count, session.title) == (4, 2, "hi")
    assert (await heard.next(1.0))[1] == Signal(SignalKind.BEGUN, "s1", "r2", 2)
    assert (await heard.next(1.0))[1] == Signal(SignalKind.EVENTS, "s1", "r2", 4)
    stored = await b.read_events("s1", 2, 0)
    assert [(e.seq, e.body) for e in stored] == [(e.seq, e.body) for e in begun.opened]
    assert [m.id for m in await b.all_messages("s1")] == ["u1", "u2"]
    assert (await b.get_session("s1")).title == "hi"


async def test_an_opening_with_more_than_opening_bytes_of_messages_is_declined(
    two: tuple[PostgresSessionStore, PostgresSessionStore],
) -> None:
    """A long history sent again by an AG-UI client is not sent to the database with every
    run: beyond ``OPENING_BYTES`` the store declines the opening, and stores nothing of it."""
    a, _ = two
    await _begin_opened(a)
    await a.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1))
    long = Message(
        id="u-long", role=Role.USER, content=[TextPart("x" * OPENING_BYTES)], run_id="r2"
    )
    new = Message(id="u2", role=Role.USER, content=[TextPart("again")], run_id="r2")
    bodies: list[ev.EventBody] = [ev.RunStarted(), ev.MessageStored(long), ev.MessageStored(new)]
    begun = await a.begin_run(
        "s1", "r2", at(2), create=False, opening=Opening([long, new], bodies, "")
    )
    assert (begun.opened, begun.context, begun.session.last_seq) == ([], None, 2)
    assert [m.id for m in await a.all_messages("s1")] == ["u1"]
    assert (await a.get_session("s1")).active_run_id == "r2"
