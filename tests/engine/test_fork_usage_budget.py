"""Fork, usage and token budgets over gRPC (issue 21): ForkSession, usage on RunInfo,
Session and RUN_ERROR, Prometheus tokens by model, and ``[auth] tokens_per_day`` on one
engine and across two replicas sharing a store."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.build import build_model
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.registry import ToolRegistry
from engine_service.server import EngineServer
from engine_service.tools.builtin import builtin_tools
from tests.engine.auth_helpers import TOKENS_ENV, as_, trailers
from tests.engine.harness import (
    WAIT,
    Harness,
    StoreFor,
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    run,
    running_engine,
    user,
)
from tests.engine.test_replicas import Replica
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall


def _settings(llm: FakeOpenAI, **env: str) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_LLM_MAX_RETRIES": "0",
        **env,
    }


@contextlib.asynccontextmanager
async def engine_with(llm: FakeOpenAI, **env: str) -> AsyncIterator[Harness]:
    async with running_engine(engine_settings(**_settings(llm, **env))) as harness:
        yield harness


async def _error(call: object) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call  # type: ignore[misc]
    return caught.value


# -- fork ---------------------------------------------------------------------------


async def test_fork_session_copies_up_to_a_message_for_the_caller(harness: Harness) -> None:
    await run(harness, pb.RunRequest(session_id="orig", create_session=True, messages=[user("a")]))
    await run(harness, pb.RunRequest(session_id="orig", messages=[user("b")]))
    stored = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="orig"))).messages
    assert len(stored) == 4

    fork = await harness.stub.ForkSession(
        pb.ForkSessionRequest(
            session_id="orig", up_to_message_id=stored[1].id, new_session_id="copy"
        )
    )
    assert (fork.id, fork.message_count, fork.usage.total_tokens) == ("copy", 2, 0)
    copied = (await harness.stub.ListMessages(pb.ListMessagesRequest(session_id="copy"))).messages
    assert list(copied) == list(stored[:2])
    generated = await harness.stub.ForkSession(
        pb.ForkSessionRequest(session_id="orig", up_to_message_id=stored[0].id)
    )
    assert generated.id not in ("orig", "copy") and generated.message_count == 1
    # The copy takes runs of its own; the original keeps its history.
    events = await run(harness, pb.RunRequest(session_id="copy", messages=[user("c")]))
    assert kinds(events)[-1] == "run_finished"
    original = await harness.stub.GetSession(pb.GetSessionRequest(session_id="orig"))
    assert original.message_count == 4


async def test_fork_session_refusals_are_clear(harness: Harness) -> None:
    await run(harness, pb.RunRequest(session_id="src", create_session=True, messages=[user("a")]))
    cases = [
        (pb.ForkSessionRequest(session_id="src"), "INVALID_ARGUMENT", "up_to_message_id must"),
        (
            pb.ForkSessionRequest(session_id="src", up_to_message_id="nope"),
            "INVALID_ARGUMENT",
            "up_to_message_id 'nope' is not a message of the session",
        ),
        (
            pb.ForkSessionRequest(session_id="missing", up_to_message_id="x"),
            "NOT_FOUND",
            "session 'missing' not found",
        ),
        (
            pb.ForkSessionRequest(session_id="src", up_to_message_id="x", new_session_id="a b"),
            "INVALID_ARGUMENT",
            "new_session_id 'a b' is not a valid id",
        ),
    ]
    for request, code, words in cases:
        error = await _error(harness.stub.ForkSession(request))
        assert error.code().name == code, (request, error.details())
        assert words in str(error.details())


async def test_a_session_with_a_run_in_progress_forks_its_stored_messages(
    harness: Harness,
) -> None:
    await run(harness, pb.RunRequest(session_id="busy", create_session=True, messages=[user("a")]))
    call = harness.stub.Run(
        pb.RunRequest(session_id="busy", messages=[user("[[chunks:200]][[slow:0.02]] b", "u2")])
    )
    async with asyncio.timeout(WAIT):
        while kind(await next_event(call)) != "text_message_content":
            pass
    fork = await harness.stub.ForkSession(
        pb.ForkSessionRequest(session_id="busy", up_to_message_id="u2", new_session_id="f")
    )
    assert fork.message_count == 3 and not fork.active_run_id
    await harness.stub.Interrupt(pb.InterruptRequest(session_id="busy"))
    await collect(call)


async def test_a_stranger_cannot_fork_and_the_copy_belongs_to_the_caller(
    llm: FakeOpenAI,
) -> None:
    async with engine_with(llm, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_ADMINS="ops") as harness:
        request = pb.RunRequest(session_id="alices", create_session=True, messages=[user("a")])
        await collect(harness.stub.Run(request, metadata=as_("alice")))
        first = (
            await harness.stub.ListMessages(
                pb.ListMessagesRequest(session_id="alices"), metadata=as_("alice")
            )
        ).messages[0]
        fork = pb.ForkSessionRequest(session_id="alices", up_to_message_id=first.id)
        error = await _error(harness.stub.ForkSession(fork, metadata=as_("bob")))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        assert error.details() == "session 'alices' not found"
        # An admin sees every session: the copy is the admin's, not alice's.
        copy = await harness.stub.ForkSession(fork, metadata=as_("ops"))
        assert copy.owner == "ops"
        error = await _error(
            harness.stub.GetSession(pb.GetSessionRequest(session_id=copy.id), metadata=as_("alice"))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND


# -- usage --------------------------------------------------------------------------


async def test_usage_is_on_run_info_and_summed_on_the_session(
    harness: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="one", usage=(30, 5), cached_tokens=16))
    first = await run(
        harness, pb.RunRequest(session_id="u", create_session=True, messages=[user("x")])
    )
    finished = first[-1].run_finished
    assert (finished.usage.input_tokens, finished.usage.cached_tokens) == (30, 16)
    llm.enqueue(FakeReply(text="two", usage=(40, 6)))
    await run(harness, pb.RunRequest(session_id="u", messages=[user("y")]))

    info = await harness.stub.GetRun(pb.GetRunRequest(run_id=first[0].run_id))
    assert info.usage == pb.Usage(
        input_tokens=30, output_tokens=5, total_tokens=35, cached_tokens=16
    )
    session = await harness.stub.GetSession(pb.GetSessionRequest(session_id="u"))
    assert session.usage == pb.Usage(
        input_tokens=70, output_tokens=11, total_tokens=81, cached_tokens=16
    )


async def test_a_failed_run_reports_the_tokens_it_used(harness: Harness, llm: FakeOpenAI) -> None:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "1+1"})], usage=(20, 4)),
        FakeReply(status=500, error_message="boom"),
    )
    events = await run(
        harness, pb.RunRequest(session_id="f", create_session=True, messages=[user("x")])
    )
    error = events[-1].run_error
    assert error.code == "llm_server_error"
    assert (error.usage.input_tokens, error.usage.output_tokens) == (20, 4)
    info = await harness.stub.GetRun(pb.GetRunRequest(run_id=events[0].run_id))
    assert info.status == pb.RUN_STATUS_FAILED and info.usage.total_tokens == 24


async def test_prometheus_counts_tokens_by_model(llm: FakeOpenAI) -> None:
    async with engine_with(
        llm, AGENTIK_METRICS_ADDR="127.0.0.1:0", AGENTIK_MODEL="gpt-test"
    ) as harness:
        llm.enqueue(FakeReply(text="hi", usage=(50, 7), cached_tokens=32))
        await run(harness, pb.RunRequest(session_id="m", create_session=True, messages=[user("x")]))
        url = f"http://127.0.0.1:{harness.server.metrics_port}/metrics"
        async with httpx.AsyncClient() as client:
            text = (await client.get(url, timeout=WAIT)).text
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "agentik_llm_tokens_total"
    }
    model = harness.engine.model.name
    assert "gpt-test" in model
    for direction, count in (("input", 50), ("output", 7), ("cached", 32)):
        assert (
            samples[
                (
                    "agentik_llm_tokens_total",
                    frozenset({("direction", direction), ("model", model)}),
                )
            ]
            == count
        )


# -- budgets --------------------------------------------------------------------------


async def test_over_the_daily_budget_a_run_is_refused_with_the_reset(llm: FakeOpenAI) -> None:
    async with engine_with(llm, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_TOKENS_PER_DAY="100") as harness:
        llm.enqueue(FakeReply(text="big", usage=(95, 10)))
        request = pb.RunRequest(session_id="b", create_session=True, messages=[user("x")])
        events = await collect(harness.stub.Run(request, metadata=as_("alice")))
        assert kind(events[-1]) == "run_finished"  # started under the budget: it finishes

        again = pb.RunRequest(session_id="b", messages=[user("y")])
        error = await _error(collect(harness.stub.Run(again, metadata=as_("alice"))))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "principal 'alice' used 105 of 100 tokens today" in str(error.details())
        assert "[auth] tokens_per_day" in str(error.details())
        sent = trailers(error)
        assert sent["agentik-error"] == "budget_exceeded"
        assert 0 < int(sent["retry-after"]) <= 86_400
        # Bob's budget is his own.
        bobs = pb.RunRequest(session_id="bob", create_session=True, messages=[user("z")])
        assert kind((await collect(harness.stub.Run(bobs, metadata=as_("bob"))))[-1]) == (
            "run_finished"
        )


async def test_the_budget_is_checked_before_each_llm_call_of_a_run(llm: FakeOpenAI) -> None:
    async with engine_with(llm, AGENTIK_TOKENS_PER_DAY="50") as harness:
        llm.enqueue(
            FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "2+2"})], usage=(45, 9))
        )
        events = await run(
            harness, pb.RunRequest(session_id="t", create_session=True, messages=[user("x")])
        )
        error = events[-1].run_error
        assert error.code == "budget_exceeded"
        assert "used 54 of 50 tokens today" in error.message
        assert error.usage.total_tokens == 54
        assert len(llm.requests) == 1  # the second round never reached the LLM


@contextlib.asynccontextmanager
async def budget_replicas(
    llm: FakeOpenAI, store_for: StoreFor, per_day: int
) -> AsyncIterator[list[Replica]]:
    settings = engine_settings(**_settings(llm, AGENTIK_SHUTDOWN_GRACE="0"))
    running: list[Replica] = []
    try:
        for _ in range(2):
            engine = Engine(
                store_for(),
                build_model(settings),
                ToolRegistry(builtin_tools()),
                EngineLimits(lease_seconds=0.6, event_retention=0, tokens_per_day=per_day),
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


async def test_two_replicas_count_one_budget_in_the_shared_store(
    llm: FakeOpenAI, store_for: StoreFor
) -> None:
    async with budget_replicas(llm, store_for, per_day=100) as (a, b):
        llm.enqueue(FakeReply(text="on a", usage=(60, 0)))
        request = pb.RunRequest(session_id="ra", create_session=True, messages=[user("x")])
        assert kind((await collect(a.stub.Run(request)))[-1]) == "run_finished"
        llm.enqueue(FakeReply(text="on b", usage=(50, 0)))
        request = pb.RunRequest(session_id="rb", create_session=True, messages=[user("y")])
        assert kind((await collect(b.stub.Run(request)))[-1]) == "run_finished"
        # 110 counted across both: each replica now refuses.
        for replica in (a, b):
            again = pb.RunRequest(session_id="ra", messages=[user("z")])
            error = await _error(collect(replica.stub.Run(again)))
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "used 110 of 100 tokens today" in str(error.details())
