"""Human in the loop on two replicas: concurrent resumes of one interrupt on A and B."""

from __future__ import annotations

import asyncio

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import StoreFor, collect, kind, user
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
