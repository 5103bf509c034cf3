"""One LLM round is bounded whatever the model does (``core/rounds.py``): its bytes
(``[llm] max_answer_bytes``), its tool calls (``[llm] max_tool_calls_per_round``) and its
time (``[llm] round_timeout``); and a stream that only sends comments after its first token
stalls (``[llm] timeout``). A real engine over gRPC, the LLM the real HTTP fake; each run
ends like any LLM failure mid-answer: RUN_ERROR, the streamed text kept in the event log,
no half-written message, the conversation free for its next turn."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core import events as ev
from tests.engine.harness import (
    WAIT,
    Harness,
    engine_settings,
    kind,
    kinds,
    run,
    running_engine,
    text_of,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

LIMIT = 16 * 1024


@pytest.fixture
async def bounded(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="k",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_LLM_MAX_ANSWER_BYTES=str(LIMIT),
        AGENTIK_MAX_TOOL_CALLS_PER_ROUND="3",
        AGENTIK_LLM_ROUND_TIMEOUT="1",
        AGENTIK_LLM_TIMEOUT="0.3",
    )
    async with running_engine(settings) as harness:
        yield harness


async def _stored_text(harness: Harness, session_id: str) -> str:
    events = await harness.engine.store.read_events(session_id, 0, 100_000)
    return "".join(e.body.delta for e in events if isinstance(e.body, ev.TextMessageContent))


async def _messages(harness: Harness, session_id: str) -> list[pb.Message]:
    reply = await harness.stub.ListMessages(pb.ListMessagesRequest(session_id=session_id))
    return list(reply.messages)


async def _left_usable(harness: Harness, session_id: str) -> None:
    """The cut round left no half-written answer in the history (only the user's message),
    and the next turn runs."""
    assert [m.role for m in await _messages(harness, session_id)] == [pb.ROLE_USER]
    events = await run(harness, pb.RunRequest(session_id=session_id, messages=[user("again")]))
    assert kinds(events)[-1] == "run_finished"
    assert text_of(events) == "Echo: again"
    roles = [m.role for m in await _messages(harness, session_id)]
    assert roles == [pb.ROLE_USER, pb.ROLE_USER, pb.ROLE_ASSISTANT]


async def test_an_endless_answer_ends_the_run_at_max_answer_bytes_and_the_next_turn_works(
    bounded: Harness, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(text="lorem ipsum dolor ", endless=True))

    events = await run(
        bounded, pb.RunRequest(session_id="s", create_session=True, messages=[user("x")])
    )

    error = events[-1].run_error
    assert kinds(events)[-1] == "run_error"
    assert error.code == "llm_answer_too_long"
    assert f"{LIMIT:,} bytes" in error.message and "[llm] max_answer_bytes" in error.message
    shown = text_of(events)
    # Cut before the delta that passed the limit (tokens read together are one delta: a
    # 64 KiB read holds about 2 KiB of this text).
    assert LIMIT - 4096 < len(shown) <= LIMIT
    assert shown.startswith("lorem ipsum dolor lorem ipsum ")
    assert kinds(events).count("text_message_start") == kinds(events).count("text_message_end")
    assert await llm.wait_connection_closed_async(WAIT)  # the engine stopped reading
    assert await _stored_text(bounded, "s") == shown  # what the client saw is stored
    await _left_usable(bounded, "s")


async def test_too_many_tool_calls_in_one_round_end_the_run_before_any_tool_runs(
    bounded: Harness, llm: FakeOpenAI
) -> None:
    calls = [FakeToolCall("calculate", {"expression": "1+1"}, id=f"c{i}") for i in range(5)]
    llm.enqueue(FakeReply(tool_calls=calls))

    events = await run(
        bounded, pb.RunRequest(session_id="t", create_session=True, messages=[user("x")])
    )

    error = events[-1].run_error
    assert error.code == "llm_too_many_tool_calls"
    assert "more than 3 tool calls" in error.message
    assert "[llm] max_tool_calls_per_round" in error.message
    assert kinds(events).count("tool_call_start") == 3
    assert kinds(events).count("tool_call_end") == 3
    assert "tool_call_result" not in kinds(events)
    assert len(llm.requests) == 1
    await _left_usable(bounded, "t")


async def test_an_answer_that_keeps_coming_past_round_timeout_ends_with_llm_timeout(
    bounded: Harness, llm: FakeOpenAI
) -> None:
    # A token every 20 ms: never a stall, never near the byte limit; only the deadline.
    llm.enqueue(FakeReply(text="tick ", endless=True, delay=0.02))
    started = time.monotonic()

    events = await run(
        bounded, pb.RunRequest(session_id="r", create_session=True, messages=[user("x")])
    )

    elapsed = time.monotonic() - started
    error = events[-1].run_error
    assert error.code == "llm_timeout"
    assert "longer than 1s" in error.message and "[llm] round_timeout" in error.message
    assert 0.9 < elapsed < WAIT
    assert text_of(events).startswith("tick tick ")
    assert await llm.wait_connection_closed_async(WAIT)
    await _left_usable(bounded, "r")


async def test_a_stream_of_keep_alive_comments_after_the_first_token_fails_after_the_timeout(
    bounded: Harness, llm: FakeOpenAI
) -> None:
    # One token, then only ": keep-alive" every 50 ms: bytes, but no data for 0.3 s.
    llm.enqueue(FakeReply(text=["one ", "never"], comments_after=2))
    started = time.monotonic()

    events = await run(
        bounded, pb.RunRequest(session_id="k", create_session=True, messages=[user("x")])
    )

    elapsed = time.monotonic() - started
    error = events[-1].run_error
    assert error.code == "llm_timeout"
    assert "no data for 0.3s" in error.message and "[llm] timeout" in error.message
    assert 0.25 < elapsed < WAIT  # the message says which bound: the timeout
    assert text_of(events) == "one "
    assert [kind(e) for e in events].count("text_message_end") == 1
    assert await llm.wait_connection_closed_async(WAIT)
    await _left_usable(bounded, "k")
