"""A conversation never dies of its own length (docs/conversations.md): what the LLM is
sent fits its window, the stored history keeps every message, and a run reads only the
checkpoint and the messages after it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from engine_service.core import events as ev
from engine_service.core.context import ContextLimits
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.errors import ContextTooLong
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.stores import MemorySessionStore, SessionStore
from tests.core.context_helpers import Chat, open_chat, tool_call, tool_result, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply

WINDOW = 4000


def compacted(bodies: list[ev.EventBody]) -> list[ev.Custom]:
    return [b for b in bodies if isinstance(b, ev.Custom) and b.name == "compacted"]


def ended(bodies: list[ev.EventBody]) -> ev.RunFinished | ev.RunError:
    last = bodies[-1]
    assert isinstance(last, ev.RunFinished | ev.RunError)
    return last


@pytest.mark.parametrize("mode", ["summarize", "trim"])
async def test_a_long_conversation_on_a_small_window_never_fails(
    fake: FakeOpenAI, any_store: SessionStore, mode: str
) -> None:
    """100 turns of ~300-token answers with a 4,000-token window (the bench runs 500)."""
    fake.context_window = WINDOW
    fake.answer_words = 150  # "wordN " x 150: about 300 tokens as the fake counts
    chat = await open_chat(fake, any_store, ContextLimits(window=WINDOW, compaction=mode))
    events: list[ev.Custom] = []
    try:
        for index in range(100):
            bodies = await chat.turn("s", user(f"question {index} " + "why? " * 20))
            assert isinstance(ended(bodies), ev.RunFinished), ended(bodies)
            events += compacted(bodies)
    finally:
        await chat.engine.shutdown(1.0)

    assert fake.overflows == 0
    assert max(fake.prompt_tokens) <= WINDOW
    assert len(await any_store.all_messages("s")) == 200  # every message kept
    assert len(events) >= 5
    assert {e.value["mode"] for e in events} == {mode}
    checkpoint, after = await any_store.context_messages("s")
    assert checkpoint is not None and checkpoint.covered + len(after) == 200
    assert bool(checkpoint.summary) is (mode == "summarize")
    assert len(after) < 40  # a run reads the messages after the checkpoint only


async def test_with_compaction_off_the_run_fails_clearly_once_the_window_is_full(
    fake: FakeOpenAI,
) -> None:
    fake.answer_words = 150
    chat = await open_chat(fake, MemorySessionStore(), ContextLimits(window=2000, compaction="off"))
    try:
        for index in range(20):
            bodies = await chat.turn("s", user(f"question {index}"))
            if isinstance(ended(bodies), ev.RunError):
                break
    finally:
        await chat.engine.shutdown(1.0)

    error = ended(bodies)
    assert isinstance(error, ev.RunError)
    assert error.code == "context_too_long"
    assert "too long for the model" in error.message and "1,500" in error.message
    assert fake.overflows == 0  # refused before it was sent


async def test_the_llms_own_context_error_compacts_once_and_retries(fake: FakeOpenAI) -> None:
    """The engine thinks the window is larger than it is: the LLM says so, and the run
    compacts and goes on."""
    fake.context_window = 1500
    fake.answer_words = 150
    chat = await open_chat(fake, MemorySessionStore(), ContextLimits(window=8000))
    try:
        outcomes = []
        for index in range(12):
            bodies = await chat.turn("s", user(f"question {index}"))
            outcomes.append(type(ended(bodies)))
    finally:
        await chat.engine.shutdown(1.0)

    assert outcomes == [ev.RunFinished] * 12
    assert fake.overflows >= 1


async def test_when_the_retry_fails_too_the_run_ends_with_context_too_long(
    fake: FakeOpenAI,
) -> None:
    fake.context_window = 300
    chat = await open_chat(fake, MemorySessionStore(), ContextLimits(window=8000))
    try:
        bodies = await chat.turn("s", user("hello " * 400))  # fits 8000, not 300
    finally:
        await chat.engine.shutdown(1.0)

    error = ended(bodies)
    assert isinstance(error, ev.RunError)
    assert error.code == "context_too_long"
    assert "too long for the model" in error.message and "context_tokens" in error.message
    assert fake.overflows == 1  # nothing could be cut: no retry, no loop


async def test_a_user_message_larger_than_the_budget_is_refused_before_the_run(
    fake: FakeOpenAI,
) -> None:
    store = MemorySessionStore()
    chat = await open_chat(fake, store, ContextLimits(window=1000))
    try:
        refused = r"messages\[0\] is about 1,\d{3} tokens.*budget of 746"
        with pytest.raises(ContextTooLong, match=refused):
            await chat.turn("s", user("x" * 5000))
    finally:
        await chat.engine.shutdown(1.0)
    assert fake.requests == []


async def test_a_long_tool_result_is_clipped_for_the_llm_and_kept_whole(
    fake: FakeOpenAI,
) -> None:
    store = MemorySessionStore()
    chat = await open_chat(fake, store, ContextLimits(max_result_chars=1000))
    long = "0123456789" * 1000
    try:
        bodies = await chat.turn(
            "s", user("look it up", "u1"), tool_call("c1"), tool_result("c1", long)
        )
    finally:
        await chat.engine.shutdown(1.0)

    assert isinstance(ended(bodies), ev.RunFinished)
    sent = [m for m in fake.requests[-1]["messages"] if m["role"] == "tool"]
    assert sent[0]["content"].startswith(long[:1000])
    assert "9,000 of 10,000 characters cut" in sent[0]["content"]
    assert "[tools] max_result_chars" in sent[0]["content"]
    stored = [m for m in await store.all_messages("s") if m.role is Role.TOOL]
    assert stored[0].content == [TextPart(long)]


async def test_a_tool_call_and_its_result_are_never_separated(fake: FakeOpenAI) -> None:
    fake.context_window = 1200
    store = MemorySessionStore()
    chat = await open_chat(fake, store, ContextLimits(window=1200, compaction="trim"))
    try:
        for index in range(15):
            bodies = await chat.turn(
                "s",
                user(f"q{index} " + "x " * 60, f"u{index}"),
                tool_call(f"c{index}"),
                tool_result(f"c{index}", "y " * 120),
            )
            assert isinstance(ended(bodies), ev.RunFinished)
    finally:
        await chat.engine.shutdown(1.0)

    assert fake.overflows == 0
    for request in fake.requests:
        calls = {c["id"] for m in request["messages"] for c in m.get("tool_calls") or []}
        results = {m["tool_call_id"] for m in request["messages"] if m["role"] == "tool"}
        assert calls == results


async def test_when_the_summariser_fails_the_run_trims_instead(fake: FakeOpenAI) -> None:
    fake.answer_words = 150
    fake.summary_reply = FakeReply(status=500)
    chat = await open_chat(fake, MemorySessionStore(), ContextLimits(window=WINDOW))
    events = []
    try:
        for index in range(30):
            bodies = await chat.turn("s", user(f"question {index}"))
            assert isinstance(ended(bodies), ev.RunFinished)
            events += compacted(bodies)
    finally:
        await chat.engine.shutdown(1.0)

    assert fake.summaries >= 1
    assert events and {e.value["mode"] for e in events} == {"trim"}


async def test_a_summariser_that_never_ends_its_answer_is_read_only_as_far_as_it_is_kept(
    fake: FakeOpenAI,
) -> None:
    fake.answer_words = 150
    fake.summary_reply = FakeReply(text="the gist ", endless=True)
    chat = await open_chat(fake, MemorySessionStore(), ContextLimits(window=WINDOW))
    events = []
    try:
        for index in range(30):
            async with asyncio.timeout(10):
                bodies = await chat.turn("s", user(f"question {index}"))
            assert isinstance(ended(bodies), ev.RunFinished)
            events += compacted(bodies)
    finally:
        await chat.engine.shutdown(1.0)

    assert fake.summaries >= 1
    assert events and {e.value["mode"] for e in events} == {"summarize"}
    assert fake.closed_mid_stream >= fake.summaries  # each endless answer was cut
    checkpoint, _ = await chat.store.context_messages("s")
    assert checkpoint is not None and checkpoint.summary.startswith("the gist the gist ")


async def test_a_summariser_past_round_timeout_gives_way_to_trimming(fake: FakeOpenAI) -> None:
    fake.answer_words = 150
    fake.summary_reply = FakeReply(text=["the ", "gist "], hang_after=2)
    limits = ContextLimits(window=WINDOW, summary_timeout=0.2)
    chat = await open_chat(fake, MemorySessionStore(), limits)
    events = []
    try:
        for index in range(30):
            async with asyncio.timeout(10):
                bodies = await chat.turn("s", user(f"question {index}"))
            assert isinstance(ended(bodies), ev.RunFinished)
            events += compacted(bodies)
            if events:
                break
    finally:
        await chat.engine.shutdown(1.0)

    assert fake.summaries == 1
    assert [e.value["mode"] for e in events] == ["trim"]


async def test_a_history_larger_than_the_window_is_summarised_in_pieces_within_it(
    fake: FakeOpenAI,
) -> None:
    """A conversation stored without a checkpoint (an older engine, a long import): the
    summariser reads it in pieces, and no request is larger than the window."""
    fake.context_window = WINDOW
    store = MemorySessionStore()
    await store.create_session("s", "", datetime.now(UTC))
    old = [
        Message(
            id=f"o{i}",
            role=Role.USER if i % 2 == 0 else Role.ASSISTANT,
            content=[TextPart(f"old message {i} " + "blah " * 80)],
        )
        for i in range(200)
    ]
    await store.append_messages("s", old)
    chat: Chat = await open_chat(fake, store, ContextLimits(window=WINDOW))
    try:
        bodies = await chat.turn("s", user("and now?"))
    finally:
        await chat.engine.shutdown(1.0)

    finished = ended(bodies)
    assert isinstance(finished, ev.RunFinished)
    assert fake.summaries >= 3
    # The summariser's tokens are the run's too: every request's prompt is counted.
    assert finished.usage is not None
    assert finished.usage.input_tokens == sum(fake.prompt_tokens)
    assert fake.overflows == 0 and max(fake.prompt_tokens) <= WINDOW
    (event,) = compacted(bodies)
    assert event.value["covered"] >= 150
    assert event.value["summary"].startswith("Summary:")
    assert len(await store.all_messages("s")) == 202


async def test_a_messages_snapshot_still_holds_the_messages_before_the_checkpoint(
    fake: FakeOpenAI,
) -> None:
    """AG-UI ends a run with MESSAGES_SNAPSHOT, which replaces the client's view: it holds
    the latest stored messages that fit in one event, not only what the LLM is sent."""
    fake.answer_words = 150
    store = MemorySessionStore()
    chat = await open_chat(fake, store, ContextLimits(window=2000, compaction="trim"))
    try:
        for index in range(12):
            await chat.turn("s", user(f"question {index}", f"u{index}"))
        bodies = await chat.turn("s", user("last", "u-last"), snapshot=True)
    finally:
        await chat.engine.shutdown(1.0)

    checkpoint, _ = await store.context_messages("s")
    assert checkpoint is not None and checkpoint.covered > 4
    (snapshot,) = [b for b in bodies if isinstance(b, ev.MessagesSnapshot)]
    ids = [m.id for m in snapshot.messages]
    assert ids[0] == "u0" and ids[-1] != "u-last" and "u-last" in ids
    assert len(ids) == 26


async def test_the_token_budget_is_charged_what_the_summariser_used_too(fake: FakeOpenAI) -> None:
    """A summary is LLM calls of the run: the principal's daily count holds them, so a
    budget cannot be outrun by conversations that compact."""
    fake.context_window = WINDOW
    store = MemorySessionStore()
    await store.create_session("s", "", datetime.now(UTC))
    old = [
        Message(id=f"o{i}", role=Role.USER, content=[TextPart(f"old {i} " + "blah " * 80)])
        for i in range(60)
    ]
    await store.append_messages("s", old)
    model = OpenAIChatModel(base_url=fake.base_url, api_key="k", model="fake-model", max_retries=0)
    limits = EngineLimits(run=RunLimits(context=ContextLimits(window=WINDOW)), tokens_per_day=10**9)
    engine = Engine(store, model, ToolRegistry(), limits)
    await engine.start()
    try:
        bodies = await Chat(engine, store).turn("s", user("and now?"))
    finally:
        await engine.shutdown(1.0)

    finished = ended(bodies)
    assert isinstance(finished, ev.RunFinished) and finished.usage is not None
    assert fake.summaries >= 1
    used = await store.tokens_used("", datetime.now(UTC).date())
    assert (
        used
        == finished.usage.total_tokens
        == sum(fake.prompt_tokens) + finished.usage.output_tokens
    )
