"""Human in the loop over gRPC: approvals, edits, rejections, questions, expiry, restarts.

The offline model drives the flows deterministically: "calculate 2+2" calls ``calculate``
(listed for approval here), "ask me ..." calls ``ask_user``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.tool import Tool, ToolContext, ToolResult
from tests.engine.harness import (
    WAIT,
    Harness,
    collect,
    engine_settings,
    kinds,
    next_event,
    run,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI

HITL = {"AGENTIK_TOOLS_APPROVAL": "calculate,slow_*", "AGENTIK_TOOLS_ASK_USER": "true"}


def _id() -> str:
    return uuid.uuid4().hex


def _value(value: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    json_format.ParseDict(value, out)
    return out


def resolved(interrupt_id: str, payload: object = True) -> pb.ResumeEntry:
    """A resolved entry; by default an explicit approval (``payload: true``)."""
    entry = pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_RESOLVED)
    if payload is not None:
        entry.payload.CopyFrom(_value(payload))
    return entry


def cancelled(interrupt_id: str) -> pb.ResumeEntry:
    return pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_CANCELLED)


async def paused(harness: Harness, session: str, text: str) -> tuple[pb.Interrupt, list[pb.Event]]:
    """Run ``text`` and return the one interrupt the run stopped with."""
    events = await run(
        harness, pb.RunRequest(session_id=session, create_session=True, messages=[user(text)])
    )
    finished = events[-1]
    assert finished.WhichOneof("kind") == "run_finished", kinds(events)
    assert finished.run_finished.outcome == pb.OUTCOME_TYPE_INTERRUPT
    assert len(finished.run_finished.interrupts) == 1
    return finished.run_finished.interrupts[0], events


def results(events: list[pb.Event]) -> list[pb.ToolCallResult]:
    return [e.tool_call_result for e in events if e.WhichOneof("kind") == "tool_call_result"]


@pytest.fixture
async def hitl() -> asyncio.AsyncIterator[Harness]:  # type: ignore[name-defined]
    async with running_engine(engine_settings(**HITL)) as running:
        yield running


async def test_an_approved_call_runs_and_the_turn_goes_on(hitl: Harness) -> None:
    session = _id()
    interrupt, events = await paused(hitl, session, "calculate 2+2")
    assert interrupt.kind == pb.INTERRUPT_KIND_APPROVAL
    assert interrupt.tool_call.name == "calculate"
    assert json_format.MessageToDict(interrupt.payload) == {
        "tool": "calculate",
        "arguments": {"expression": "2+2"},
    }
    assert interrupt.message.startswith("Approve calling calculate")
    assert "approved" in json_format.MessageToDict(interrupt.response_schema)["properties"]
    assert not results(events), "the gated tool must not run before approval"
    first_run = events[0].run_id

    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    assert [i.id for i in got.pending_interrupts] == [interrupt.id]
    info = await hitl.stub.GetRun(pb.GetRunRequest(run_id=first_run))
    assert info.status == pb.RUN_STATUS_INPUT_REQUIRED
    assert [i.id for i in info.interrupts] == [interrupt.id]

    after = await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    assert after[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert [r.tool_call_id for r in results(after)] == [interrupt.tool_call.id]
    assert json.loads(results(after)[0].content)["result"] == 4
    assert text_of(after) == "2+2 = 4."

    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    assert list(got.pending_interrupts) == []
    info = await hitl.stub.GetRun(pb.GetRunRequest(run_id=first_run))
    assert info.resumed_by_run_id == after[0].run_id
    resumed = await hitl.stub.GetRun(pb.GetRunRequest(run_id=after[0].run_id))
    assert resumed.status == pb.RUN_STATUS_SUCCEEDED


async def test_edited_arguments_are_what_runs(hitl: Harness) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    edit = resolved(interrupt.id, {"approved": True, "arguments": {"expression": "6*7"}})
    after = await run(hitl, pb.RunRequest(session_id=session, resume=[edit]))
    assert json.loads(results(after)[0].content) == {"expression": "6*7", "result": 42}
    assert text_of(after) == "6*7 = 42."


@pytest.mark.parametrize(
    "entry",
    [
        lambda i: cancelled(i),
        lambda i: resolved(i, {"approved": False, "reason": "not now"}),
        lambda i: resolved(i, False),
    ],
    ids=["cancelled", "approved-false", "false"],
)
async def test_a_declined_call_does_not_run_and_the_llm_is_told(
    hitl: Harness, entry: object
) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    after = await run(hitl, pb.RunRequest(session_id=session, resume=[entry(interrupt.id)]))  # type: ignore[operator]
    [result] = results(after)
    assert result.content.startswith("The user declined this call of calculate")
    assert "result" not in result.content
    assert "declined" in text_of(after)
    messages = await hitl.stub.ListMessages(pb.ListMessagesRequest(session_id=session))
    tool = [m for m in messages.messages if m.role == pb.ROLE_TOOL]
    assert [m.tool_call_id for m in tool] == [interrupt.tool_call.id]


async def test_a_question_is_answered_and_the_answer_is_the_tool_result(hitl: Harness) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "ask me your favourite colour")
    assert interrupt.kind == pb.INTERRUPT_KIND_QUESTION
    assert interrupt.message == "Your favourite colour?"
    assert json_format.MessageToDict(interrupt.payload) == {"question": "Your favourite colour?"}
    after = await run(
        hitl,
        pb.RunRequest(session_id=session, resume=[resolved(interrupt.id, {"answer": "teal"})]),
    )
    assert [r.content for r in results(after)] == ["teal"]
    assert text_of(after) == 'You answered: "teal". Thank you.'


async def test_a_new_message_while_a_person_is_awaited_is_refused_and_stores_nothing(
    hitl: Harness,
) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    before = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, messages=[user("hello?")]))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = str(caught.value.details())
    assert "waits for a person" in details and interrupt.id in details
    trailers = dict(caught.value.trailing_metadata() or ())
    assert trailers.get("agentik-error") == "input_required"
    after = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    assert (after.message_count, after.last_seq) == (before.message_count, before.last_seq)
    runs = await hitl.stub.ListRuns(pb.ListRunsRequest(session_id=session))
    assert runs.total == 1


@pytest.mark.parametrize(
    ("resume", "named"),
    [
        (
            lambda i: [resolved("not-pending")],
            "resume[0].interrupt_id 'not-pending' is not pending",
        ),
        (lambda i: [resolved(i), resolved(i)], "resume[1].interrupt_id"),
        (lambda i: [resolved(i, "yes please")], "resume[0].payload"),
        (
            lambda i: [resolved(i, {"approved": True, "arguments": [1]})],
            "resume[0].payload.arguments",
        ),
        (lambda i: [resolved(i, {"approved": "yes"})], "resume[0].payload.approved"),
        # No explicit yes is never a yes (issue 27, item 1).
        (lambda i: [resolved(i, None)], "resume[0].payload is missing"),
        (lambda i: [resolved(i, {})], "resume[0].payload.approved is missing"),
        (lambda i: [resolved(i, {"reason": "too risky"})], "resume[0].payload.approved"),
        (lambda i: [resolved(i, {"tool": "calculate"})], "resume[0].payload.approved"),
        (
            lambda i: [resolved(i, {"arguments": {"expression": "6*7"}})],
            "resume[0].payload.approved",
        ),
        (lambda i: [pb.ResumeEntry(interrupt_id=i)], "resume[0].status"),
        (lambda i: [resolved("a/b")], "resume[0].interrupt_id"),
    ],
)
async def test_bad_resume_entries_are_refused_by_name(
    hitl: Harness, resume: object, named: str
) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "calculate 2+2")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=resume(interrupt.id)))  # type: ignore[operator]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in str(caught.value.details())
    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    assert [i.id for i in got.pending_interrupts] == [interrupt.id]  # still waiting
    # The right answer still works.
    after = await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    assert after[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS


async def test_resume_on_a_conversation_that_waits_for_nothing_is_refused(hitl: Harness) -> None:
    session = _id()
    await run(hitl, pb.RunRequest(session_id=session, create_session=True, messages=[user("hi")]))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=[resolved("i1")]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "waits for no answer" in str(caught.value.details())


async def test_tools_not_listed_run_without_asking(hitl: Harness) -> None:
    events = await run(
        hitl,
        pb.RunRequest(
            session_id=_id(), create_session=True, messages=[user("what time is it in UTC")]
        ),
    )
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert len(results(events)) == 1


async def test_globs_select_tools_for_approval() -> None:
    settings = engine_settings(AGENTIK_TOOLS_APPROVAL="current_*")
    async with running_engine(settings) as harness:
        interrupt, _ = await paused(harness, _id(), "what time is it in UTC")
        assert interrupt.tool_call.name == "current_time"


async def test_ask_user_is_offered_only_when_configured() -> None:
    async with running_engine(engine_settings()) as harness:
        events = await run(
            harness,
            pb.RunRequest(session_id=_id(), create_session=True, messages=[user("ask me a thing")]),
        )
        assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        assert "ask me a thing" in text_of(events)


async def test_an_expired_request_counts_as_declined() -> None:
    settings = engine_settings(**HITL, AGENTIK_INTERRUPT_EXPIRY="1.5")
    async with running_engine(settings) as harness:
        session = _id()
        interrupt, _ = await paused(harness, session, "calculate 2+2")
        assert interrupt.HasField("expire_time")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await run(harness, pb.RunRequest(session_id=session, messages=[user("still there?")]))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # Until the request's own expiry time has passed (not a fixed sleep: a slow box).
        expires = interrupt.expire_time.ToDatetime(tzinfo=dt.UTC).timestamp()
        await asyncio.sleep(max(0.0, expires - time.time()) + 0.1)
        after = await run(harness, pb.RunRequest(session_id=session, messages=[user("hi again")]))
        [result] = results(after)
        assert "the request expired" in result.content
        messages = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id=session))
        roles = [m.role for m in messages.messages]
        # The declined result follows its call; the new message comes after it.
        assert roles[:4] == [pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_TOOL, pb.ROLE_USER]


async def test_the_pending_request_survives_an_engine_restart(tmp_path: Path) -> None:
    settings = engine_settings(**HITL, AGENTIK_STORE=f"sqlite:///{tmp_path / 'a.db'}")
    session = _id()
    async with running_engine(settings) as harness:
        interrupt, _ = await paused(harness, session, "calculate 2+2")
    async with running_engine(settings) as harness:
        got = await harness.stub.GetSession(pb.GetSessionRequest(session_id=session))
        assert [i.id for i in got.pending_interrupts] == [interrupt.id]
        assert got.pending_interrupts[0].tool_call.name == "calculate"
        after = await run(
            harness, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)])
        )
        assert text_of(after) == "2+2 = 4."


class SlowTool(Tool):
    name = "slow_work"
    description = "Takes its time."

    def __init__(self) -> None:
        self.parameters = {"type": "object", "properties": {}}
        self.started = asyncio.Event()

    async def call(self, arguments: dict[str, object], context: ToolContext) -> ToolResult:
        self.started.set()
        await asyncio.sleep(WAIT * 2)
        return ToolResult("done")


async def test_interrupting_an_approved_call_keeps_the_answer_and_asks_no_more(
    llm: FakeOpenAI,
) -> None:
    settings = engine_settings(**HITL, OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="k")
    slow = SlowTool()
    async with running_engine(settings, tools=[slow]) as hitl:
        await _interrupt_the_approved_call(hitl, slow)


async def _interrupt_the_approved_call(hitl: Harness, slow: SlowTool) -> None:
    session = _id()
    interrupt, _ = await paused(hitl, session, "[[tool:slow_work {}]]")
    assert interrupt.tool_call.name == "slow_work"
    call = hitl.stub.Run(pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    await next_event(call)
    async with asyncio.timeout(WAIT):
        await slow.started.wait()
    stopped = await hitl.stub.Interrupt(pb.InterruptRequest(session_id=session))
    assert stopped.interrupted
    events = await collect(call)
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    [result] = results(events)
    assert result.is_error and "interrupted" in result.content
    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    assert list(got.pending_interrupts) == []


async def test_a_run_id_is_unique_on_the_server(hitl: Harness) -> None:
    run_id = _id()
    first, second = _id(), _id()
    await run(
        hitl,
        pb.RunRequest(session_id=first, run_id=run_id, create_session=True, messages=[user("a")]),
    )
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(
            hitl,
            pb.RunRequest(
                session_id=second, run_id=run_id, create_session=True, messages=[user("b")]
            ),
        )
    assert caught.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert run_id in str(caught.value.details()) and first not in str(caught.value.details())
    with pytest.raises(grpc.aio.AioRpcError) as missing:
        await hitl.stub.GetSession(pb.GetSessionRequest(session_id=second))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND  # nothing was made for it
    found = await hitl.stub.GetRun(pb.GetRunRequest(run_id=run_id))
    assert found.session_id == first


async def test_interrupt_stops_the_wait_for_a_person(hitl: Harness) -> None:
    session = _id()
    interrupt, events = await paused(hitl, session, "calculate 2+2")
    stopped = await hitl.stub.Interrupt(pb.InterruptRequest(session_id=session))
    assert (stopped.interrupted, stopped.run_id) == (True, events[0].run_id)
    got = await hitl.stub.GetSession(pb.GetSessionRequest(session_id=session))
    assert list(got.pending_interrupts) == []
    info = await hitl.stub.GetRun(pb.GetRunRequest(run_id=events[0].run_id))
    assert info.status == pb.RUN_STATUS_INTERRUPTED
    again = await hitl.stub.Interrupt(pb.InterruptRequest(session_id=session))
    assert not again.interrupted
    # The conversation moves on; the unanswered call reads as unanswered.
    after = await run(hitl, pb.RunRequest(session_id=session, messages=[user("never mind")]))
    assert after[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await run(hitl, pb.RunRequest(session_id=session, resume=[resolved(interrupt.id)]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
