"""Several engines on one shared store: any replica serves any RPC.

Two (or three) real engine servers on their own ports share one store. A run on A is
followed live on B with the same seqs, interrupted from B, and — when A stops renewing its
lease, as a dead replica does — closed by B within the lease time with what it had said.
Every test runs twice: on a memory store shared in process (``shared=True``: signals after
each change, leases), and on the real PostgreSQL with one store (one pool, one listener)
per replica, as separate processes have.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from google.protobuf import struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.build import build_model
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.limits import RunLimits
from engine_service.core.registry import ToolRegistry
from engine_service.server import EngineServer
from engine_service.tools.builtin import builtin_tools
from tests.engine.harness import (
    WAIT,
    StoreFor,
    collect,
    engine_settings,
    kind,
    next_event,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI

LEASE = 0.6
"""Seconds: short, so a takeover happens within the test."""


@dataclass
class Replica:
    engine: Engine
    server: EngineServer
    channel: grpc.aio.Channel
    stub: pb_grpc.AgentEngineAsyncStub


@contextlib.asynccontextmanager
async def replicas(
    llm: FakeOpenAI,
    store_for: StoreFor,
    count: int = 2,
    approval: tuple[str, ...] = (),
    *,
    resume: bool = False,
    idempotent: tuple[str, ...] = ("current_time", "calculate"),
) -> AsyncIterator[list[Replica]]:
    """``resume``: a dead replica's runs are resumed (``[engine] resume_runs``); off,
    closed as interrupted (tests/core/test_replica_races.py and tests/faults resume)."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_SHUTDOWN_GRACE="0",
    )
    running: list[Replica] = []
    try:
        for _ in range(count):
            engine = Engine(
                store_for(),
                build_model(settings),
                ToolRegistry(builtin_tools() if approval else ()),
                EngineLimits(
                    run=RunLimits(approval=approval, idempotent=idempotent),
                    lease_seconds=LEASE,
                    event_retention=0,
                    resume_runs=resume,
                ),
            )
            server = EngineServer(engine, settings)
            await server.start()
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{server.port}")
            stub: pb_grpc.AgentEngineAsyncStub = pb_grpc.AgentEngineStub(channel)
            running.append(Replica(engine, server, channel, stub))
        yield running
    finally:
        for replica in running:
            await replica.channel.close()
            await replica.server.stop()


def _bodies(events: list[pb.Event]) -> list[tuple[int, str]]:
    return [(e.seq, e.SerializeToString(deterministic=True).hex()) for e in events]


async def test_a_run_on_a_is_followed_live_on_b_with_the_same_seqs(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(
            pb.RunRequest(session_id="s", messages=[user("[[chunks:60]][[slow:0.01]]")])
        )
        first = await next_event(run)
        assert kind(first) == "run_started"
        follow = b.stub.Subscribe(pb.SubscribeRequest(session_id="s", after_seq=first.seq - 1))
        started = time.perf_counter()
        followed = [await next_event(follow)]
        first_latency = time.perf_counter() - started
        on_a = [first, *await collect(run)]
        while len(followed) < len(on_a):
            followed.append(await next_event(follow))
        follow.cancel()

        assert kind(on_a[-1]) == "run_finished"
        assert _bodies(followed) == _bodies(on_a)
        assert first_latency < 1.0, first_latency


async def test_subscribe_until_idle_on_b_ends_with_a_runs_end(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(
            pb.RunRequest(session_id="s", messages=[user("[[chunks:40]][[slow:0.01]]")])
        )
        await next_event(run)
        follow = b.stub.Subscribe(pb.SubscribeRequest(session_id="s", until_idle=True))
        followed = await collect(follow)
        on_a = await collect(run)
        assert kind(followed[-1]) == "run_finished"
        assert followed[-1].seq == on_a[-1].seq
        seqs = [e.seq for e in followed]
        assert seqs == list(range(1, seqs[-1] + 1))  # no gap, no duplicate


async def test_interrupt_sent_to_b_stops_a_run_on_a_at_once(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(
            pb.RunRequest(session_id="s", messages=[user("[[chunks:500]][[slow:0.02]]")])
        )
        started = await next_event(run)
        await next_event(run)
        asked = time.perf_counter()
        reply = await b.stub.Interrupt(pb.InterruptRequest(session_id="s"))
        assert reply.interrupted and reply.run_id == started.run_id
        rest = await collect(run)
        stopped = time.perf_counter() - asked
        assert kind(rest[-1]) == "run_finished"
        assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
        assert stopped < 1.0, stopped
        info = await b.stub.GetRun(pb.GetRunRequest(run_id=started.run_id))
        assert info.status == pb.RUN_STATUS_INTERRUPTED


async def test_a_second_run_on_b_while_a_runs_is_busy(llm: FakeOpenAI, store_for: StoreFor) -> None:
    async with replicas(llm, store_for) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(
            pb.RunRequest(session_id="s", messages=[user("[[chunks:100]][[slow:0.01]]")])
        )
        await next_event(run)
        try:
            await collect(b.stub.Run(pb.RunRequest(session_id="s", messages=[user("me too")])))
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION
        else:
            raise AssertionError("a second run on the session was accepted")
        await collect(run)
        # Then B runs the next turn, its seqs after A's.
        after = await collect(b.stub.Run(pb.RunRequest(session_id="s", messages=[user("next")])))
        history = await collect(
            a.stub.Subscribe(pb.SubscribeRequest(session_id="s", until_idle=True))
        )
        seqs = [e.seq for e in history]
        assert seqs == sorted(set(seqs))
        assert after[-1].seq == seqs[-1]


async def test_a_dead_replicas_run_is_closed_by_another_within_the_lease(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(pb.RunRequest(session_id="s", messages=[user("partial [[hang]]")]))
        seen = [await next_event(run)]
        while kind(seen[-1]) != "text_message_content":
            seen.append(await next_event(run))
        follow = b.stub.Subscribe(pb.SubscribeRequest(session_id="s", until_idle=True))
        await asyncio.sleep(0.2)  # the first chunk is stored (write-behind)
        # A "dies": it stops renewing its lease (its LLM call hangs, it writes nothing).
        assert a.engine._leases is not None
        await a.engine._leases.stop()
        died = time.perf_counter()

        followed = await collect(follow)
        taken_over = time.perf_counter() - died
        assert kind(followed[-1]) == "run_finished"
        assert followed[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
        assert taken_over < LEASE * 3 + 1.0, taken_over
        info = await b.stub.GetRun(pb.GetRunRequest(run_id=seen[0].run_id))
        assert info.status == pb.RUN_STATUS_INTERRUPTED
        messages = await b.stub.ListMessages(pb.ListMessagesRequest(session_id="s"))
        answer = [m for m in messages.messages if m.role == pb.ROLE_ASSISTANT]
        assert answer and text_of(seen) in answer[-1].content[0].text.text
        run.cancel()


async def test_a_starting_replica_leaves_live_runs_alone(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for, count=3) as (a, b, c):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(
            pb.RunRequest(session_id="s", messages=[user("[[chunks:30]][[slow:0.05]]")])
        )
        await next_event(run)
        # C restarts (stop, start a fresh engine on the same store) while A runs.
        await c.server.stop()
        restarted = Engine(c.engine.store, c.engine.model, ToolRegistry(), c.engine.limits)
        await restarted.start()
        await asyncio.sleep(LEASE * 2)  # several lease periods: A renews, nobody closes
        rest = await collect(run)
        assert kind(rest[-1]) == "run_finished"
        assert rest[-1].run_finished.outcome != pb.OUTCOME_TYPE_CANCELLED
        await restarted.shutdown(0)
        del b


async def test_lists_and_reads_agree_on_every_replica(llm: FakeOpenAI, store_for: StoreFor) -> None:
    async with replicas(llm, store_for) as (a, b):
        for index in range(4):
            replica = (a, b)[index % 2]
            await collect(
                replica.stub.Run(
                    pb.RunRequest(
                        session_id=f"t{index}", create_session=True, messages=[user("hi")]
                    )
                )
            )
        for replica in (a, b):
            listed = await replica.stub.ListSessions(pb.ListSessionsRequest(), timeout=WAIT)
            assert sorted(s.id for s in listed.sessions) == ["t0", "t1", "t2", "t3"]


async def test_a_run_that_waits_for_a_person_on_a_is_resumed_on_b(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with replicas(llm, store_for, approval=("calculate",)) as (a, b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        asked = await collect(
            a.stub.Run(
                pb.RunRequest(
                    session_id="s",
                    messages=[user('[[tool:calculate {"expression": "2+2"}]]')],
                )
            )
        )
        assert asked[-1].run_finished.outcome == pb.OUTCOME_TYPE_INTERRUPT
        [interrupt] = asked[-1].run_finished.interrupts
        on_b = await b.stub.GetSession(pb.GetSessionRequest(session_id="s"))
        assert [i.id for i in on_b.pending_interrupts] == [interrupt.id]
        with contextlib.suppress(grpc.aio.AioRpcError):  # refused on A as on B
            await collect(a.stub.Run(pb.RunRequest(session_id="s", messages=[user("hi")])))
        follow = a.stub.Subscribe(
            pb.SubscribeRequest(session_id="s", after_seq=asked[-1].seq, until_idle=False)
        )
        resumed = await collect(
            b.stub.Run(
                pb.RunRequest(
                    session_id="s",
                    resume=[
                        pb.ResumeEntry(
                            interrupt_id=interrupt.id,
                            status=pb.RESUME_STATUS_RESOLVED,
                            payload=struct_pb2.Value(bool_value=True),
                        )
                    ],
                )
            )
        )
        assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        assert [kind(e) for e in resumed].count("tool_call_result") == 1
        followed = [await next_event(follow) for _ in resumed]
        follow.cancel()
        assert _bodies(followed) == _bodies(resumed)  # A's follower saw B's resume live
        on_a = await a.stub.GetSession(pb.GetSessionRequest(session_id="s"))
        assert list(on_a.pending_interrupts) == []


async def test_a_stopping_replica_hands_its_runs_over_only_when_another_is_alive(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    """With B alive, A's shutdown hands its run over at once (B finishes it); alone, a
    stopping replica has nobody to hand over to, so its run finishes within the grace."""
    slow = "[[chunks:20]][[slow:0.05]]"
    async with replicas(llm, store_for, resume=True) as (a, b):
        await asyncio.sleep(LEASE / 2)  # both have renewed once: noted alive
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        run = a.stub.Run(pb.RunRequest(session_id="s", messages=[user(slow)]))
        first = await next_event(run)
        follow = b.stub.Subscribe(pb.SubscribeRequest(session_id="s", until_idle=True))
        began = time.perf_counter()
        await a.engine.shutdown(30)
        assert time.perf_counter() - began < 5  # handed over: no waiting for the grace
        followed = await collect(follow)
        assert kind(followed[-1]) == "run_finished"
        assert followed[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        assert any(e.custom.name == "resumed" for e in followed if kind(e) == "custom")
        info = await b.stub.GetRun(pb.GetRunRequest(run_id=first.run_id))
        assert info.status == pb.RUN_STATUS_SUCCEEDED
        run.cancel()

    async with replicas(llm, store_for, count=1, resume=True) as (alone,):
        await asyncio.sleep(LEASE / 2)
        await alone.stub.CreateSession(pb.CreateSessionRequest(session_id="t"))
        run = alone.stub.Run(pb.RunRequest(session_id="t", messages=[user(slow)]))
        first = await next_event(run)
        await alone.engine.shutdown(30)  # nobody to take it: it finishes here
        rest = await collect(run)
        assert kind(rest[-1]) == "run_finished"
        assert rest[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        stored = await alone.engine.store.get_run("t", first.run_id)
        assert stored.status.value == "succeeded"


async def test_a_resumed_run_offers_the_llm_the_clients_tools_and_context(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    """The client's tools and context are kept with the run (``core.kept_input``): the
    replica that resumes it asks the LLM with them, as the dead one did."""
    async with replicas(llm, store_for, resume=True) as (a, _b):
        await a.stub.CreateSession(pb.CreateSessionRequest(session_id="s"))
        parameters = struct_pb2.Struct()
        parameters.update({"type": "object", "properties": {}})
        request = pb.RunRequest(
            session_id="s",
            messages=[user("partial [[hang]]")],
            tools=[pb.Tool(name="pick_color", description="Pick a colour", parameters=parameters)],
            context=[pb.ContextItem(description="the page", value="the settings page")],
        )
        run = a.stub.Run(request)
        while kind(await next_event(run)) != "text_message_content":
            pass
        await asyncio.sleep(0.2)  # the first chunk is stored (write-behind)
        asked = len(llm.requests)
        assert a.engine._leases is not None
        await a.engine._leases.stop()  # A "dies"; B resumes the run and asks again
        for _ in range(int((LEASE * 3 + 2) / 0.05)):
            if len(llm.requests) > asked:
                break
            await asyncio.sleep(0.05)
        assert len(llm.requests) > asked, "the run was not resumed"
        again = llm.requests[-1]
        assert [t["function"]["name"] for t in again.get("tools", [])] == ["pick_color"]
        assert "the settings page" in str(again["messages"])
        run.cancel()
