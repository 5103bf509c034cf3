"""Bearer tokens over real gRPC: who may call, who sees which session, per-caller limits.

Alice, bob and the admin ops each have a token. A session belongs to whoever made it:
to anyone else (not an admin) it does not exist, with the very answer an unknown id gets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.auth_helpers import (
    TOKENS,
    TOKENS_ENV,
    Metadata,
    as_,
    bearer,
    every_rpc,
    outcome,
    rpc_error,
    trailers,
)
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI

SLOW = "[[slow:0.08]] one two three four five six seven eight"
"""About 0.7 s of text from the fake LLM: a run that is live for a while, then ends."""


def _settings(llm: FakeOpenAI, **env: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_LLM_MAX_RETRIES": "0",
        "AGENTIK_TOKENS": TOKENS_ENV,
        "AGENTIK_ADMINS": "ops",
        **env,
    }


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def engine(
    llm: FakeOpenAI, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Harness]:
    """The engine with alice's, bob's and ops' tokens, on each store."""
    if request.param == "postgres":
        store = str(request.getfixturevalue("pg_url"))
    elif request.param == "sqlite":
        store = f"sqlite:///{tmp_path / 'auth.db'}"
    else:
        store = "memory://"
    async with running_engine(engine_settings(**_settings(llm, AGENTIK_STORE=store))) as running:
        yield running


async def _run(
    h: Harness, who: str, thread_id: str, words: str = "hello", *, create: bool = True
) -> list[pb.Event]:
    request = pb.RunRequest(session_id=thread_id, create_session=create, messages=[user(words)])
    events = await collect(h.stub.Run(request, metadata=as_(who)))
    assert kinds(events)[-1] == "run_finished", kinds(events)
    return events


async def _started(h: Harness, who: str, thread_id: str) -> tuple[object, list[pb.Event]]:
    """A slow run by ``who``, read up to its first text chunk."""
    call = h.stub.Run(
        pb.RunRequest(session_id=thread_id, create_session=True, messages=[user(SLOW)]),
        metadata=as_(who),
    )
    seen = [await next_event(call)]
    while kind(seen[-1]) != "text_message_content":
        seen.append(await next_event(call))
    return call, seen


# -- authentication -------------------------------------------------------------------


def test_the_table_names_every_rpc_of_the_service() -> None:
    service = pb.DESCRIPTOR.services_by_name["AgentEngine"]
    assert set(every_rpc("s", "r")) == {m.name for m in service.methods}


@pytest.mark.parametrize(
    ("metadata", "fix"),
    [
        ((), "Authorization: Bearer <token>"),
        (bearer("not-a-token-Zq81"), "bearer token is not valid"),
        ((("authorization", "Basic not-a-token-Zq81"),), "'Bearer <token>'"),
        ((("authorization", "Bearer"),), "'Bearer <token>'"),
        (bearer(TOKENS["alice"] + "x"), "bearer token is not valid"),
    ],
    ids=["none", "wrong", "basic", "empty-bearer", "alice-plus-one"],
)
async def test_every_rpc_without_valid_credentials_is_unauthenticated(
    engine: Harness, metadata: Metadata, fix: str
) -> None:
    # A session of alice's, so a refusal cannot be a not-found in disguise.
    await engine.stub.CreateSession(pb.CreateSessionRequest(session_id="a1"), metadata=as_("alice"))
    for name, call in every_rpc("a1", "r1").items():
        error = await rpc_error(call(engine.stub, metadata))
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (name, error.details())
        details = str(error.details())
        assert fix in details, (name, details)
        assert "not-a-token-Zq81" not in details and TOKENS["alice"] not in details
        assert trailers(error)["agentik-error"] == "unauthenticated", name
    # Nothing above changed alice's session.
    session = await engine.stub.GetSession(
        pb.GetSessionRequest(session_id="a1"), metadata=as_("alice")
    )
    assert session.title == "" and session.message_count == 0


async def test_health_check_needs_no_token(engine: Harness) -> None:
    health: Any = health_pb2_grpc.HealthStub(engine.channel)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_needs_no_token(engine: Harness) -> None:
    stub_type: Any = reflection_pb2_grpc.ServerReflectionStub  # typed for sync channels only
    reflection = stub_type(engine.channel)
    call = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    reply = await call.read()
    names = {s.name for s in reply.list_services_response.service}
    assert "agentik.engine.v1.AgentEngine" in names
    call.cancel()


# -- ownership ------------------------------------------------------------------------


async def test_a_session_belongs_to_its_creator(engine: Harness) -> None:
    made = await engine.stub.CreateSession(
        pb.CreateSessionRequest(session_id="a1", title="mine"), metadata=as_("alice")
    )
    assert made.owner == "alice"
    await _run(engine, "bob", "b1")
    got = await engine.stub.GetSession(pb.GetSessionRequest(session_id="b1"), metadata=as_("bob"))
    assert got.owner == "bob"
    listed = await engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("ops"))
    assert {(s.id, s.owner) for s in listed.sessions} == {("a1", "alice"), ("b1", "bob")}


async def test_bob_gets_the_not_found_of_an_unknown_id_on_each_of_alices_ids(
    engine: Harness,
) -> None:
    await engine.stub.CreateSession(
        pb.CreateSessionRequest(session_id="sess-alice", title="alice's"), metadata=as_("alice")
    )
    first = await _run(engine, "alice", "sess-alice", "secret plans", create=False)
    run_id = first[0].run_id
    before = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="sess-alice"), metadata=as_("alice")
    )

    calls = every_rpc("sess-alice", run_id)
    calls["GetRun(session)"] = lambda s, md: s.GetRun(
        pb.GetRunRequest(run_id=run_id, session_id="sess-alice"), metadata=md
    )
    calls["ListRuns(session)"] = lambda s, md: s.ListRuns(
        pb.ListRunsRequest(session_id="sess-alice"), metadata=md
    )
    calls["Run(no create)"] = lambda s, md: collect(
        s.Run(pb.RunRequest(session_id="sess-alice", messages=[user("x")]), metadata=md)
    )
    calls["Interrupt(run)"] = lambda s, md: s.Interrupt(
        pb.InterruptRequest(session_id="sess-alice", run_id=run_id), metadata=md
    )
    unknown = every_rpc("sess-nobody", "run-nobody")
    unknown["GetRun(session)"] = lambda s, md: s.GetRun(
        pb.GetRunRequest(run_id="run-nobody", session_id="sess-nobody"), metadata=md
    )
    unknown["ListRuns(session)"] = lambda s, md: s.ListRuns(
        pb.ListRunsRequest(session_id="sess-nobody"), metadata=md
    )
    unknown["Run(no create)"] = lambda s, md: collect(
        s.Run(pb.RunRequest(session_id="sess-nobody", messages=[user("x")]), metadata=md)
    )
    unknown["Interrupt(run)"] = lambda s, md: s.Interrupt(
        pb.InterruptRequest(session_id="sess-nobody", run_id="run-nobody"), metadata=md
    )
    calls["ListRunChains(session)"] = lambda s, md: s.ListRunChains(
        pb.ListRunChainsRequest(session_id="sess-alice", last_messages=5), metadata=md
    )
    unknown["ListRunChains(session)"] = lambda s, md: s.ListRunChains(
        pb.ListRunChainsRequest(session_id="sess-nobody"), metadata=md
    )
    # Not about one id, or about no conversation at all (Authenticate, ListFailedWebhooks,
    # ListAgents, GetAgent).
    for name in (
        "CreateSession",
        "ListSessions",
        "ListRuns",
        "ListRunChains",
        "Authenticate",
        "ListFailedWebhooks",
        "ListAgents",
        "GetAgent",
    ):
        del calls[name]
        del unknown[name]
    # Bob's Run with create_session on an unknown id would create it: compare it without.
    del unknown["Run"]

    for name, call in calls.items():
        error = await rpc_error(call(engine.stub, as_("bob")))
        assert error.code() == grpc.StatusCode.NOT_FOUND, (name, error.details())
        assert trailers(error)["agentik-error"] == "not_found", name
        if name in unknown:
            other = await rpc_error(unknown[name](engine.stub, as_("bob")))
            assert other.code() == grpc.StatusCode.NOT_FOUND, name
            shown = str(error.details()).replace(run_id, "<id>").replace("sess-alice", "<id>")
            expected = str(other.details()).replace("run-nobody", "<id>")
            assert shown == expected.replace("sess-nobody", "<id>"), name
        else:
            assert str(error.details()) == "session 'sess-alice' not found", name

    # Nothing of alice's changed.
    after = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="sess-alice"), metadata=as_("alice")
    )
    assert after == before
    session = await engine.stub.GetSession(
        pb.GetSessionRequest(session_id="sess-alice"), metadata=as_("alice")
    )
    assert session.title == "alice's" and session.owner == "alice"
    runs = await engine.stub.ListRuns(
        pb.ListRunsRequest(session_id="sess-alice"), metadata=as_("alice")
    )
    assert [r.id for r in runs.runs] == [run_id] and runs.total == 1


async def test_lists_and_totals_hold_only_the_callers_own(engine: Harness) -> None:
    for index in range(3):
        await _run(engine, "alice", f"a{index}")
    await engine.stub.CreateSession(
        pb.CreateSessionRequest(session_id="a-empty"), metadata=as_("alice")
    )
    await _run(engine, "bob", "b0")

    bob = await engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("bob"))
    assert [s.id for s in bob.sessions] == ["b0"] and bob.total == 1
    bob_page = await engine.stub.ListSessions(
        pb.ListSessionsRequest(offset=1, limit=10), metadata=as_("bob")
    )
    assert not bob_page.sessions and bob_page.total == 1
    bob_runs = await engine.stub.ListRuns(pb.ListRunsRequest(), metadata=as_("bob"))
    assert {r.session_id for r in bob_runs.runs} == {"b0"} and bob_runs.total == 1
    bob_chains = await engine.stub.ListRunChains(
        pb.ListRunChainsRequest(last_messages=10), metadata=as_("bob")
    )
    assert [c.runs[0].session_id for c in bob_chains.chains] == ["b0"] and bob_chains.total == 1
    assert {m.run_id for m in bob_chains.chains[0].messages} == {bob_chains.chains[0].runs[0].id}

    alice = await engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("alice"))
    assert {s.id for s in alice.sessions} == {"a0", "a1", "a2", "a-empty"} and alice.total == 4
    alice_runs = await engine.stub.ListRuns(pb.ListRunsRequest(), metadata=as_("alice"))
    assert {r.session_id for r in alice_runs.runs} == {"a0", "a1", "a2"}
    assert alice_runs.total == 3

    ops = await engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("ops"))
    assert ops.total == 5 and len(ops.sessions) == 5
    ops_runs = await engine.stub.ListRuns(pb.ListRunsRequest(), metadata=as_("ops"))
    assert ops_runs.total == 4


async def test_bobs_run_with_create_session_on_alices_thread_leaves_her_history_alone(
    engine: Harness,
) -> None:
    await _run(engine, "alice", "shared", "alice speaks")
    before = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="shared"), metadata=as_("alice")
    )
    request = pb.RunRequest(session_id="shared", create_session=True, messages=[user("bob here")])
    events, error = await outcome(engine.stub.Run(request, metadata=as_("bob")))
    assert not events
    assert error is not None and error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == "session 'shared' not found"

    after = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="shared"), metadata=as_("alice")
    )
    assert after == before
    runs = await engine.stub.ListRuns(pb.ListRunsRequest(session_id="shared"), metadata=as_("ops"))
    assert runs.total == 1
    session = await engine.stub.GetSession(
        pb.GetSessionRequest(session_id="shared"), metadata=as_("ops")
    )
    assert session.owner == "alice" and session.active_run_id == ""


async def test_admin_reads_everyones_sessions_and_runs(engine: Harness) -> None:
    alice_run = (await _run(engine, "alice", "a1", "from alice"))[0].run_id
    await _run(engine, "bob", "b1", "from bob")
    messages = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="a1"), metadata=as_("ops")
    )
    assert messages.messages[0].content[0].text.text == "from alice"
    run = await engine.stub.GetRun(pb.GetRunRequest(run_id=alice_run), metadata=as_("ops"))
    assert run.session_id == "a1" and run.status == pb.RUN_STATUS_SUCCEEDED
    renamed = await engine.stub.RenameSession(
        pb.RenameSessionRequest(session_id="b1", title="by ops"), metadata=as_("ops")
    )
    assert renamed.title == "by ops" and renamed.owner == "bob"


# -- live runs ------------------------------------------------------------------------


async def test_bob_cannot_interrupt_alices_live_run_which_finishes(engine: Harness) -> None:
    call, seen = await _started(engine, "alice", "live")
    run_id = seen[0].run_id
    for request in (
        pb.InterruptRequest(session_id="live"),
        pb.InterruptRequest(session_id="live", run_id=run_id),
    ):
        error = await rpc_error(engine.stub.Interrupt(request, metadata=as_("bob")))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert error.details() == "session 'live' not found"
    # Not FAILED_PRECONDITION (busy): that would tell bob the thread exists.
    intrude = pb.RunRequest(session_id="live", create_session=True, messages=[user("bob")])
    events, refused = await outcome(engine.stub.Run(intrude, metadata=as_("bob")))
    assert not events and refused is not None
    assert refused.code() == grpc.StatusCode.NOT_FOUND, refused.details()
    rest = await collect(call)
    assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert "eight" in text_of(seen + rest)


@pytest.mark.parametrize("who", ["alice", "ops"])
async def test_the_owner_and_an_admin_can_interrupt_a_live_run(engine: Harness, who: str) -> None:
    call, seen = await _started(engine, "alice", "live")
    reply = await engine.stub.Interrupt(pb.InterruptRequest(session_id="live"), metadata=as_(who))
    assert reply.interrupted and reply.run_id == seen[0].run_id
    rest = await collect(call)
    assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED


async def test_only_the_owner_follows_a_live_session(engine: Harness) -> None:
    call, seen = await _started(engine, "alice", "live")
    error = await rpc_error(
        collect(engine.stub.Subscribe(pb.SubscribeRequest(session_id="live"), metadata=as_("bob")))
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    followed = await collect(
        engine.stub.Subscribe(
            pb.SubscribeRequest(session_id="live", until_idle=True), metadata=as_("alice")
        )
    )
    rest = await collect(call)
    assert kinds(followed)[0] == "run_started" and kinds(followed)[-1] == "run_finished"
    assert text_of(followed) == text_of(seen + rest)


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_racing_creators_get_one_owner_per_thread_and_see_only_their_own_events(
    llm: FakeOpenAI, tmp_path: object, store: str
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path}/race.db"
    settings = engine_settings(**_settings(llm, AGENTIK_STORE=url))
    async with running_engine(settings) as h:

        async def attempt(who: str, thread_id: str) -> tuple[list[pb.Event], object]:
            request = pb.RunRequest(
                session_id=thread_id, create_session=True, messages=[user(f"{who} {thread_id}")]
            )
            return await outcome(h.stub.Run(request, metadata=as_(who)))

        threads = [f"race-{index}" for index in range(20)]
        results = await asyncio.gather(
            *(attempt(who, t) for t in threads for who in ("alice", "bob"))
        )
        for index, thread_id in enumerate(threads):
            by = {"alice": results[2 * index], "bob": results[2 * index + 1]}
            winners = [who for who, (_, error) in by.items() if error is None]
            assert len(winners) == 1, (thread_id, by)
            winner = winners[0]
            loser = "bob" if winner == "alice" else "alice"
            events, error = by[loser]
            assert isinstance(error, grpc.aio.AioRpcError)
            assert error.code() in (
                grpc.StatusCode.NOT_FOUND,
                grpc.StatusCode.FAILED_PRECONDITION,
            ), error.details()
            assert not events, f"{loser} saw events of {winner}'s run"
            won = by[winner][0]
            assert kinds(won)[-1] == "run_finished" and len({e.run_id for e in won}) == 1
            assert text_of(won) == f"Echo: {winner} {thread_id}"
            session = await h.stub.GetSession(
                pb.GetSessionRequest(session_id=thread_id), metadata=as_("ops")
            )
            assert session.owner == winner
            messages = await h.stub.ListMessages(
                pb.ListMessagesRequest(session_id=thread_id), metadata=as_(winner)
            )
            first = messages.messages[0].content[0].text.text
            assert first == f"{winner} {thread_id}"
            assert len(messages.messages) == 2


# -- limits ---------------------------------------------------------------------------


async def test_requests_per_minute_limit_each_principal_on_its_own(llm: FakeOpenAI) -> None:
    settings = engine_settings(**_settings(llm, AGENTIK_REQUESTS_PER_MINUTE="5"))
    async with running_engine(settings) as h:
        for _ in range(5):
            await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("alice"))
        error = await rpc_error(
            h.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("alice"))
        )
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        found = trailers(error)
        assert found["agentik-error"] == "rate_limited"
        assert found["retry-after"].isdigit() and int(found["retry-after"]) >= 1
        # Any RPC counts, and bob has his own allowance.
        error = await rpc_error(
            h.stub.GetSession(pb.GetSessionRequest(session_id="x"), metadata=as_("alice"))
        )
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        for _ in range(5):
            await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("bob"))


async def test_authenticate_names_the_caller_and_counts_no_request(llm: FakeOpenAI) -> None:
    settings = engine_settings(**_settings(llm, AGENTIK_REQUESTS_PER_MINUTE="2"))
    async with running_engine(settings) as h:
        for _ in range(5):
            found = await h.stub.Authenticate(pb.AuthenticateRequest(), metadata=as_("alice"))
            assert found.principal == "alice"
        for _ in range(2):  # alice's whole allowance is still hers
            await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("alice"))


async def test_runs_per_caller_limit_refuses_a_second_concurrent_run(llm: FakeOpenAI) -> None:
    settings = engine_settings(**_settings(llm, AGENTIK_MAX_RUNS_PER_CALLER="1"))
    async with running_engine(settings) as h:
        call, _ = await _started(h, "alice", "first")
        second = pb.RunRequest(session_id="second", create_session=True, messages=[user("x")])
        events, error = await outcome(h.stub.Run(second, metadata=as_("alice")))
        assert not events and error is not None
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert trailers(error)["agentik-error"] == "rate_limited"
        assert int(trailers(error)["retry-after"]) >= 1
        await _run(h, "bob", "bobs")  # bob is not held back by alice's run
        rest = await collect(call)
        assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        await _run(h, "alice", "second")  # hers ended: she may run again


async def test_by_default_one_principal_takes_only_its_share_of_the_run_slots(
    llm: FakeOpenAI,
) -> None:
    # max_runs_per_caller unset: a quarter of the engine's 4 slots is alice's 1.
    settings = engine_settings(**_settings(llm, AGENTIK_MAX_CONCURRENT_RUNS="4"))
    async with running_engine(settings) as h:
        call, _ = await _started(h, "alice", "first")
        second = pb.RunRequest(session_id="second", create_session=True, messages=[user("x")])
        events, error = await outcome(h.stub.Run(second, metadata=as_("alice")))
        assert not events and error is not None
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert trailers(error)["agentik-error"] == "rate_limited"
        await _run(h, "bob", "bobs")  # the other slots are left for the others
        rest = await collect(call)
        assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


# -- logs -----------------------------------------------------------------------------


async def test_no_token_reaches_the_log(engine: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-Tk-PzA0kk3Ld"
    await _run(engine, "alice", "a1")
    for metadata in (bearer(wrong), (("authorization", f"Basic {wrong}"),), as_("bob")):
        for call in every_rpc("a1", "r1").values():
            with contextlib.suppress(grpc.aio.AioRpcError):
                await call(engine.stub, metadata)
    assert caplog.records, "nothing was logged at all?"
    for record in caplog.records:
        shown = f"{record.getMessage()} {record.exc_text or ''} {record.stack_info or ''}"
        for token in (*TOKENS.values(), wrong):
            assert token not in shown, record
