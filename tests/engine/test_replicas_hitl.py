"""Human in the loop on two replicas: concurrent resumes of one interrupt on A and B."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.models import JSON
from engine_service.core.tool import Tool, ToolContext, ToolResult
from tests.engine.harness import WAIT, StoreFor, collect, kind, next_event, user
from tests.engine.test_replicas import replicas
from tests.fakes.fake_openai import FakeOpenAI


async def test_one_interrupt_resumed_on_a_and_b_at_once_runs_the_tool_once(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for, approval=("calculate",)) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        asked = await collect(
            a.stub.Run(
                pb.RunRequest(
                    session_id="s", messages=[user('[[tool:calculate {"expression": "2+2"}]]')]
                )
            )
        )
        [interrupt] = asked[-1].run_finished.interrupts
        entry = pb.ResumeEntry(interrupt_id=interrupt.id, status=pb.RESUME_STATUS_RESOLVED)
        entry.payload.bool_value = True
        request = pb.RunRequest(session_id="s", resume=[entry])
        outcomes = await asyncio.gather(
            collect(a.stub.Run(request)), collect(b.stub.Run(request)), return_exceptions=True
        )
        won = [o for o in outcomes if isinstance(o, list)]
        lost = [o for o in outcomes if not isinstance(o, list)]
        assert len(won) == 1, outcomes
        assert won[0][-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        assert [kind(e) for e in won[0]].count("tool_call_result") == 1
        [refusal] = lost
        assert isinstance(refusal, grpc.aio.AioRpcError)
        assert refusal.code() in (
            grpc.StatusCode.FAILED_PRECONDITION,  # busy with the winner's run
            grpc.StatusCode.INVALID_ARGUMENT,  # the winner's run already resolved it
        ), refusal.details()
        page = await b.stub.ListMessages(pb.ListMessagesRequest(session_id="s"))
        assert [m.role for m in page.messages].count(pb.ROLE_TOOL) == 1
        got = await b.stub.GetSession(pb.GetSessionRequest(session_id="s"))
        assert list(got.pending_interrupts) == []


class _Slow(Tool):
    """A tool with a side effect that takes as long as its engine lets it: each call is
    counted (with the replica that ran it) before it starts waiting."""

    name = "slow_pay"
    description = "Pay, slowly."

    def __init__(self, replica: str, calls: list[str]) -> None:
        self.parameters: dict[str, JSON] = {"type": "object", "properties": {}}
        self.replica = replica
        self.calls = calls

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        self.calls.append(self.replica)
        if self.replica == "a":
            await asyncio.Event().wait()  # A "dies" while the call runs
        return ToolResult("paid")


@pytest.mark.parametrize("idempotent", [False, True], ids=["in-doubt", "idempotent"])
async def test_a_run_cut_while_carrying_out_an_approval_is_resumed_not_closed(
    llm: FakeOpenAI, store_for: StoreFor, idempotent: bool
) -> None:
    """A carries out a person's approval (the answers are kept with the run) and dies while
    the approved call runs: B resumes the run. The call may have run, so B asks again
    whether to run it (never silently twice), or, for an idempotent tool, runs it again
    and the run ends in success."""
    calls: list[str] = []
    async with replicas(
        llm,
        store_for,
        approval=("slow_*",),
        resume=True,
        idempotent=("slow_*",) if idempotent else (),
    ) as (a, b):
        a.engine.tools.register(_Slow("a", calls))
        b.engine.tools.register(_Slow("b", calls))
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        asked = await collect(
            a.stub.Run(pb.RunRequest(session_id="s", messages=[user("[[tool:slow_pay {}]]")]))
        )
        [interrupt] = asked[-1].run_finished.interrupts
        entry = pb.ResumeEntry(interrupt_id=interrupt.id, status=pb.RESUME_STATUS_RESOLVED)
        entry.payload.bool_value = True
        carrying = a.stub.Run(pb.RunRequest(session_id="s", resume=[entry]))
        run_id = (await next_event(carrying)).run_id
        for _ in range(int(WAIT / 0.02)):
            if calls:
                break
            await asyncio.sleep(0.02)
        assert calls == ["a"]
        await asyncio.sleep(0.2)  # what A published is stored (write-behind)
        assert a.engine._leases is not None
        await a.engine._leases.stop()  # A "dies" mid-call; B takes the run over
        deadline = asyncio.get_running_loop().time() + WAIT
        while asyncio.get_running_loop().time() < deadline:
            record = await b.engine.store.get_run("s", run_id)
            if record.status.value != "running":
                break
            await asyncio.sleep(0.05)
        got = await b.stub.GetSession(pb.GetSessionRequest(session_id="s"))
        carrying.cancel()

    if idempotent:
        assert calls == ["a", "b"]
        assert record.status.value == "succeeded"
        assert list(got.pending_interrupts) == []
    else:
        assert calls == ["a"]  # not run again by itself
        assert record.status.value == "input_required"
        [again] = got.pending_interrupts
        assert again.tool_call.id == interrupt.tool_call.id
        assert "may already have run" in again.message
