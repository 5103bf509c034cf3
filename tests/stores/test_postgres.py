"""What only the PostgreSQL store does: several stores (several engines) on one database,
signals by NOTIFY, migrations, and failures that never show the URL."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.errors
import pytest
from psycopg.pq import TransactionStatus

from engine_service.core import events as ev
from engine_service.core.errors import InvalidInput, SessionBusy
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.core.store import Opening, RunBegun, Signal, SignalKind
from engine_service.stores import open_store
from engine_service.stores.postgres import (
    OPENING_BYTES,
    PostgresSessionStore,
    storage_error,
)
from engine_service.stores.sqlite import SCHEMA_VERSION as SQLITE_SCHEMA_VERSION
from tests.stores.heard import Heard
from tests.stores.migrate_cli import migrate_cli

INTRANS = TransactionStatus.INTRANS
T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(seq: int, session_id: str = "s1", run_id: str = "r1") -> ev.Event:
    return ev.Event(seq, 1_700_000_000.5 + seq, session_id, run_id, ev.StepStarted(str(seq)))


# Several engines on one database


async def test_open_store_makes_a_postgres_store_for_both_schemes(pg_url: str) -> None:
    for url in (pg_url, "postgres" + pg_url.removeprefix("postgresql")):
        store = open_store(url)
        try:
            assert isinstance(store, PostgresSessionStore)
            assert store.shared
            await store.create_session("s1", "", at(0))
            assert (await store.get_session("s1")).id == "s1"
            await store.delete_session("s1")
        finally:
            await store.close()


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


def test_migrate_applies_the_sqlite_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db' / 'agentik.db'}"
    first = migrate_cli(url)
    out, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    assert out.endswith(f"schema version 0 -> {SQLITE_SCHEMA_VERSION}\n")
    second = migrate_cli(url)
    out, _ = second.communicate(timeout=30)
    assert out.endswith(f"schema version {SQLITE_SCHEMA_VERSION}, up to date\n")


# Failures


async def test_a_value_the_database_refuses_is_invalid_input_and_the_store_goes_on(
    pg_url: str,
) -> None:
    store = PostgresSessionStore(pg_url)
    try:
        with pytest.raises(InvalidInput, match="NUL"):
            await store.create_session("s1", "a\x00b", at(0))
        await store.create_session("s1", "ok", at(0))
        with pytest.raises(InvalidInput, match="NUL"):
            await store.rename_session("s1", "\x00", at(1))
        assert (await store.get_session("s1")).title == "ok"
        await store.begin_run("s1", "r1", at(2), create=False)
        await store.finish_run("s1", "r1", RunStatus.FAILED, at(3), "llm_error", "said \x00")
        assert (await store.get_run("s1", "r1")).error_message == "said \ufffd"
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (psycopg.errors.DiskFull("could not extend file"), "the disk is full"),
        (
            psycopg.errors.AdminShutdown("terminating"),
            "the database server ended the connection (an administrator, or a shutdown)",
        ),
        (psycopg.errors.TooManyConnections("sorry"), "the database server has too many"),
        (psycopg.errors.ReadOnlySqlTransaction("no"), "the database is read-only"),
        (psycopg.errors.InvalidPassword("for user x"), "the database refused the login"),
        (
            psycopg.OperationalError('connection to server at "db.internal" failed'),
            "the database is unreachable",
        ),
    ],
)
def test_server_failures_are_named_in_plain_words(error: psycopg.Error, cause: str) -> None:
    message = storage_error(error).message
    assert message.startswith(f"storage unavailable: {cause}")
    assert "db.internal" not in message


def test_a_connection_dropped_mid_call_is_named_lost_and_one_never_made_unreachable() -> None:
    dropped = psycopg.OperationalError("consuming input failed: server closed the connection")
    assert storage_error(dropped, connected=True).message == (
        "storage unavailable: the connection to the database was lost"
    )
    assert storage_error(dropped).message == "storage unavailable: the database is unreachable"
