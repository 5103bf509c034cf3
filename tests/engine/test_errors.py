"""Errors say what, not where: no URLs, hosts or class names reach the client; the log has them."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
from collections.abc import AsyncIterator

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest
from tests.engine.harness import (
    Harness,
    engine_settings,
    run,
    running_engine,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.llm.test_openai_chat import free_port

LEAKS = re.compile(r"https?://|127\.0\.0\.1|localhost|Error\b|Exception\b|Traceback")


# -- 5. errors say what, not where -------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        FakeReply(status=401, error_message="bad key, see https://llm.internal/keys"),
        FakeReply(status=429, error_message="slow down"),
        FakeReply(status=500, error_message="boom at http://10.0.0.7:8000"),
        FakeReply(text="half an answer here", malformed_after=2),
        FakeReply(text="half an answer here", drop_after=2),
    ],
)
async def test_an_llm_failure_tells_the_client_what_failed_and_logs_where_with_the_run_id(
    harness: Harness,
    llm: FakeOpenAI,
    caplog: pytest.LogCaptureFixture,
    reply: FakeReply,
) -> None:
    llm.enqueue(reply)
    with caplog.at_level(logging.WARNING):
        events = await run(
            harness,
            pb.RunRequest(
                session_id="f", run_id="run-1", create_session=True, messages=[user("x")]
            ),
        )

    error = events[-1].run_error
    assert error.code.startswith("llm_")
    assert error.message
    assert not LEAKS.search(error.message), error.message
    stored = await harness.stub.GetRun(pb.GetRunRequest(run_id="run-1"))
    assert not LEAKS.search(stored.error_message), stored.error_message
    logged = [r for r in caplog.records if r.levelno == logging.WARNING and "run-1" in r.message]
    assert any(llm.base_url in r.message for r in logged), caplog.text


async def test_an_unreachable_llm_tells_the_client_it_cannot_be_reached_without_its_address(
    caplog: pytest.LogCaptureFixture,
) -> None:
    base_url = f"http://127.0.0.1:{free_port()}/v1"
    settings = engine_settings(OPENAI_BASE_URL=base_url, AGENTIK_LLM_MAX_RETRIES="0")
    async with running_engine(settings) as harness:
        with caplog.at_level(logging.WARNING):
            events = await run(
                harness,
                pb.RunRequest(
                    session_id="u", run_id="run-u", create_session=True, messages=[user("x")]
                ),
            )

    error = events[-1].run_error
    assert error.code == "llm_unavailable"
    assert error.message == "cannot reach the LLM endpoint"
    assert any(base_url in r.message and "run-u" in r.message for r in caplog.records)


class _BrokenModel(ChatModel):
    name = "broken"

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        raise KeyError("choices")
        yield  # pragma: no cover - makes this an async generator


async def test_a_bug_in_a_turn_is_an_internal_run_error_naming_the_run_not_the_class(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = engine_settings()
    async with running_engine(settings, model=_BrokenModel()) as harness:
        with caplog.at_level(logging.ERROR):
            events = await run(
                harness,
                pb.RunRequest(
                    session_id="b", run_id="run-b", create_session=True, messages=[user("x")]
                ),
            )

    error = events[-1].run_error
    assert error.code == "internal"
    assert error.message == "internal error (see the engine log for run run-b)"
    assert any(r.exc_info and "run-b" in r.message for r in caplog.records)


# -- a refused call lets go of its request -------------------------------------------


async def test_a_refused_call_frees_its_request_without_the_collector(harness: Harness) -> None:
    """gRPC keeps the error an abort raises, and its traceback holds the handler's frames:
    without ``engine_service.errors.abort`` each refused request stayed in memory until the
    cyclic collector ran (100 MiB after the hostile fuzz, with the collector set for a
    server). Here the collector is off while requests are refused in each way an abort
    happens (the core's error, a malformed request, a run's own error), then no request of
    theirs may be among what only it could free."""
    big = "x" * 200_000
    refused = [
        pb.RunRequest(session_id="nowhere", messages=[user(big)]),  # not found, in Run
        pb.RunRequest(session_id="s", create_session=True, messages=[user(big)]),
    ]
    refused[1].messages[0].role = pb.ROLE_TOOL  # a tool message without a call: invalid
    malformed = b"\xff" * 1000  # not a GetSession request
    gc.collect()
    gc.disable()
    try:
        for request in refused:
            with pytest.raises(grpc.aio.AioRpcError):
                async for _ in harness.stub.Run(request):
                    pass
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await harness.stub.GetSession(pb.GetSessionRequest(session_id=big))
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # not an id
        get_session: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = harness.channel.unary_unary(
            "/agentik.engine.v1.AgentEngine/GetSession",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await get_session(malformed)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        await asyncio.sleep(0.05)  # the calls' done callbacks
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, pb.RunRequest | pb.GetSessionRequest)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == [], f"{len(kept)} refused requests were held in reference cycles"


async def test_a_failed_run_leaves_no_error_in_a_cycle(harness: Harness, llm: FakeOpenAI) -> None:
    """A run the LLM fails: its error was held where it was raised (the work's task, the
    early request's future, the stream's parser), and its traceback held the run's frames,
    the request to the LLM among them, until the collector ran. With the collector off, after
    runs failed in each way, no error may be among what only it could free."""
    gc.collect()
    gc.disable()
    try:
        for i, reply in enumerate(
            [
                FakeReply(status=500, error_message="boom"),
                FakeReply(text="half an answer here", malformed_after=2),
                FakeReply(text="half an answer here", drop_after=2),
            ]
        ):
            llm.enqueue(reply)
            events = await run(
                harness,
                pb.RunRequest(
                    session_id=f"failing-{i}", create_session=True, messages=[user("x" * 50_000)]
                ),
            )
            assert events[-1].WhichOneof("kind") == "run_error"
        await asyncio.sleep(0.05)  # the runs' ends
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kept = [
            repr(o)[:80]
            for o in gc.garbage
            if isinstance(o, Exception) and not isinstance(o, grpc.aio.AbortError)
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert kept == [], f"errors held in reference cycles: {kept}"
