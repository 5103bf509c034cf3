"""Human in the loop under attack: clumsy payloads, races, storage faults, parallel calls."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.errors import StorageUnavailable
from tests.core.test_hitl import HITL, _id, paused, resolved, results
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kinds,
    next_event,
    run,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI


@pytest.fixture
async def hitl() -> AsyncIterator[Harness]:
    async with running_engine(engine_settings(**HITL)) as running:
        yield running


@pytest.fixture
async def fake_hitl(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    settings = engine_settings(**HITL, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k")
    async with running_engine(settings) as running:
        yield running


async def _tool_messages(h: Harness, session: str) -> list[pb.Message]:
    page = await h.stub.ListMessages(pb.ListMessagesRequest(session_id=session))
    return [m for m in page.messages if m.role == pb.ROLE_TOOL]


@pytest.mark.parametrize(
    "payload", [{"aproved": False}, {"approved": False, "arguments ": {"expression": "1"}}]
)
async def test_a_misspelled_decline_is_refused_not_approved(hitl: Harness, payload: Any) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id, payload)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "resume[0].payload" in str(caught.value.details())
    assert await _tool_messages(hitl, session) == []


async def test_an_expired_approval_cannot_be_given_late() -> None:
    settings = engine_settings(**HITL, AGENTIK_INTERRUPT_EXPIRY="0.3")
    async with running_engine(settings) as harness:
        session = _id()
        interrupt, _ = await paused(harness, session, "calculate 2+2")
        await asyncio.sleep(0.4)
        after = await run(
            harness, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)])
        )
        [result] = results(after)
        assert "expired" in result.content, result.content


async def test_two_resumes_at_once_run_the_tool_once(hitl: Harness) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    req = pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)])
    outcomes = await asyncio.gather(run(hitl, req), run(hitl, req), return_exceptions=True)
    codes = [o.code() if isinstance(o, grpc.aio.AioRpcError) else "ok" for o in outcomes]
    print(codes, [o.details() for o in outcomes if isinstance(o, grpc.aio.AioRpcError)])
    assert codes.count("ok") == 1
    assert len(await _tool_messages(hitl, session)) == 1


async def test_storage_failing_at_resolve_leaves_the_conversation_resumable(hitl: Harness) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    store = hitl.engine.store
    real = store.resolve_interrupts
    calls = 0

    async def failing(session_id: str, run_id: str, *, replica: str = "") -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise StorageUnavailable("the disk is full")
        await real(session_id, run_id, replica=replica)

    store.resolve_interrupts = failing  # type: ignore[method-assign]
    after = await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    print(kinds(after))
    assert after[-1].WhichOneof("kind") == "run_error"
    seqs = [e.seq for e in after]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    print("pending", [i.id for i in got.pending_interrupts])
    again = await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    print(kinds(again))
    assert again[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert len(await _tool_messages(hitl, session)) == 1


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"answer": "no"}, "resume[0].payload has an unknown key 'answer'"),
        ({"tool": "current_time", "arguments": {}}, "resume[0].payload.tool 'current_time'"),
        ({"approved": True, "arguments": {"expression": float("nan")}}, "resume[0].payload"),
        (
            {"approved": True, "arguments": [1, 2]},
            "resume[0].payload.arguments must be a JSON object",
        ),
        ("yes", "resume[0].payload: an approval is"),
    ],
    ids=["question-answer", "other-tool", "nan", "array-arguments", "text"],
)
async def test_an_approval_payload_that_does_not_fit_is_refused_by_name(
    hitl: Harness, payload: Any, named: str
) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id, payload)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in str(caught.value.details())
    assert await _tool_messages(hitl, session) == []


async def test_echoing_the_interrupt_payload_back_is_no_approval_until_it_says_approved(
    hitl: Harness,
) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    echo = json_format.MessageToDict(interrupt.payload)  # {"tool", "arguments"}
    echo["arguments"] = {"expression": "3*3"}
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id, echo)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "resume[0].payload.approved is missing" in str(caught.value.details())
    assert await _tool_messages(hitl, session) == []
    echo["approved"] = True
    after = await run(
        hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id, echo)])
    )
    assert json.loads(results(after)[0].content)["result"] == 9


async def test_a_deep_edit_reaches_the_tool_which_refuses_it(hitl: Harness) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    deep: Any = "x"
    for _ in range(20):
        deep = {"a": deep}
    edit = resolved(interrupt.id, {"approved": True, "arguments": deep})
    after = await run(hitl, pb.RunRequest(session_id=session, resume=[edit]))
    [result] = results(after)
    assert result.is_error and "expression" in result.content
    assert after[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


async def test_parallel_gated_calls(fake_hitl: Harness) -> None:
    session = _id()
    text = (
        '[[tool:calculate {"expression": "1+1"}]][[tool:current_time {}]]'
        '[[tool:calculate {"expression": "2+2"}]][[tool:front {}]]'
    )
    events = await run(
        fake_hitl,
        pb.RunRequest(
            session_id=session,
            create_session=True,
            messages=[user(text)],
            tools=[pb.Tool(name="front", description="f")],
        ),
    )
    fin = events[-1].run_finished
    print(kinds(events), fin.outcome, list(fin.pending_tool_call_ids))
    ids = [i.id for i in fin.interrupts]
    print([i.tool_call.id for i in fin.interrupts])
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(fake_hitl, pb.RunRequest(session_id=session, resume=[resolved(ids[0])]))
    print(caught.value.code(), caught.value.details())
    after = await run(
        fake_hitl, pb.RunRequest(session_id=session, resume=[resolved(i) for i in ids])
    )
    print(kinds(after), [(r.tool_call_id, r.content[:40]) for r in results(after)])
    msgs = await fake_hitl.stub.ListMessages(pb.ListMessagesRequest(session_id=session))
    print([(m.role, m.tool_call_id) for m in msgs.messages])


async def test_interrupt_racing_the_end_of_a_run_that_asks_stops_the_wait(hitl: Harness) -> None:
    """Interrupt lands while the asking run is being stored: it either stops the wait for a
    person, or says it stopped nothing; never "interrupted" with the person still awaited."""
    store = hitl.engine.store
    real = store.finish_run
    ending, release = asyncio.Event(), asyncio.Event()

    async def slow_finish(*args: Any, **kwargs: Any) -> None:
        if kwargs.get("interrupts"):
            ending.set()
            await release.wait()
        await real(*args, **kwargs)

    store.finish_run = slow_finish  # type: ignore[method-assign]
    session = _id()
    call = hitl.stub.Run(
        pb.RunRequest(session_id=session, create_session=True, messages=[user("calculate 2+2")])
    )
    reading = asyncio.ensure_future(collect(call))
    async with asyncio.timeout(5):
        await ending.wait()
    stopping = asyncio.ensure_future(hitl.stub.Interrupt(pb.InterruptRequest(session_id=session)))
    await asyncio.sleep(0.05)
    release.set()
    stopped, events = await stopping, await reading
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_INTERRUPT
    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    info = await hitl.stub.GetRun(pb.GetRunRequest(run_id=events[0].run_id))
    assert stopped.interrupted and stopped.run_id == events[0].run_id
    assert list(got.pending_interrupts) == []
    assert info.status == pb.RUN_STATUS_INTERRUPTED
    after = await run(hitl, pb.RunRequest(session_id=session, messages=[user("hi")]))
    assert after[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


async def test_a_follower_sees_every_event_once_across_pause_fault_and_resume(
    hitl: Harness,
) -> None:
    session = _id()
    await hitl.stub.CreateSession(pb.CreateSessionRequest(session_id=session))
    follow = hitl.stub.Subscribe(
        pb.SubscribeRequest(session_id=session, after_seq=0, until_idle=False)
    )
    ran = await run(hitl, pb.RunRequest(session_id=session, messages=[user("calculate 2+2")]))
    [interrupt] = ran[-1].run_finished.interrupts
    store = hitl.engine.store
    real = store.resolve_interrupts
    failures = [StorageUnavailable("the database is unavailable")]

    async def flaky(session_id: str, run_id: str, *, replica: str = "") -> None:
        if failures:
            raise failures.pop()
        await real(session_id, run_id, replica=replica)

    store.resolve_interrupts = flaky  # type: ignore[method-assign]
    resume = pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)])
    ran += await run(hitl, resume)
    assert ran[-1].WhichOneof("kind") == "run_error"
    ran += await run(hitl, resume)
    assert ran[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    seen = [await next_event(follow) for _ in ran]
    follow.cancel()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert [e.SerializeToString() for e in seen] == [e.SerializeToString() for e in ran]
    assert len(await _tool_messages(hitl, session)) == 1
    # A late reader from the store gets the same.
    replay = await collect(
        hitl.stub.Subscribe(pb.SubscribeRequest(session_id=session, after_seq=0, until_idle=True))
    )
    assert [e.SerializeToString() for e in replay] == [e.SerializeToString() for e in ran]


async def test_an_interrupt_id_of_another_session_of_the_same_owner_is_not_pending(
    hitl: Harness,
) -> None:
    first, second = _id(), _id()
    theirs, _ = await paused(hitl, first, "calculate 2+2")
    ours, _ = await paused(hitl, second, "calculate 2+2")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=second, resume=[resolved(theirs.id)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "resume[0].interrupt_id" in str(caught.value.details())
    assert first not in str(caught.value.details())
    for session, interrupt in ((first, theirs), (second, ours)):
        got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
        assert [i.id for i in got.pending_interrupts] == [interrupt.id]


async def test_a_session_deleted_while_it_waits_cannot_be_resumed(hitl: Harness) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    await hitl.stub.DeleteSession(pb.DeleteSessionRequest(session_id=session))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as gone:
        await hitl.stub.Interrupt(pb.InterruptRequest(session_id=session))
    assert gone.value.code() == grpc.StatusCode.NOT_FOUND
