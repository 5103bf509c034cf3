"""Behaviour every ``SessionStore`` shares, run against the memory and SQLite stores."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from engine_service.core import events as ev
from engine_service.core.errors import (
    AlreadyExists,
    InvalidInput,
    RunNotFound,
    SessionBusy,
    SessionNotFound,
)
from engine_service.core.models import (
    JSON,
    DocumentPart,
    ImagePart,
    Interrupt,
    InterruptKind,
    Message,
    MessageStatus,
    Role,
    RunStatus,
    TextPart,
    ToolCall,
)
from engine_service.core.store import Checkpoint, Lease, RunHold
from engine_service.stores import (
    MemorySessionStore,
    SessionStore,
    SqliteSessionStore,
    open_store,
)
from engine_service.stores.sqlite import SCHEMA_VERSION

T0 = datetime(2025, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


def at(seconds: int) -> datetime:
    """A time ``seconds`` after T0 (keeping T0's microseconds)."""
    return T0 + timedelta(seconds=seconds)


def message(message_id: str, text: str = "hello") -> Message:
    return Message(id=message_id, role=Role.USER, content=[TextPart(text)], created_at=T0)


def rich_message(message_id: str) -> Message:
    """A message using every field, to check exact round trips."""
    return Message(
        id=message_id,
        role=Role.ASSISTANT,
        content=[
            TextPart("voilà ✓"),
            ImagePart(data=b"\x89PNG\x00\xff", mime_type="image/png"),
            ImagePart(url="https://example.test/cat.png", mime_type="image/png"),
            DocumentPart(data=b"%PDF-1.4\x00", mime_type="application/pdf", filename="a.pdf"),
            DocumentPart(file_id="file-abc123"),
        ],
        tool_calls=[ToolCall("call-1", "lookup", '{"q": "x"}')],
        tool_call_id="",
        status=MessageStatus.INTERRUPTED,
        created_at=datetime(2025, 1, 1, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=2))),
        run_id="r1",
        name="helper",
        metadata={"source": "voice", "n": [1, 2.5, None, True], "nested": {"k": "ü"}},
    )


def event(seq: int, body: ev.EventBody, session_id: str = "s1", run_id: str = "r1") -> ev.Event:
    return ev.Event(seq, 1_700_000_000.123456 + seq, session_id, run_id, body)


def assorted_bodies() -> list[ev.EventBody]:
    return [
        ev.RunStarted(parent_run_id="parent"),
        ev.TextMessageStart("m1"),
        ev.TextMessageContent("m1", 'héllo \n "quoted"'),
        ev.MessageStored(rich_message("m1")),
        ev.MessagesSnapshot([message("a"), rich_message("b")]),
        ev.ToolCallResult(
            message_id="t1",
            tool_call_id="call-1",
            content="done",
            is_error=True,
            parts=[TextPart("see"), ImagePart(data=b"\x00\x01\x02", mime_type="image/gif")],
        ),
        ev.StateDelta([{"op": "add", "path": "/a", "value": [1, 2.5, None, True]}]),
        ev.Custom("progress", {"pct": 50}),
        ev.RunFinished(
            outcome=ev.Outcome.INTERRUPT,
            pending_tool_call_ids=["call-2"],
            usage=ev.Usage(input_tokens=10, output_tokens=5, total_tokens=15),
            result={"answer": 42},
        ),
        ev.RunError("boom", "internal"),
    ]


# Sessions


async def test_a_created_session_reads_back_empty_and_idle(store: SessionStore) -> None:
    created = await store.create_session("s1", "First", at(0))
    fetched = await store.get_session("s1")
    assert created == fetched
    assert (fetched.id, fetched.title, fetched.created_at, fetched.updated_at) == (
        "s1",
        "First",
        at(0),
        at(0),
    )
    assert (fetched.message_count, fetched.state, fetched.last_seq, fetched.active_run_id) == (
        0,
        None,
        0,
        "",
    )


async def test_times_round_trip_to_the_microsecond_and_come_back_in_utc(
    store: SessionStore,
) -> None:
    local = datetime(2025, 6, 1, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-7)))
    await store.create_session("s1", "", local)
    fetched = await store.get_session("s1")
    assert fetched.created_at == local
    assert fetched.created_at.tzinfo == UTC
    assert fetched.created_at.microsecond == 999999


async def test_naive_times_are_refused(store: SessionStore) -> None:
    with pytest.raises(InvalidInput):
        await store.create_session("s1", "", datetime(2025, 1, 1))
    with pytest.raises(SessionNotFound):
        await store.get_session("s1")


async def test_creating_a_taken_session_id_raises_already_exists(store: SessionStore) -> None:
    await store.create_session("s1", "one", at(0))
    with pytest.raises(AlreadyExists):
        await store.create_session("s1", "two", at(1))
    assert (await store.get_session("s1")).title == "one"


async def test_sessions_list_most_recently_updated_first_with_paging_and_total(
    store: SessionStore,
) -> None:
    for i, session_id in enumerate(["a", "b", "c", "d"]):
        await store.create_session(session_id, session_id.upper(), at(i))
    await store.rename_session("b", "B2", at(10))

    everything, total = await store.list_sessions(0, 0)
    assert [s.id for s in everything] == ["b", "d", "c", "a"]
    assert total == 4
    page, total = await store.list_sessions(1, 2)
    assert [s.id for s in page] == ["d", "c"]
    assert total == 4
    beyond, total = await store.list_sessions(10, 2)
    assert (beyond, total) == ([], 4)


async def test_sessions_are_counted_per_owner_as_they_are_made_and_deleted(
    store: SessionStore,
) -> None:
    for i, owner in enumerate(["alice", "bob", "alice", "alice"]):
        await store.create_session(f"s{i}", "", at(i), owner=owner)
    await store.begin_run("made", "r1", at(5), create=True, owner="bob")
    await store.finish_run("made", "r1", RunStatus.SUCCEEDED, at(6))
    assert [await store.count_sessions(o) for o in ("alice", "bob", "carol")] == [3, 2, 0]
    await store.delete_session("s2")
    assert await store.count_sessions("alice") == 2


async def test_negative_offsets_and_limits_are_refused(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    with pytest.raises(InvalidInput):
        await store.list_sessions(-1, 10)
    with pytest.raises(InvalidInput):
        await store.list_messages("s1", "", -1)


async def test_renaming_sets_the_title_and_updated_at_only(store: SessionStore) -> None:
    await store.create_session("s1", "old", at(0))
    renamed = await store.rename_session("s1", "new", at(5))
    assert (renamed.title, renamed.created_at, renamed.updated_at) == ("new", at(0), at(5))
    assert await store.get_session("s1") == renamed


async def test_deleting_a_session_removes_everything_it_holds(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.append_messages("s1", [message("m1")])
    await store.append_events("s1", [event(1, ev.RunStarted())])
    await store.set_state("s1", {"k": 1})
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1))

    await store.delete_session("s1")

    with pytest.raises(SessionNotFound):
        await store.get_session("s1")
    assert await store.list_sessions(0, 0) == ([], 0)
    again = await store.create_session("s1", "", at(2))
    assert (again.message_count, again.state, again.last_seq) == (0, None, 0)
    assert await store.list_runs("s1") == []
    assert await store.read_events("s1", 0, 0) == []


async def test_deleting_a_session_drops_what_its_runs_kept_of_their_requests(
    store: SessionStore,
) -> None:
    kept = '{"tools": [{"name": "client_tool"}]}'
    await store.begin_run("s1", "r1", at(0), create=True, kept=kept)
    assert await store.kept_input("s1", "r1") == kept
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1))

    await store.delete_session("s1")

    # The ids are free again; a run that keeps nothing finds nothing of the deleted one.
    await store.begin_run("s1", "r1", at(2), create=True)
    assert await store.kept_input("s1", "r1") == ""


async def test_deleting_a_busy_session_raises_session_busy_and_deletes_nothing(
    store: SessionStore,
) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.append_messages("s1", [message("m1")])

    with pytest.raises(SessionBusy) as caught:
        await store.delete_session("s1")

    assert caught.value.run_id == "r1"
    assert (await store.get_session("s1")).active_run_id == "r1"
    assert [m.id for m in await store.all_messages("s1")] == ["m1"]
    assert [r.id for r in await store.list_runs("s1")] == ["r1"]


UNKNOWN_SESSION_CALLS: dict[str, Callable[[SessionStore], Awaitable[object]]] = {
    "get_session": lambda s: s.get_session("nope"),
    "rename_session": lambda s: s.rename_session("nope", "t", at(0)),
    "delete_session": lambda s: s.delete_session("nope"),
    "list_messages": lambda s: s.list_messages("nope", "", 10),
    "all_messages": lambda s: s.all_messages("nope"),
    "begin_run": lambda s: s.begin_run("nope", "r1", at(0), create=False),
    "finish_run": lambda s: s.finish_run("nope", "r1", RunStatus.SUCCEEDED, at(0)),
    "get_run": lambda s: s.get_run("nope", "r1"),
    "list_runs": lambda s: s.list_runs("nope"),
    "append_messages": lambda s: s.append_messages("nope", [message("m1")]),
    "replace_messages": lambda s: s.replace_messages("nope", [message("m1")]),
    "set_state": lambda s: s.set_state("nope", {}),
    "append_events": lambda s: s.append_events("nope", [event(1, ev.RunStarted(), "nope")]),
    "read_events": lambda s: s.read_events("nope", 0, 10),
}


@pytest.mark.parametrize("call", UNKNOWN_SESSION_CALLS.values(), ids=UNKNOWN_SESSION_CALLS.keys())
async def test_unknown_session_ids_raise_session_not_found(
    store: SessionStore, call: Callable[[SessionStore], Awaitable[object]]
) -> None:
    await store.create_session("other", "", at(0))
    with pytest.raises(SessionNotFound):
        await call(store)
    assert (await store.list_sessions(0, 0))[1] == 1


# Runs


async def test_begin_run_makes_the_session_busy_and_a_second_run_is_refused(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", at(0))
    begun = await store.begin_run("s1", "r1", at(1), create=False)
    assert not begun.created
    assert (begun.session.active_run_id, begun.session.updated_at) == ("r1", at(1))
    assert (await store.get_session("s1")).active_run_id == "r1"

    with pytest.raises(SessionBusy) as caught:
        await store.begin_run("s1", "r2", at(2), create=True)
    assert caught.value.run_id == "r1"
    assert [r.id for r in await store.list_runs("s1")] == ["r1"]


async def test_concurrent_begin_runs_let_exactly_one_through(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    outcomes = await asyncio.gather(
        *(store.begin_run("s1", f"r{i}", at(1), create=False) for i in range(5)),
        return_exceptions=True,
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert all(isinstance(o, SessionBusy) for o in outcomes if isinstance(o, BaseException))


async def test_begin_run_with_create_makes_the_missing_session(store: SessionStore) -> None:
    begun = await store.begin_run("s1", "r1", at(3), create=True)
    assert begun.created
    assert begun.session == await store.get_session("s1")
    assert (begun.session.created_at, begun.session.active_run_id) == (at(3), "r1")


async def test_reusing_a_run_id_in_a_session_raises_already_exists(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1))
    with pytest.raises(AlreadyExists):
        await store.begin_run("s1", "r1", at(2), create=False)
    assert (await store.get_session("s1")).active_run_id == ""


async def test_run_ids_are_unique_across_sessions_and_the_refusal_hides_where(
    store: SessionStore,
) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1))
    await store.create_session("s2", "", at(2))
    with pytest.raises(AlreadyExists) as caught:
        await store.begin_run("s2", "r1", at(3), create=False)
    assert "r1" in str(caught.value) and "s1" not in str(caught.value)
    assert [r.id for r in await store.list_runs("s2")] == []
    with pytest.raises(AlreadyExists):  # nor does a session made for the run survive
        await store.begin_run("s3", "r1", at(3), create=True)
    assert (await store.get_run("s1", "r1")).session_id == "s1"
    # Once its session is deleted, the id is free again.
    await store.delete_session("s1")
    await store.begin_run("s2", "r1", at(4), create=False)


def _interrupt(interrupt_id: str, run_id: str) -> Interrupt:
    return Interrupt(
        interrupt_id,
        InterruptKind.APPROVAL,
        run_id,
        ToolCall("call-" + interrupt_id, "calculate", '{"expression": "1+1"}'),
        "Approve calling calculate?",
        {"tool": "calculate", "arguments": {"expression": "1+1"}},
        at(60),
    )


async def test_interrupts_of_a_finished_run_are_pending_until_resolved(
    store: SessionStore,
) -> None:
    asked = [_interrupt("i1", "r1"), _interrupt("i2", "r1")]
    await store.begin_run("s1", "r1", at(0), create=True, parent_run_id="p0")
    await store.finish_run("s1", "r1", RunStatus.INPUT_REQUIRED, at(1), interrupts=asked)
    assert (await store.get_session("s1")).interrupts == asked
    run = await store.get_run("s1", "r1")
    assert (run.status, run.interrupts, run.resumed_by, run.parent_run_id) == (
        RunStatus.INPUT_REQUIRED,
        asked,
        "",
        "p0",
    )
    seen: list[list[Interrupt]] = []
    await store.begin_run("s1", "r2", at(2), create=False, admit=seen.append)
    # Last with what is pending (a store may first ask about none: ``begin_run``).
    assert seen[-1] == asked and all(s in ([], asked) for s in seen), seen
    await store.resolve_interrupts("s1", "r2")
    assert (await store.get_session("s1")).interrupts == []
    assert (await store.get_run("s1", "r1")).resumed_by == "r2"
    assert (await store.get_run("s1", "r1")).interrupts == asked  # the record keeps them
    await store.finish_run("s1", "r2", RunStatus.SUCCEEDED, at(3))
    assert (await store.get_session("s1")).interrupts == []


async def test_a_refusing_admit_writes_nothing(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run(
        "s1", "r1", RunStatus.INPUT_REQUIRED, at(1), interrupts=[_interrupt("i1", "r1")]
    )

    def refuse(pending: list[Interrupt]) -> None:
        raise InvalidInput("no")

    with pytest.raises(InvalidInput):
        await store.begin_run("s1", "r2", at(2), create=False, admit=refuse)
    session = await store.get_session("s1")
    assert (session.active_run_id, len(session.interrupts)) == ("", 1)
    assert [r.id for r in await store.list_runs("s1")] == ["r1"]
    await store.begin_run("s1", "r2", at(3), create=False)  # the id was not taken


async def test_finish_run_records_the_outcome_and_frees_the_session(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run("s1", "r1", RunStatus.FAILED, at(4), "llm_timeout", "too slow")

    run = await store.get_run("s1", "r1")
    assert (run.id, run.session_id, run.status) == ("r1", "s1", RunStatus.FAILED)
    assert (run.started_at, run.finished_at) == (at(0), at(4))
    assert (run.error_code, run.error_message) == ("llm_timeout", "too slow")
    session = await store.get_session("s1")
    assert (session.active_run_id, session.updated_at) == ("", at(4))
    await store.begin_run("s1", "r2", at(5), create=False)


async def test_finishing_a_run_twice_keeps_the_first_outcome(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run("s1", "r1", RunStatus.INTERRUPTED, at(1))
    await store.finish_run("s1", "r1", RunStatus.FAILED, at(2), "internal", "late")
    run = await store.get_run("s1", "r1")
    assert (run.status, run.finished_at, run.error_code) == (RunStatus.INTERRUPTED, at(1), "")


async def test_finishing_with_status_running_is_refused(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    with pytest.raises(InvalidInput):
        await store.finish_run("s1", "r1", RunStatus.RUNNING, at(1))
    assert (await store.get_session("s1")).active_run_id == "r1"


async def test_runs_list_oldest_first_and_unknown_runs_raise_run_not_found(
    store: SessionStore,
) -> None:
    for i, run_id in enumerate(["r1", "r2", "r3"]):
        await store.begin_run("s1", run_id, at(i), create=True)
        await store.finish_run("s1", run_id, RunStatus.SUCCEEDED, at(i))
    runs = await store.list_runs("s1")
    assert [r.id for r in runs] == ["r1", "r2", "r3"]
    assert runs[1] == await store.get_run("s1", "r2")
    with pytest.raises(RunNotFound):
        await store.get_run("s1", "r9")
    with pytest.raises(RunNotFound):
        await store.finish_run("s1", "r9", RunStatus.SUCCEEDED, at(9))


async def test_running_runs_lists_only_runs_still_running(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.begin_run("s2", "r2", at(0), create=True)
    await store.finish_run("s2", "r2", RunStatus.SUCCEEDED, at(1))
    await store.begin_run("s3", "r3", at(2), create=True)

    running = await store.running_runs()

    assert [(r.session_id, r.id, r.status) for r in running] == [
        ("s1", "r1", RunStatus.RUNNING),
        ("s3", "r3", RunStatus.RUNNING),
    ]
    await store.finish_run("s1", "r1", RunStatus.INTERRUPTED, at(3))
    await store.finish_run("s3", "r3", RunStatus.INTERRUPTED, at(3))
    assert await store.running_runs() == []


async def _stored(store: SessionStore) -> tuple[object, ...]:
    """What the writes of a run change in session s1 and its run r1."""
    session = await store.get_session("s1")
    run = await store.get_run("s1", "r1")
    checkpoint, _ = await store.context_messages("s1")
    messages = [m.id for m in await store.all_messages("s1")]
    return (
        messages,
        session.title,
        session.last_seq,
        session.reserved_seq,
        session.state,
        session.interrupts,
        checkpoint,
        (run.status, run.input_tokens, run.resumed_by),
    )


def _writes_of(
    store: SessionStore, hold: RunHold, seq: int
) -> dict[str, Callable[[], Awaitable[object]]]:
    """Every write a run makes, by the run of ``hold``, its events from ``seq`` (its events
    and the messages with them are fenced by their seqs, its other writes by ``hold``)."""
    state: JSON = {"by": hold.replica}
    return {
        "append_messages": lambda: store.append_messages(
            "s1", [message(f"m-{hold.replica}")], title="late", now=at(9), hold=hold
        ),
        "append_messages_and_events": lambda: store.append_messages_and_events(
            "s1", [message(f"e-{hold.replica}")], [event(seq, ev.StepStarted("x"))], hold=hold
        ),
        "append_messages_and_no_events": lambda: store.append_messages_and_events(
            "s1", [message(f"n-{hold.replica}")], [], reserve_through=seq + 50, hold=hold
        ),
        "append_events": lambda: store.append_events(
            "s1", [event(seq, ev.StepStarted("y"))], reserve_through=seq + 90
        ),
        "replace_messages": lambda: store.replace_messages(
            "s1", [message(f"r-{hold.replica}")], hold=hold
        ),
        "set_state": lambda: store.set_state("s1", state, hold=hold),
        "save_checkpoint": lambda: store.save_checkpoint("s1", Checkpoint("m0", "late"), hold=hold),
        "note_usage": lambda: store.note_usage(
            "s1", hold.run_id, ev.Usage(7, 7, 14), replica=hold.replica
        ),
        "resolve_interrupts": lambda: store.resolve_interrupts(
            "s1", hold.run_id, replica=hold.replica
        ),
        "finish_run": lambda: store.finish_run(
            "s1",
            hold.run_id,
            RunStatus.SUCCEEDED,
            at(9),
            events=[event(seq, ev.RunFinished())],
            hold=hold,
        ),
    }


async def _run_held_by_a(store: SessionStore) -> None:
    """Run r1 of session s1, leased to replica A until at(10), seqs 1 to 10 reserved for
    it, with a message m0 and interrupts pending from an earlier run r0."""
    await store.begin_run("s1", "r0", at(0), create=True)
    await store.finish_run(
        "s1", "r0", RunStatus.INPUT_REQUIRED, at(0), interrupts=[_interrupt("i1", "r0")]
    )
    await store.begin_run("s1", "r1", at(1), create=False, reserve=10, lease=Lease("A", at(10)))
    await store.append_messages("s1", [message("m0")], hold=RunHold("r1", "A"))


@pytest.mark.parametrize("write", list(_writes_of(MemorySessionStore(), RunHold("r1"), 1)))
async def test_a_runs_writes_store_nothing_once_another_replica_took_it_over(
    store: SessionStore, write: str
) -> None:
    """A replica stalled past its lease (``RunHold``): once another claimed its run, each
    write it makes for the run is refused, and stores nothing; the replica that holds the
    run now writes (its events after the seqs reserved for the first)."""
    await _run_held_by_a(store)
    [claimed] = await store.claim_expired_runs("B", at(20), at(30))
    assert (claimed.id, claimed.replica) == ("r1", "B")
    before = await _stored(store)

    with pytest.raises(InvalidInput):
        await _writes_of(store, RunHold("r1", "A"), 1)[write]()

    assert await _stored(store) == before
    await _writes_of(store, RunHold("r1", "B"), 11)[write]()
    assert await _stored(store) != before


@pytest.mark.parametrize("write", list(_writes_of(MemorySessionStore(), RunHold("r1"), 1)))
async def test_a_runs_writes_store_nothing_once_it_ended(store: SessionStore, write: str) -> None:
    """Closed meanwhile, its closing events after its reserved seqs (as the replica that
    takes a run over closes it): the same refusal."""
    await _run_held_by_a(store)
    await store.finish_run(
        "s1", "r1", RunStatus.INTERRUPTED, at(20), events=[event(11, ev.RunFinished())]
    )
    before = await _stored(store)

    with pytest.raises(InvalidInput):
        await _writes_of(store, RunHold("r1", "A"), 1)[write]()

    assert await _stored(store) == before


async def test_a_claim_moves_the_last_seq_past_the_seqs_reserved_when_the_run_changes_hands(
    store: SessionStore,
) -> None:
    """What fences a run's events (``RunHold``): once another replica claimed the run, no
    seq its old replica was given follows the session's last; a replica that claims its
    own run back (a renewal raced the expiry) goes on as it was."""
    await store.begin_run("s1", "r1", at(0), create=True, reserve=10, lease=Lease("A", at(10)))
    await store.append_events("s1", [event(1, ev.RunStarted())])
    await store.begin_run("s2", "r2", at(0), create=True, reserve=10, lease=Lease("B", at(10)))
    await store.append_events("s2", [event(1, ev.RunStarted(), "s2", "r2")])

    claimed = await store.claim_expired_runs("B", at(20), at(30))

    assert sorted(r.id for r in claimed) == ["r1", "r2"]
    assert ((await store.get_session("s1")).last_seq, (await store.get_session("s2")).last_seq) == (
        10,
        1,
    )
    with pytest.raises(InvalidInput):
        await store.append_events("s1", [event(2, ev.TextMessageStart("a"))])
    await store.append_events("s1", [event(11, ev.Custom("resumed", {}))])
    await store.append_events("s2", [event(2, ev.TextMessageStart("b"), "s2", "r2")])
    assert [e.seq for e in await store.read_events("s1", 0, 0)] == [1, 11]


async def test_a_store_of_one_engine_holds_its_runs_under_no_replica(store: SessionStore) -> None:
    """Runs begun without a lease are held by replica "": their writes go through while
    they run, and not after."""
    await store.begin_run("s1", "r1", at(0), create=True, reserve=10)
    hold = RunHold("r1")
    await store.append_messages_and_events(
        "s1", [message("a")], [event(1, ev.RunStarted())], hold=hold
    )
    await store.note_usage("s1", "r1", ev.Usage(1, 1, 2))
    await store.finish_run(
        "s1", "r1", RunStatus.SUCCEEDED, at(1), events=[event(2, ev.RunFinished())], hold=hold
    )
    with pytest.raises(InvalidInput):
        await store.append_messages("s1", [message("b")], hold=hold)
    assert [m.id for m in await store.all_messages("s1")] == ["a"]


async def test_begin_run_reserves_seqs_after_the_last_stored_event(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_events("s1", [event(1, ev.RunStarted()), event(2, ev.StepStarted("a"))])
    assert (await store.get_session("s1")).reserved_seq == 2

    begun = await store.begin_run("s1", "r1", at(1), create=False, reserve=100)

    assert (begun.session.last_seq, begun.session.reserved_seq) == (2, 102)
    assert (await store.get_session("s1")).reserved_seq == 102


async def test_appending_events_tops_up_the_reservation_in_the_same_write(
    store: SessionStore,
) -> None:
    await store.begin_run("s1", "r1", at(0), create=True, reserve=10)
    await store.append_events("s1", [event(1, ev.RunStarted())], reserve_through=50)
    assert (await store.get_session("s1")).reserved_seq == 50
    await store.append_events("s1", [event(2, ev.StepStarted("a"))], reserve_through=20)
    assert (await store.get_session("s1")).reserved_seq == 50  # never shrinks
    await store.append_events("s1", [], reserve_through=80)
    session = await store.get_session("s1")
    assert (session.last_seq, session.reserved_seq) == (2, 80)


async def test_events_may_skip_reserved_seqs_but_never_go_back(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True, reserve=10)
    await store.append_events("s1", [event(1, ev.RunStarted())])
    await store.append_events("s1", [event(11, ev.RunFinished())])
    assert [e.seq for e in await store.read_events("s1", 0, 0)] == [1, 11]
    assert [e.seq for e in await store.read_events("s1", 5, 0)] == [11]
    with pytest.raises(InvalidInput):
        await store.append_events("s1", [event(5, ev.StepStarted("late"))])


async def test_a_negative_reservation_is_refused(store: SessionStore) -> None:
    with pytest.raises(InvalidInput):
        await store.begin_run("s1", "r1", at(0), create=True, reserve=-1)


async def test_a_writable_store_passes_the_write_probe(store: SessionStore) -> None:
    await store.check_writable()
    await store.check_writable()


# Messages


async def test_messages_page_after_an_id_and_say_whether_more_follow(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_messages("s1", [message("m0"), message("m1")])
    await store.append_messages("s1", [message("m2"), message("m3"), message("m4")])

    async def page(after_id: str, limit: int) -> tuple[list[str], bool]:
        messages, more = await store.list_messages("s1", after_id, limit)
        return [m.id for m in messages], more

    assert await page("", 2) == (["m0", "m1"], True)
    assert await page("m1", 2) == (["m2", "m3"], True)
    assert await page("m3", 2) == (["m4"], False)
    assert await page("m4", 2) == ([], False)
    assert await page("", 5) == (["m0", "m1", "m2", "m3", "m4"], False)
    assert await page("m2", 0) == (["m3", "m4"], False)


async def test_an_unknown_after_id_raises_invalid_input(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    await store.create_session("s2", "", at(0))
    await store.append_messages("s2", [message("elsewhere")])
    with pytest.raises(InvalidInput):
        await store.list_messages("s1", "elsewhere", 10)


async def test_messages_round_trip_exactly(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    sent = [message("m0"), rich_message("m1")]
    await store.append_messages("s1", sent)
    assert await store.all_messages("s1") == sent
    created_at = (await store.all_messages("s1"))[1].created_at
    assert created_at is not None and created_at.tzinfo == UTC


async def test_appending_a_taken_message_id_raises_already_exists_and_appends_nothing(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_messages("s1", [message("a")])
    with pytest.raises(AlreadyExists):
        await store.append_messages("s1", [message("b"), message("a")])
    with pytest.raises(AlreadyExists):
        await store.append_messages("s1", [message("c"), message("c")])
    assert [m.id for m in await store.all_messages("s1")] == ["a"]


async def test_appending_with_a_title_names_the_session_in_the_same_write(
    store: SessionStore,
) -> None:
    """A run's first messages and the title they give an untitled conversation are one
    write: both or neither."""
    await store.create_session("s1", "", at(0))
    await store.append_messages("s1", [message("a")], title="Hello", now=at(5))
    session = await store.get_session("s1")
    assert (session.title, session.updated_at) == ("Hello", at(5))
    with pytest.raises(AlreadyExists):
        await store.append_messages("s1", [message("a")], title="Other", now=at(9))
    session = await store.get_session("s1")
    assert (session.title, session.updated_at) == ("Hello", at(5))
    assert [m.id for m in await store.all_messages("s1")] == ["a"]
    await store.append_messages("s1", [], title="Only a title", now=at(7))
    assert (await store.get_session("s1")).title == "Only a title"
    with pytest.raises(SessionNotFound):
        await store.append_messages("nope", [message("b")], title="x", now=at(7))


async def test_a_runs_input_and_the_events_before_it_are_stored_together(
    store: SessionStore,
) -> None:
    """``append_messages_and_events``: the messages, the title, the events and the seqs
    reserved, as the two writes would store them; a message refused stores no event."""
    await store.begin_run("s1", "r1", at(0), create=True, reserve=10)
    await store.append_messages_and_events(
        "s1", [message("a")], [event(1, ev.RunStarted())], reserve_through=40, title="Hi", now=at(3)
    )
    session = await store.get_session("s1")
    assert (session.title, session.last_seq, session.reserved_seq) == ("Hi", 1, 40)
    assert [m.id for m in await store.all_messages("s1")] == ["a"]
    assert [e.seq for e in await store.read_events("s1", 0, 0)] == [1]

    with pytest.raises(AlreadyExists):
        await store.append_messages_and_events(
            "s1", [message("b"), message("a")], [event(2, ev.StepStarted("x"))]
        )
    assert [m.id for m in await store.all_messages("s1")] == ["a"]
    assert (await store.get_session("s1")).last_seq == 1  # the events went with the messages
    # No messages: the events alone.
    await store.append_messages_and_events("s1", [], [event(2, ev.StepStarted("x"))])
    assert (await store.get_session("s1")).last_seq == 2
    with pytest.raises(SessionNotFound):
        await store.append_messages_and_events("nope", [message("c")], [])


async def test_replace_messages_makes_them_the_whole_history(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_messages("s1", [message("a"), message("b")])
    await store.replace_messages("s1", [message("x", "new"), message("a", "edited")])
    await store.append_messages("s1", [message("y")])

    history = await store.all_messages("s1")
    assert [(m.id, m.content) for m in history] == [
        ("x", [TextPart("new")]),
        ("a", [TextPart("edited")]),
        ("y", [TextPart("hello")]),
    ]
    with pytest.raises(InvalidInput):
        await store.list_messages("s1", "b", 10)


async def test_replacing_with_duplicate_ids_raises_invalid_input_and_keeps_history(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_messages("s1", [message("a")])
    with pytest.raises(InvalidInput):
        await store.replace_messages("s1", [message("x"), message("x")])
    assert [m.id for m in await store.all_messages("s1")] == ["a"]


async def test_message_count_counts_the_history(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_messages("s1", [message("a"), message("b"), message("c")])
    assert (await store.get_session("s1")).message_count == 3
    await store.replace_messages("s1", [message("z")])
    assert (await store.get_session("s1")).message_count == 1
    sessions, _ = await store.list_sessions(0, 10)
    assert sessions[0].message_count == 1


# State


async def test_state_round_trips_and_json_null_differs_from_an_empty_dict(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", at(0))
    state = {"todo": [{"done": False, "text": "ünï"}], "n": 1.5, "none": None}
    await store.set_state("s1", state)
    assert (await store.get_session("s1")).state == state
    await store.set_state("s1", {})
    assert (await store.get_session("s1")).state == {}
    await store.set_state("s1", None)
    assert (await store.get_session("s1")).state is None


async def test_state_that_is_not_json_is_refused_and_the_old_state_kept(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", at(0))
    await store.set_state("s1", {"ok": True})
    with pytest.raises(InvalidInput):
        await store.set_state("s1", {"bad": object()})
    assert (await store.get_session("s1")).state == {"ok": True}


# Events


async def test_events_round_trip_exactly_and_advance_last_seq(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    events = [event(i + 1, body) for i, body in enumerate(assorted_bodies())]
    await store.append_events("s1", events[:4])
    assert (await store.get_session("s1")).last_seq == 4
    await store.append_events("s1", events[4:])
    assert (await store.get_session("s1")).last_seq == len(events)

    assert await store.read_events("s1", 0, 0) == events
    assert await store.read_events("s1", 2, 3) == events[2:5]
    assert await store.read_events("s1", len(events), 10) == []


async def test_events_must_come_after_last_seq_and_a_bad_batch_stores_nothing(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", at(0))
    await store.append_events("s1", [event(1, ev.RunStarted()), event(2, ev.StepStarted("a"))])
    with pytest.raises(InvalidInput):
        await store.append_events("s1", [event(3, ev.StepFinished("a")), event(3, ev.RunStarted())])
    with pytest.raises(InvalidInput):
        await store.append_events("s1", [event(2, ev.RunStarted())])
    assert (await store.get_session("s1")).last_seq == 2
    assert [e.seq for e in await store.read_events("s1", 0, 0)] == [1, 2]


async def test_events_of_another_thread_are_refused(store: SessionStore) -> None:
    await store.create_session("s1", "", at(0))
    with pytest.raises(InvalidInput):
        await store.append_events("s1", [event(1, ev.RunStarted(), session_id="s2")])
    assert await store.read_events("s1", 0, 0) == []


async def test_prune_events_deletes_older_events_everywhere_and_keeps_last_seq(
    store: SessionStore,
) -> None:
    cutoff = datetime.fromtimestamp(1_700_000_000.123456 + 3, UTC)
    for session_id in ("s1", "s2"):
        await store.create_session(session_id, "", at(0))
        await store.append_events(
            session_id, [event(i, ev.StepStarted(str(i)), session_id) for i in range(1, 6)]
        )

    assert await store.prune_events(cutoff) == 4

    for session_id in ("s1", "s2"):
        assert [e.seq for e in await store.read_events(session_id, 0, 0)] == [3, 4, 5]
        assert (await store.get_session(session_id)).last_seq == 5
    assert await store.prune_events(cutoff) == 0


# SQLite specifics and open_store (more in tests/stores/sqlite/)


async def test_sqlite_data_survives_closing_and_reopening(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "agentik.db"
    first = SqliteSessionStore(path)
    await first.begin_run("s1", "r1", at(0), create=True)
    await first.append_messages("s1", [rich_message("m1")])
    await first.set_state("s1", {"k": [1, 2]})
    events = [event(i + 1, body) for i, body in enumerate(assorted_bodies())]
    await first.append_events("s1", events)
    before = await first.get_session("s1")
    await first.close()

    second = SqliteSessionStore(path)
    try:
        assert await second.get_session("s1") == before
        assert await second.all_messages("s1") == [rich_message("m1")]
        assert await second.read_events("s1", 0, 0) == events
        assert (await second.get_run("s1", "r1")).status is RunStatus.RUNNING
        with pytest.raises(SessionBusy):
            await second.begin_run("s1", "r2", at(1), create=False)
    finally:
        await second.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()


async def test_open_store_understands_memory_and_sqlite_urls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    memory = open_store("memory://")
    relative = open_store("sqlite:///data/rel.db")
    absolute = open_store(f"sqlite:///{tmp_path / 'abs' / 'abs.db'}")
    try:
        assert isinstance(memory, MemorySessionStore)
        assert isinstance(relative, SqliteSessionStore)
        assert isinstance(absolute, SqliteSessionStore)
        assert (tmp_path / "data" / "rel.db").is_file()
        assert (tmp_path / "abs" / "abs.db").is_file()
    finally:
        for opened in (memory, relative, absolute):
            await opened.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+psycopg://agent:s3cret@db.example/agentik", "no driver suffix"),
        ("mysql://db.example/agentik", "mysql://db.example/agentik"),
        ("sqlite://relative.db", "sqlite://relative.db"),
        ("sqlite:///", "sqlite:///"),
        ("", "''"),
    ],
)
def test_open_store_refuses_other_urls_naming_them(url: str, says: str) -> None:
    with pytest.raises(ValueError, match="URL") as caught:
        open_store(url)
    assert says in str(caught.value)
    assert "s3cret" not in str(caught.value)


async def test_runs_can_be_found_by_id_alone_and_paged_newest_first(store: SessionStore) -> None:
    await store.begin_run("a", "r1", T0, create=True)
    await store.finish_run("a", "r1", RunStatus.SUCCEEDED, T0, pending_tool_call_ids=["c1", "c2"])
    await store.begin_run("b", "r2", T0 + timedelta(seconds=1), create=True)
    await store.begin_run("a", "r3", T0 + timedelta(seconds=2), create=False)

    found = await store.find_run("r1")
    assert (found.session_id, found.status) == ("a", RunStatus.SUCCEEDED)
    assert found.pending_tool_call_ids == ["c1", "c2"]
    assert (await store.get_run("a", "r1")).pending_tool_call_ids == ["c1", "c2"]
    with pytest.raises(RunNotFound):
        await store.find_run("nope")

    page, total = await store.page_runs("", 0, 2)
    assert total == 3
    assert [r.id for r in page] == ["r3", "r2"]
    rest, _ = await store.page_runs("", 2, 2)
    assert [r.id for r in rest] == ["r1"]
    mine, total_a = await store.page_runs("a", 0, 10)
    assert ([r.id for r in mine], total_a) == (["r3", "r1"], 2)
    with pytest.raises(SessionNotFound):
        await store.page_runs("missing", 0, 10)


# Messages of runs


async def test_run_messages_are_the_last_of_the_runs_named_oldest_first(
    store: SessionStore,
) -> None:
    await store.create_session("s1", "", T0)
    made = []
    for index in range(12):
        one = message(f"m{index}", f"text {index}")
        one.run_id = ("r1", "r2", "r3")[index % 3]
        made.append(one)
    await store.append_messages("s1", made)
    found, clipped = await store.run_messages("s1", ["r1", "r3"], 3)
    assert [m.id for m in found] == ["m8", "m9", "m11"] and clipped
    everything, clipped = await store.run_messages("s1", ["r2"], 100)
    assert [m.id for m in everything] == ["m1", "m4", "m7", "m10"] and not clipped
    assert everything[0].content == made[1].content
    assert await store.run_messages("s1", ["nobody"], 5) == ([], False)
    with pytest.raises(SessionNotFound):
        await store.run_messages("nope", ["r1"], 5)


async def test_run_messages_find_messages_whose_text_holds_nul(store: SessionStore) -> None:
    await store.create_session("s1", "", T0)
    odd = message("m1", 'a\x00b "run_id":"r9" \\"')
    odd.run_id = "r1"
    await store.append_messages("s1", [odd])
    found, _ = await store.run_messages("s1", ["r1"], 5)
    assert [m.content for m in found] == [odd.content]
    assert await store.run_messages("s1", ["r9"], 5) == ([], False)
