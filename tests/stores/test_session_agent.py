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


async def test_listings_filter_by_agent(store: SessionStore) -> None:
    """``agents``: only sessions (and their runs) whose stored agent is one of these; the
    owner filter still holds, and one session's runs are empty when it is another's."""
    await store.begin_run("s1", "r1", at(0), create=True, owner="ann", agent="support")
    await store.begin_run("s2", "r2", at(1), create=True, owner="ann", agent="researcher")
    await store.begin_run("s3", "r3", at(2), create=True, owner="ann")  # before agents: ''
    await store.begin_run("s4", "r4", at(3), create=True, owner="bob", agent="support")

    async def sessions(agents: list[str] | None, owner: str | None = "ann") -> list[str]:
        page, total = await store.list_sessions(0, 10, owner=owner, agents=agents)
        assert total == len(page)
        return sorted(s.id for s in page)

    async def runs(
        agents: list[str] | None, owner: str | None = "ann", session_id: str = ""
    ) -> list[str]:
        page, total = await store.page_runs(session_id, 0, 10, owner=owner, agents=agents)
        assert total == len(page)
        return sorted(r.id for r in page)

    assert await sessions(["support"]) == ["s1"]
    assert await sessions(["support"], owner=None) == ["s1", "s4"]
    assert await sessions(["agentik", ""]) == ["s3"]
    assert await sessions(None) == ["s1", "s2", "s3"]
    assert await sessions([]) == []
    assert await runs(["support"]) == ["r1"]
    assert await runs(["support"], owner=None) == ["r1", "r4"]
    assert await runs(["researcher", ""]) == ["r2", "r3"]
    assert await runs(None) == ["r1", "r2", "r3"]
    assert await runs(["support"], session_id="s1") == ["r1"]
    assert await runs(["researcher"], session_id="s1") == []
