"""Fork, usage totals and per-principal token counts, on every store (issue 21)."""

from __future__ import annotations

import asyncio
from datetime import date

import pytest

from engine_service.core import events as ev
from engine_service.core.errors import AlreadyExists, InvalidInput, SessionNotFound
from engine_service.core.models import RunStatus
from engine_service.stores import SessionStore
from tests.stores.test_session_store import at, message


async def _conversation(store: SessionStore, session_id: str = "s1", owner: str = "ann") -> None:
    await store.create_session(session_id, "talk", at(0), owner=owner)
    await store.append_messages(
        session_id, [message(f"{session_id}-m{i}", f"t{i}") for i in range(5)]
    )
    await store.set_state(session_id, {"k": [1, 2]})


async def test_a_fork_copies_the_messages_up_to_one_and_its_state_for_its_owner(
    store: SessionStore,
) -> None:
    await _conversation(store)
    fork = await store.fork_session("s1", "s1-m2", "f1", at(5), owner="bob", title="copy")

    assert (fork.id, fork.owner, fork.title, fork.message_count) == ("f1", "bob", "copy", 3)
    assert (fork.state, fork.active_run_id, fork.last_seq) == ({"k": [1, 2]}, "", 0)
    assert (fork.created_at, fork.input_tokens) == (at(5), 0)
    copied = await store.all_messages("f1")
    assert [m.id for m in copied] == ["s1-m0", "s1-m1", "s1-m2"]
    assert copied == (await store.all_messages("s1"))[:3]
    # The copy grows on its own; the original is untouched.
    await store.append_messages("f1", [message("new")])
    assert [m.id for m in await store.all_messages("f1")][-2:] == ["s1-m2", "new"]
    original = await store.get_session("s1")
    assert (original.message_count, original.owner) == (5, "ann")
    assert [m.id for m in await store.all_messages("s1")] == [f"s1-m{i}" for i in range(5)]


async def test_a_fork_of_the_last_message_copies_all_and_runs_are_not_copied(
    store: SessionStore,
) -> None:
    await _conversation(store)
    await store.begin_run("s1", "r1", at(1), create=False)
    # A run in progress does not stop a fork: the messages stored so far are copied.
    fork = await store.fork_session("s1", "s1-m4", "f1", at(2))
    assert fork.message_count == 5
    assert await store.list_runs("f1") == []
    assert (await store.get_session("s1")).active_run_id == "r1"


async def test_a_fork_refuses_what_it_cannot_do_and_writes_nothing(store: SessionStore) -> None:
    await _conversation(store)
    await _conversation(store, "s2")
    with pytest.raises(SessionNotFound):
        await store.fork_session("nope", "s1-m0", "f1", at(1))
    with pytest.raises(SessionNotFound):  # another owner's: as if it did not exist
        await store.fork_session("s1", "s1-m0", "f1", at(1), owner="eve", source_owner="eve")
    with pytest.raises(InvalidInput, match="up_to_message_id 's2-m0' is not a message"):
        await store.fork_session("s1", "s2-m0", "f1", at(1))
    with pytest.raises(AlreadyExists, match="session 's2' already exists"):
        await store.fork_session("s1", "s1-m0", "s2", at(1))
    with pytest.raises(InvalidInput, match="session id must not be empty"):
        await store.fork_session("s1", "s1-m0", "", at(1))
    _, total = await store.list_sessions(0, 0)
    assert total == 2
    assert (await store.get_session("s2")).message_count == 5
    fork = await store.fork_session("s1", "s1-m0", "f1", at(1), source_owner="ann")
    assert fork.message_count == 1


async def test_usage_is_kept_on_the_run_and_summed_on_the_session(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    usage = ev.Usage(input_tokens=100, output_tokens=20, total_tokens=120, cached_tokens=64)
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1), usage=usage)
    await store.begin_run("s1", "r2", at(2), create=False)
    await store.finish_run(
        "s1", "r2", RunStatus.FAILED, at(3), "llm_timeout", "slow", usage=ev.Usage(7, 3, 10)
    )
    await store.begin_run("s1", "r3", at(4), create=False)
    await store.finish_run("s1", "r3", RunStatus.SUCCEEDED, at(5))  # the LLM said nothing

    r1, r2, r3 = await store.list_runs("s1")
    assert (r1.input_tokens, r1.output_tokens, r1.cached_tokens) == (100, 20, 64)
    assert (r2.input_tokens, r2.output_tokens, r2.cached_tokens) == (7, 3, 0)
    assert (r3.input_tokens, r3.output_tokens) == (0, 0)
    assert (await store.find_run("r1")).input_tokens == 100
    session = await store.get_session("s1")
    assert (session.input_tokens, session.output_tokens, session.cached_tokens) == (107, 23, 64)
    listed, _ = await store.list_sessions(0, 0)
    assert listed[0].output_tokens == 23


async def test_a_running_runs_usage_is_noted_on_the_run_and_summed_at_its_end(
    store: SessionStore,
) -> None:
    """A checkpoint after an LLM round (``note_usage``): an engine that resumes the run
    counts on from it; the session's totals grow once, at the end."""
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.note_usage("s1", "r1", ev.Usage(40, 4, 44, cached_tokens=8))
    run = await store.get_run("s1", "r1")
    assert (run.input_tokens, run.output_tokens, run.cached_tokens) == (40, 4, 8)
    assert (await store.get_session("s1")).input_tokens == 0
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1), usage=ev.Usage(90, 9, 99))
    with pytest.raises(InvalidInput):  # ended: refused, as every write of a run not held
        await store.note_usage("s1", "r1", ev.Usage(1, 1, 2))
    run = await store.get_run("s1", "r1")
    assert (run.input_tokens, run.output_tokens) == (90, 9)
    assert (await store.get_session("s1")).input_tokens == 90


async def test_a_run_finished_twice_counts_its_usage_once(store: SessionStore) -> None:
    await store.begin_run("s1", "r1", at(0), create=True)
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, at(1), usage=ev.Usage(5, 5, 10))
    await store.finish_run("s1", "r1", RunStatus.FAILED, at(2), usage=ev.Usage(5, 5, 10))
    assert (await store.get_session("s1")).input_tokens == 5


async def test_tokens_are_counted_per_principal_per_day(store: SessionStore) -> None:
    monday, tuesday = date(2026, 3, 2), date(2026, 3, 3)
    assert await store.tokens_used("ann", monday) == 0
    assert await store.add_tokens("ann", monday, 10) == 10
    assert await store.add_tokens("ann", monday, 5) == 15
    assert await store.add_tokens("bob", monday, 1) == 1
    assert await store.add_tokens("ann", tuesday, 2) == 2
    assert (await store.tokens_used("ann", monday), await store.tokens_used("ann", tuesday)) == (
        15,
        2,
    )
    # Concurrent counts all land.
    await asyncio.gather(*(store.add_tokens("bob", monday, 1) for _ in range(20)))
    assert await store.tokens_used("bob", monday) == 21
    with pytest.raises(InvalidInput):
        await store.add_tokens("ann", monday, -1)
    # Days long past are dropped as a new day starts.
    await store.add_tokens("ann", date(2026, 3, 9), 1)
    assert await store.tokens_used("ann", monday) == 0
