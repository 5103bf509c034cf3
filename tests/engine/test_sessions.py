"""Session RPCs over real gRPC."""

from __future__ import annotations

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import Harness, collect, next_event, user


async def test_sessions_can_be_created_read_listed_renamed_and_deleted(harness: Harness) -> None:
    made = await harness.stub.CreateSession(pb.CreateSessionRequest(title="First"))
    assert made.id and made.title == "First" and made.message_count == 0
    assert made.create_time.seconds > 0
    named = await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="mine"))
    assert named.id == "mine"

    got = await harness.stub.GetSession(pb.GetSessionRequest(session_id=made.id))
    assert got == made

    renamed = await harness.stub.RenameSession(
        pb.RenameSessionRequest(session_id=made.id, title="Renamed")
    )
    assert renamed.title == "Renamed"
    assert renamed.update_time.ToNanoseconds() >= made.update_time.ToNanoseconds()

    page = await harness.stub.ListSessions(pb.ListSessionsRequest(offset=0, limit=1))
    assert page.total == 2
    assert [s.id for s in page.sessions] == [made.id]  # most recently updated first
    rest = await harness.stub.ListSessions(pb.ListSessionsRequest(offset=1, limit=10))
    assert [s.id for s in rest.sessions] == ["mine"]

    await harness.stub.DeleteSession(pb.DeleteSessionRequest(session_id=made.id))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.GetSession(pb.GetSessionRequest(session_id=made.id))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 1


async def test_a_taken_session_id_is_already_exists(harness: Harness) -> None:
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="dup"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="dup"))
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.GetSession(pb.GetSessionRequest(session_id="missing")),
        lambda s: s.RenameSession(pb.RenameSessionRequest(session_id="missing", title="x")),
        lambda s: s.DeleteSession(pb.DeleteSessionRequest(session_id="missing")),
        lambda s: s.ListMessages(pb.ListMessagesRequest(session_id="missing")),
    ],
)
async def test_session_rpcs_on_an_unknown_id_are_not_found(harness: Harness, call: object) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(harness.stub)  # type: ignore[operator]
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert "missing" in str(caught.value.details())


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda s: s.GetSession(pb.GetSessionRequest()), "session_id"),
        (lambda s: s.ListSessions(pb.ListSessionsRequest(offset=-1)), "offset"),
        (lambda s: s.ListSessions(pb.ListSessionsRequest(limit=100_000)), "limit"),
        (lambda s: s.CreateSession(pb.CreateSessionRequest(title="t" * 1000)), "title"),
        (lambda s: s.ListMessages(pb.ListMessagesRequest(session_id="m", limit=-5)), "limit"),
    ],
)
async def test_malformed_session_requests_are_invalid_argument_naming_the_field(
    harness: Harness, call: object, field: str
) -> None:
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="m"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(harness.stub)  # type: ignore[operator]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in str(caught.value.details())


async def test_list_messages_pages_after_a_message_id(harness: Harness) -> None:
    for text in ("a", "b", "c"):
        await collect(
            harness.stub.Run(
                pb.RunRequest(session_id="pg", create_session=True, messages=[user(text)])
            )
        )
    everything = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="pg"))).messages
    assert len(everything) == 6
    page = await harness.stub.ListMessages(
        pb.ListMessagesRequest(session_id="pg", after_message_id=everything[1].id, limit=2)
    )
    assert [m.id for m in page.messages] == [m.id for m in everything[2:4]]
    assert page.has_more
    last = await harness.stub.ListMessages(
        pb.ListMessagesRequest(session_id="pg", after_message_id=everything[3].id, limit=2)
    )
    assert not last.has_more
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.ListMessages(
            pb.ListMessagesRequest(session_id="pg", after_message_id="not-there")
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="pg"))
    assert session.message_count == 6


async def test_a_session_with_a_run_in_flight_cannot_be_deleted(harness: Harness) -> None:
    call = harness.stub.Run(
        pb.RunRequest(session_id="busy", create_session=True, messages=[user("[[slow:0.1]] a b c")])
    )
    await next_event(call)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.DeleteSession(pb.DeleteSessionRequest(session_id="busy"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await harness.stub.Interrupt(pb.InterruptRequest(session_id="busy"))
    await collect(call)
    await harness.stub.DeleteSession(pb.DeleteSessionRequest(session_id="busy"))


async def test_runs_are_kept_as_records_that_can_be_read_and_listed(harness: Harness) -> None:
    first = await collect(
        harness.stub.Run(pb.RunRequest(session_id="rr", create_session=True, messages=[user("a")]))
    )
    await collect(harness.stub.Run(pb.RunRequest(session_id="rr", messages=[user("b")])))
    run_id = first[0].run_id

    run = await harness.stub.GetRun(pb.GetRunRequest(run_id=run_id))
    assert (run.id, run.session_id, run.status) == (run_id, "rr", pb.RUN_STATUS_SUCCEEDED)
    assert run.start_seq == first[0].seq == 1
    assert run.end_time.ToNanoseconds() >= run.start_time.ToNanoseconds() > 0
    assert await harness.stub.GetRun(pb.GetRunRequest(run_id=run_id, session_id="rr")) == run

    listed = await harness.stub.ListRuns(pb.ListRunsRequest(session_id="rr"))
    assert listed.total == 2
    assert listed.runs[-1].id == run_id  # newest first

    own = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="rr", run_id=run_id))
    assert [m.role for m in own.messages] == [pb.ROLE_USER, pb.ROLE_ASSISTANT]
    assert {m.run_id for m in own.messages} == {run_id}

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.GetRun(pb.GetRunRequest(run_id="no-such-run"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


async def test_a_run_is_stored_as_ended_before_its_terminal_event_reaches_anyone(
    harness: Harness,
) -> None:
    call = harness.stub.Run(
        pb.RunRequest(session_id="order", create_session=True, messages=[user("a b c")])
    )
    events = await collect(call)
    run = await harness.stub.GetRun(pb.GetRunRequest(run_id=events[-1].run_id))
    assert run.status == pb.RUN_STATUS_SUCCEEDED
    stored = await collect(
        harness.stub.Subscribe(pb.SubscribeRequest(session_id="order", until_idle=True))
    )
    assert [e.seq for e in stored] == [e.seq for e in events]
    second = await collect(
        harness.stub.Run(pb.RunRequest(session_id="order", messages=[user("d")]))
    )
    again = await harness.stub.GetRun(pb.GetRunRequest(run_id=second[0].run_id))
    assert again.start_seq == events[-1].seq + 1 == second[0].seq


async def test_an_untitled_conversation_is_titled_by_its_first_message(harness: Harness) -> None:
    first = "  What is\tthe   weather\nin Paris tomorrow? " + "and more words " * 10
    await collect(
        harness.stub.Run(
            pb.RunRequest(session_id="t1", create_session=True, messages=[user(first)])
        )
    )
    got = await harness.stub.GetSession(pb.GetSessionRequest(session_id="t1"))
    assert got.title.startswith("What is the weather in Paris tomorrow? and more")
    assert got.title.endswith("…") and len(got.title) <= 80
    # A later message never renames it, and a client's own title is never replaced.
    await collect(harness.stub.Run(pb.RunRequest(session_id="t1", messages=[user("other")])))
    again = await harness.stub.GetSession(pb.GetSessionRequest(session_id="t1"))
    assert again.title == got.title
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="t2", title="Mine"))
    await collect(harness.stub.Run(pb.RunRequest(session_id="t2", messages=[user("hello")])))
    mine = await harness.stub.GetSession(pb.GetSessionRequest(session_id="t2"))
    assert mine.title == "Mine"
