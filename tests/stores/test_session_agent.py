"""A session's agent (issue 23), on every store: named at creation, by a run that creates
its session too, kept by a fork, listed with the session; '' for sessions made before."""

from __future__ import annotations

from engine_service.stores import SessionStore
from tests.stores.test_session_store import at, message


async def test_a_session_keeps_the_agent_it_was_created_with(store: SessionStore) -> None:
    made = await store.create_session("s1", "t", at(0), owner="ann", agent="researcher")
    assert made.agent == "researcher"
    assert (await store.get_session("s1")).agent == "researcher"
    await store.create_session("s0", "t", at(0), owner="ann")
    assert (await store.get_session("s0")).agent == ""
    listed = {s.id: s.agent for s in (await store.list_sessions(0, 10))[0]}
    assert listed == {"s1": "researcher", "s0": ""}


async def test_a_run_that_creates_its_session_stores_the_agent_and_not_otherwise(
    store: SessionStore,
) -> None:
    begun = await store.begin_run("s1", "r1", at(0), create=True, owner="ann", agent="support")
    assert begun.session.agent == "support"
    await store.create_session("s2", "", at(0), agent="researcher")
    again = await store.begin_run("s2", "r2", at(1), create=True, agent="support")
    assert again.session.agent == "researcher"  # it existed: its agent is kept


async def test_a_fork_belongs_to_the_agent_of_its_source(store: SessionStore) -> None:
    await store.create_session("s1", "t", at(0), owner="ann", agent="researcher")
    await store.append_messages("s1", [message("m1", "hi")])
    fork = await store.fork_session("s1", "m1", "f1", at(1), owner="ann")
    assert fork.agent == "researcher"
