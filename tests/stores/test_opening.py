"""``begin_run``'s opening: a run stores its RUN_STARTED, the client's new messages and their
MESSAGE_STORED in the run's own transaction (a later run of a conversation reads what it
starts from there too, and stores only the messages the conversation does not hold), or,
when the conversation has state or pending interrupts or is another agent's, stores none
of it. A refused run stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engine_service.core import events as ev
from engine_service.core.errors import (
    AlreadyExists,
    InvalidInput,
    SessionBusy,
    SessionNotFound,
)
from engine_service.core.models import (
    Interrupt,
    InterruptKind,
    Message,
    Role,
    RunStatus,
    TextPart,
    ToolCall,
)
from engine_service.core.store import Checkpoint, Opening, RunBegun, SessionStore

T0 = datetime(2026, 12, 6, 12, 0, 0, 250000, tzinfo=UTC)


def _opening(*ids: str, run_id: str = "r1", title: str = "a title") -> Opening:
    messages = []
    for message_id in ids:
        made = Message(
            id=message_id, role=Role.USER, content=[TextPart(f"text {message_id}")], created_at=T0
        )
        made.run_id = run_id
        messages.append(made)
    bodies: list[ev.EventBody] = [ev.RunStarted(parent_run_id="p")]
    bodies += [ev.MessageStored(m) for m in messages]
    return Opening(messages, bodies, title)


async def _begin(
    store: SessionStore, run_id: str, opening: Opening, *, create: bool = True, agent: str = ""
) -> RunBegun:
    return await store.begin_run(
        "s1", run_id, T0, create=create, reserve=10, opening=opening, agent=agent
    )


async def test_a_new_conversation_stores_the_opening_with_its_run(store: SessionStore) -> None:
    opening = _opening("u1", "u2")
    begun = await _begin(store, "r1", opening)
    stored = await store.read_events("s1", 0, 0)
    session = await store.get_session("s1")
    assert [e.seq for e in begun.opened] == [1, 2, 3]
    assert [(e.seq, e.run_id, e.body) for e in stored] == [
        (e.seq, e.run_id, e.body) for e in begun.opened
    ]
    assert [type(e.body) for e in stored] == [ev.RunStarted, ev.MessageStored, ev.MessageStored]
    assert all(e.time == T0.timestamp() for e in stored)
    assert begun.start_after == 0
    assert [(m.id, m.run_id, m.created_at) for m in await store.all_messages("s1")] == [
        ("u1", "r1", T0),
        ("u2", "r1", T0),
    ]
    assert (session.title, session.message_count, session.last_seq) == ("a title", 2, 3)
    assert begun.session.last_seq == 3 and begun.session.message_count == 2
    assert session.reserved_seq == 10  # the run's block, counted from where it started
    run = await store.get_run("s1", "r1")
    assert (run.status, run.start_seq) == (RunStatus.RUNNING, 1)
    # The run goes on from there: its next event follows the opening's.
    await store.append_events("s1", [ev.Event(4, 1.0, "s1", "r1", ev.RunFinished())])
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, T0 + timedelta(seconds=1))
    assert [e.seq for e in await store.read_events("s1", 0, 0)] == [1, 2, 3, 4]


async def test_a_long_opening_is_reserved_past_the_block(store: SessionStore) -> None:
    ids = [f"u{i}" for i in range(14)]
    begun = await store.begin_run("s1", "r1", T0, create=True, reserve=4, opening=_opening(*ids))
    session = await store.get_session("s1")
    assert len(begun.opened) == 15
    assert session.last_seq == 15 and session.reserved_seq >= 15


async def test_an_existing_bare_conversation_of_the_agent_takes_it(store: SessionStore) -> None:
    await store.create_session("s1", "kept title", T0, agent="helper")
    begun = await _begin(store, "r1", _opening("u1"), create=False, agent="helper")
    session = await store.get_session("s1")
    assert len(begun.opened) == 2
    assert (session.title, session.message_count) == ("kept title", 1)  # never renamed


@pytest.mark.parametrize("why", ["state", "interrupts", "agent"])
async def test_a_conversation_with_state_or_pending_interrupts_or_of_another_agent_stores_none(
    store: SessionStore, why: str
) -> None:
    """With pending interrupts, the answers to them (an expired one counts as declined)
    are stored by the run before the client's new messages."""
    await store.create_session("s1", "", T0, agent="helper")
    await store.append_messages("s1", [_opening("old", run_id="r0").messages[0]])
    if why == "state":
        await store.set_state("s1", {"count": 1})
    elif why == "interrupts":
        await store.begin_run("s1", "r0", T0, create=False, agent="helper")
        asked = Interrupt(
            "i1",
            InterruptKind.APPROVAL,
            "r0",
            ToolCall("c1", "calculate", "{}"),
            "Approve calling calculate?",
            {},
            T0 - timedelta(seconds=1),  # expired: the run may go on, declining it
        )
        await store.finish_run("s1", "r0", RunStatus.INPUT_REQUIRED, T0, interrupts=[asked])
    agent = "other" if why == "agent" else "helper"
    before = await store.get_session("s1")

    begun = await _begin(store, "r1", _opening("u1"), create=False, agent=agent)

    assert begun.opened == [] and begun.start_after == before.last_seq
    session = await store.get_session("s1")
    assert session.active_run_id == "r1"
    assert await store.read_events("s1", 0, 0) == []
    assert (session.message_count, session.title) == (before.message_count, "")
    assert begun.context is None
    assert [m.id for m in await store.all_messages("s1")] == ["old"]


async def test_a_later_run_stores_its_new_messages_and_hands_back_what_it_starts_from(
    store: SessionStore,
) -> None:
    """A conversation with messages, no title and a checkpoint; the client sends the whole
    history again with one new message (as an AG-UI client does)."""
    await store.create_session("s1", "", T0, agent="helper")
    await store.append_messages("s1", _opening("u0", "a0", "u1", run_id="r0").messages)
    await store.save_checkpoint("s1", Checkpoint("a0", "they said hello", 4))
    await store.append_events("s1", [ev.Event(1, 1.0, "s1", "r0", ev.RunFinished())])
    expected = await store.run_context("s1", ["u0", "a0", "u1", "u2"])

    begun = await _begin(
        store, "r1", _opening("u0", "a0", "u1", "u2"), create=False, agent="helper"
    )

    session = await store.get_session("s1")
    assert begun.context == expected
    checkpoint, history, known = expected
    assert checkpoint is not None and checkpoint.through_id == "a0"
    assert [m.id for m in history] == ["u1"] and known == {"u0", "a0", "u1"}
    # Only the new message is stored, after the others, with RUN_STARTED before it.
    assert [e.seq for e in begun.opened] == [2, 3] and begun.start_after == 1
    assert [type(e.body) for e in begun.opened] == [ev.RunStarted, ev.MessageStored]
    stored_body = begun.opened[1].body
    assert isinstance(stored_body, ev.MessageStored) and stored_body.message.id == "u2"
    assert [(e.seq, e.body) for e in await store.read_events("s1", 1, 0)] == [
        (e.seq, e.body) for e in begun.opened
    ]
    assert [m.id for m in await store.all_messages("s1")] == ["u0", "a0", "u1", "u2"]
    assert [m.id for m in (await store.context_messages("s1"))[1]] == ["u1", "u2"]
    # A conversation is named by its first run only.
    assert (session.message_count, session.last_seq, session.title) == (4, 3, "")
    assert begun.session.message_count == 4 and begun.session.last_seq == 3
    await store.append_messages("s1", _opening("a2", run_id="r1").messages)  # goes on after
    assert [m.id for m in await store.all_messages("s1")][-2:] == ["u2", "a2"]


async def test_a_later_run_that_brings_nothing_new_stores_its_run_started(
    store: SessionStore,
) -> None:
    await _begin(store, "r0", _opening("u0", run_id="r0"))
    await store.finish_run("s1", "r0", RunStatus.SUCCEEDED, T0)

    begun = await _begin(store, "r1", _opening("u0"))

    assert [type(e.body) for e in begun.opened] == [ev.RunStarted]
    assert begun.context is not None and begun.context[2] == {"u0"}
    assert (await store.get_session("s1")).message_count == 1


async def test_a_refused_run_stores_none_of_its_opening(store: SessionStore) -> None:
    await store.begin_run("s1", "r0", T0, create=True)
    with pytest.raises(SessionBusy):  # another run holds the conversation
        await _begin(store, "r1", _opening("u1"))
    await store.finish_run("s1", "r0", RunStatus.SUCCEEDED, T0)
    with pytest.raises(AlreadyExists):  # the run id is taken
        await _begin(store, "r0", _opening("u1"))

    def refuse(pending: list[Interrupt]) -> None:
        raise InvalidInput("refused")

    with pytest.raises(InvalidInput):
        await store.begin_run("s1", "r2", T0, create=False, admit=refuse, opening=_opening("u1"))
    session = await store.get_session("s1")
    assert (session.message_count, session.last_seq, session.active_run_id) == (0, 0, "")
    assert await store.read_events("s1", 0, 0) == []


async def test_an_opening_with_a_message_id_twice_begins_nothing(store: SessionStore) -> None:
    with pytest.raises(AlreadyExists):
        await _begin(store, "r1", _opening("u1", "u1"))
    with pytest.raises(SessionNotFound):  # not even made
        await store.get_session("s1")
    await _begin(store, "r1", _opening("u1", "u2"))  # nothing of the refused one was kept
    assert [m.id for m in await store.all_messages("s1")] == ["u1", "u2"]


async def test_a_second_begin_of_an_active_run_stores_none_of_its_opening(
    store: SessionStore,
) -> None:
    """A run id sent again while its run is active (a client's retry): refused, and its
    opening is not stored into the active run, which has stored nothing yet."""
    await store.begin_run("s1", "r1", T0, create=True, reserve=10)  # no opening of its own
    with pytest.raises(SessionBusy):
        await _begin(store, "r1", _opening("u1"), create=False)
    session = await store.get_session("s1")
    assert (session.active_run_id, session.last_seq, session.message_count) == ("r1", 0, 0)
    assert await store.read_events("s1", 0, 0) == []
