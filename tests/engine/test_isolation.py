"""A hostile second principal against the engine: every RPC and field that takes an id.

Bob knows (or guesses) alice's session, run and message ids and tries to read, change,
follow or interrupt them, or to learn that they exist. Each answer must be the one an
unknown id gets. With several replicas on one store, a follower of a deleted session must
never be handed the events of whoever creates a session with the same id next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.build import build_model
from engine_service.core import events as ev
from engine_service.core.caller import Caller
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import SessionNotFound
from engine_service.core.models import Message, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import SessionStore
from engine_service.stores import MemorySessionStore
from engine_service.stores.postgres import PostgresSessionStore
from tests.engine.auth_helpers import TOKENS, TOKENS_ENV, as_, bearer, outcome, rpc_error
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kinds,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI

ALICE, BOB, OPS = Caller("alice"), Caller("bob"), Caller("ops", admin=True)


def _env(llm: FakeOpenAI, **env: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_LLM_MAX_RETRIES": "0",
        "AGENTIK_TOKENS": TOKENS_ENV,
        "AGENTIK_ADMINS": "ops",
        **env,
    }


@pytest.fixture(params=["memory", "sqlite"])
async def engine(
    llm: FakeOpenAI, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Harness]:
    store = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'iso.db'}"
    async with running_engine(engine_settings(**_env(llm, AGENTIK_STORE=store))) as running:
        yield running


async def _run(
    h: Harness,
    who: str,
    thread_id: str,
    words: str = "hello",
    *,
    run_id: str = "",
    message_id: str = "",
) -> list[pb.Event]:
    request = pb.RunRequest(
        session_id=thread_id,
        run_id=run_id,
        create_session=True,
        messages=[user(words, message_id)],
    )
    events = await collect(h.stub.Run(request, metadata=as_(who)))
    assert kinds(events)[-1] == "run_finished", kinds(events)
    return events


async def _same_refusal(h: Harness, theirs: object, unknown: object, *ids: str) -> None:
    """Both calls fail alike: one code, one message once the ids are masked."""
    mine = await rpc_error(theirs)  # type: ignore[arg-type]
    other = await rpc_error(unknown)  # type: ignore[arg-type]
    assert mine.code() == other.code(), (mine.details(), other.details())
    masked = [str(e.details()) for e in (mine, other)]
    for index, value in enumerate(masked):
        for id_ in ids:
            value = value.replace(id_, "<id>")
        masked[index] = value
    assert masked[0] == masked[1]


# -- fields that point into another principal's session ---------------------------------


async def test_run_ids_and_message_ids_of_alices_are_unknown_inside_bobs_session(
    engine: Harness,
) -> None:
    alice_run = (await _run(engine, "alice", "sa", "alice secret", message_id="m-alice"))[0].run_id
    await _run(engine, "bob", "sb", "bob here")
    stub = engine.stub

    # ListMessages with alice's run id, in bob's own session.
    await _same_refusal(
        engine,
        stub.ListMessages(
            pb.ListMessagesRequest(session_id="sb", run_id=alice_run), metadata=as_("bob")
        ),
        stub.ListMessages(
            pb.ListMessagesRequest(session_id="sb", run_id="r-none"), metadata=as_("bob")
        ),
        alice_run,
        "r-none",
    )
    # ... and with alice's message id as the page's start.
    await _same_refusal(
        engine,
        stub.ListMessages(
            pb.ListMessagesRequest(session_id="sb", after_message_id="m-alice"), metadata=as_("bob")
        ),
        stub.ListMessages(
            pb.ListMessagesRequest(session_id="sb", after_message_id="m-none"), metadata=as_("bob")
        ),
        "m-alice",
        "m-none",
    )
    # GetRun with bob's session and alice's run; and with alice's session and her run.
    await _same_refusal(
        engine,
        stub.GetRun(pb.GetRunRequest(session_id="sb", run_id=alice_run), metadata=as_("bob")),
        stub.GetRun(pb.GetRunRequest(session_id="sb", run_id="r-none"), metadata=as_("bob")),
        alice_run,
        "r-none",
    )
    await _same_refusal(
        engine,
        stub.GetRun(pb.GetRunRequest(session_id="sa", run_id=alice_run), metadata=as_("bob")),
        stub.GetRun(pb.GetRunRequest(session_id="s-none", run_id="r-none"), metadata=as_("bob")),
        alice_run,
        "r-none",
        "sa",
        "s-none",
    )
    # Subscribe far ahead, behind, or at zero: all not found.
    for after in (0, 1, 10**12):
        await _same_refusal(
            engine,
            collect(
                stub.Subscribe(
                    pb.SubscribeRequest(session_id="sa", after_seq=after), metadata=as_("bob")
                )
            ),
            collect(
                stub.Subscribe(
                    pb.SubscribeRequest(session_id="s-none", after_seq=after), metadata=as_("bob")
                )
            ),
            "sa",
            "s-none",
        )
    # Interrupt of alice's run id on bob's own (idle) session: nothing to stop.
    reply = await stub.Interrupt(
        pb.InterruptRequest(session_id="sb", run_id=alice_run), metadata=as_("bob")
    )
    assert not reply.interrupted and reply.run_id == ""


async def test_bob_may_reuse_alices_message_ids_but_not_her_run_id(
    engine: Harness,
) -> None:
    await _run(engine, "alice", "sa", "alice secret", run_id="r-same", message_id="m-same")
    # Run ids are unique on the server (A2A looks tasks up by them): Bob's reuse is refused,
    # and the refusal names neither alice nor her conversation.
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _run(engine, "bob", "sb", "bob words", run_id="r-same", message_id="m-same")
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    details = str(caught.value.details())
    assert "r-same" in details and "sa" not in details.split() and "alice" not in details
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await engine.stub.GetSession(pb.GetSessionRequest(session_id="sb"), metadata=as_("bob"))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # nothing made for the refusal
    # Message ids are per conversation: Bob's own run may use alice's.
    events = await _run(engine, "bob", "sb", "bob words", run_id="r-bob", message_id="m-same")
    assert {e.session_id for e in events} == {"sb"}
    with pytest.raises(grpc.aio.AioRpcError) as hidden:
        await engine.stub.GetRun(pb.GetRunRequest(run_id="r-same"), metadata=as_("bob"))
    assert hidden.value.code() == grpc.StatusCode.NOT_FOUND
    run = await engine.stub.GetRun(pb.GetRunRequest(run_id="r-same"), metadata=as_("alice"))
    assert run.session_id == "sa"
    page = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="sb", run_id="r-bob"), metadata=as_("bob")
    )
    assert next(m.content[0].text.text for m in page.messages if m.content) == "bob words"
    listed = await engine.stub.ListRuns(pb.ListRunsRequest(), metadata=as_("bob"))
    assert [(r.id, r.session_id) for r in listed.runs] == [("r-bob", "sb")]
    everyone = await engine.stub.ListRuns(pb.ListRunsRequest(), metadata=as_("ops"))
    assert {(r.id, r.session_id) for r in everyone.runs} == {("r-same", "sa"), ("r-bob", "sb")}


@pytest.mark.parametrize("reconcile", [pb.RECONCILE_MODE_APPEND, pb.RECONCILE_MODE_REPLACE])
@pytest.mark.parametrize("with_messages", [True, False])
async def test_bobs_run_on_alices_thread_is_the_refusal_of_an_unknown_thread(
    engine: Harness, reconcile: pb.ReconcileMode.ValueType, with_messages: bool
) -> None:
    await _run(engine, "alice", "sa", "alice secret", message_id="m-alice")
    before = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="sa"), metadata=as_("alice")
    )
    messages = [user("bob", "m-alice")] if with_messages else []
    for create in (True, False):

        def attempt(thread: str, create: bool = create) -> object:
            return engine.stub.Run(
                pb.RunRequest(
                    session_id=thread,
                    create_session=create,
                    reconcile=reconcile,
                    messages=messages,
                    state=None,
                ),
                metadata=as_("bob"),
            )

        theirs, error = await outcome(attempt("sa"))
        assert not theirs and error is not None
        if create and with_messages:
            # An unknown id would be created: the refusal is the documented "id is taken".
            assert error.code() == grpc.StatusCode.NOT_FOUND
            continue
        await _same_refusal(
            engine, collect(attempt("sa")), collect(attempt("s-none")), "sa", "s-none"
        )
    after = await engine.stub.ListMessages(
        pb.ListMessagesRequest(session_id="sa"), metadata=as_("alice")
    )
    assert after == before
    session = await engine.stub.GetSession(
        pb.GetSessionRequest(session_id="sa"), metadata=as_("alice")
    )
    assert session.owner == "alice" and session.active_run_id == ""


async def test_rename_and_delete_of_alices_session_are_not_found_and_change_nothing(
    engine: Harness,
) -> None:
    await engine.stub.CreateSession(
        pb.CreateSessionRequest(session_id="sa", title="alice's"), metadata=as_("alice")
    )
    await _same_refusal(
        engine,
        engine.stub.RenameSession(
            pb.RenameSessionRequest(session_id="sa", title="x"), metadata=as_("bob")
        ),
        engine.stub.RenameSession(
            pb.RenameSessionRequest(session_id="s-none", title="x"), metadata=as_("bob")
        ),
        "sa",
        "s-none",
    )
    await _same_refusal(
        engine,
        engine.stub.DeleteSession(pb.DeleteSessionRequest(session_id="sa"), metadata=as_("bob")),
        engine.stub.DeleteSession(
            pb.DeleteSessionRequest(session_id="s-none"), metadata=as_("bob")
        ),
        "sa",
        "s-none",
    )
    session = await engine.stub.GetSession(
        pb.GetSessionRequest(session_id="sa"), metadata=as_("alice")
    )
    assert session.title == "alice's"


# -- credentials ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        f"bearer {TOKENS['bob']}",
        f"BEARER {TOKENS['bob']}",
        f"Bearer   {TOKENS['bob']}   ",
        f"  Bearer {TOKENS['bob']}",
    ],
    ids=["lowercase", "uppercase", "spaces-around-token", "leading-space"],
)
async def test_scheme_case_and_surrounding_spaces_name_the_same_principal(
    engine: Harness, value: str
) -> None:
    await engine.stub.CreateSession(pb.CreateSessionRequest(session_id="sb"), metadata=as_("bob"))
    listed = await engine.stub.ListSessions(
        pb.ListSessionsRequest(), metadata=(("authorization", value),)
    )
    assert [s.id for s in listed.sessions] == ["sb"]


@pytest.mark.parametrize(
    "value",
    [
        f"Bearer {TOKENS['bob']} {TOKENS['alice']}",
        f"Bearer {TOKENS['bob']},Bearer {TOKENS['alice']}",
        "Bearer " + "x" * 7000,
        f"Bearer {TOKENS['bob'][:-1]}",
        f"Bearer {TOKENS['bob'].upper()}",
    ],
    ids=["two-tokens", "comma-joined", "very-long", "prefix", "case-changed"],
)
async def test_odd_authorization_values_are_unauthenticated(engine: Harness, value: str) -> None:
    error = await rpc_error(
        engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=(("authorization", value),))
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_two_authorization_entries_use_the_first_only(engine: Harness) -> None:
    await engine.stub.CreateSession(pb.CreateSessionRequest(session_id="sa"), metadata=as_("alice"))
    both = (*bearer(TOKENS["bob"]), *bearer(TOKENS["alice"]))
    listed = await engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=both)
    assert not listed.sessions and listed.total == 0  # bob's view, not alice's
    first_bad = (("authorization", "Bearer nope"), *bearer(TOKENS["alice"]))
    error = await rpc_error(engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=first_bad))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_unicode_in_a_binary_authorization_entry_is_not_credentials(engine: Harness) -> None:
    token = f"Bearer {TOKENS['alice']}".encode()
    error = await rpc_error(
        engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=(("authorization-bin", token),))
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    unicode = "Bearer ålice-é".encode()
    error = await rpc_error(
        engine.stub.ListSessions(
            pb.ListSessionsRequest(), metadata=(("authorization-bin", unicode),)
        )
    )
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED


# -- several replicas: a deleted session's follower and the id's next owner ---------------


def _message(text: str) -> Message:
    from engine_service.core.models import Role

    return Message(id="", role=Role.USER, content=[TextPart(text)])


@contextlib.asynccontextmanager
async def _two_replicas(llm: FakeOpenAI, pg_url: str) -> AsyncIterator[tuple[Engine, Engine]]:
    """Two engines on one store: a shared memory store, or one PostgreSQL pool each."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key", AGENTIK_LLM_MAX_RETRIES="0"
    )
    shared = MemorySessionStore(shared=True)
    stores: list[SessionStore] = (
        [PostgresSessionStore(pg_url) for _ in range(2)] if pg_url else [shared, shared]
    )
    engines = [
        Engine(store, build_model(settings), ToolRegistry(), EngineLimits(event_retention=0))
        for store in stores
    ]
    for engine in engines:
        await engine.start()
    try:
        yield engines[0], engines[1]
    finally:
        for engine in engines:
            await engine.shutdown(0)
        for store in stores if pg_url else [shared]:
            await store.close()


async def _finish(engine: Engine, caller: Caller, thread_id: str, text: str) -> list[ev.Event]:
    handle = await engine.start_run(
        caller, RunInput(session_id=thread_id, create_session=True, messages=[_message(text)])
    )
    return [e async for e in engine.run_events(handle)]


@pytest.mark.parametrize("store", ["memory", "postgres"])
@pytest.mark.parametrize("bob_on", ["a", "b", "ba"])
async def test_a_follower_of_a_deleted_session_never_sees_the_next_owner_of_its_id(
    llm: FakeOpenAI, bob_on: str, store: str, request: pytest.FixtureRequest
) -> None:
    pg_url = str(request.getfixturevalue("pg_url")) if store == "postgres" else ""
    async with _two_replicas(llm, pg_url) as (a, b):
        alice_run = (await _finish(a, ALICE, "s", "alice"))[0].run_id
        session = await a.get_session(ALICE, "s")
        seen: list[ev.Event] = []
        ended = asyncio.Event()

        async def follow() -> None:
            try:
                async for event in a.subscribe(ALICE, "s", session.last_seq):
                    seen.append(event)
            except SessionNotFound:
                pass
            finally:
                ended.set()

        follower = asyncio.create_task(follow())
        await asyncio.sleep(0.05)
        await b.delete_session(ALICE, "s")  # on the other replica: a is not told directly
        for index in range(4):  # more events than alice's session had
            bob_engine = a if bob_on[min(index, len(bob_on) - 1)] == "a" else b
            await _finish(bob_engine, BOB, "s", f"bob secret {index} [[chunks:4]]")
        assert (await bob_engine.get_session(BOB, "s")).last_seq > session.last_seq
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.5):
                await ended.wait()
        follower.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follower
        # (Her own run's last events may still be on their way to the store: she may see them.)
        theirs = [e for e in seen if e.run_id != alice_run]
        assert not theirs, f"alice saw {len(theirs)} events of bob's session"
        assert ended.is_set(), "the follower of the deleted session did not end"
