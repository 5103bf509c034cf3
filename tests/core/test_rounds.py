"""The LLM round reader: deltas in, events and the assistant message out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from engine_service.core import events as ev
from engine_service.core.chat import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageDelta,
)
from engine_service.core.errors import LLMError
from engine_service.core.models import MessageStatus, Role, TextPart, ToolCall
from engine_service.core.rounds import RoundReader
from engine_service.core.trace import NO_TRACER


class Scripted(ChatModel):
    """Yields ``deltas``, then waits forever when ``hang``; ``closed``: its stream was."""

    name = "scripted"

    def __init__(self, deltas: list[ChatDelta], *, hang: bool = False) -> None:
        self.deltas = deltas
        self.hang = hang
        self.closed = False

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        try:
            for delta in self.deltas:
                yield delta
            if self.hang:
                await asyncio.Event().wait()
        finally:
            self.closed = True


def _reader(model: ChatModel) -> tuple[RoundReader, list[ev.EventBody], list[int]]:
    bodies: list[ev.EventBody] = []
    first: list[int] = []
    reader = RoundReader(
        model, NO_TRACER, emit=bodies.append, on_first_token=lambda: first.append(len(bodies))
    )
    return reader, bodies, first


async def test_a_round_s_deltas_become_events_in_order_and_one_assistant_message() -> None:
    model = Scripted(
        [
            ReasoningDelta("think"),
            TextDelta("Hel"),
            TextDelta("lo"),
            ToolCallDelta(0, id="c1", name="clock", arguments='{"tz":'),
            ToolCallDelta(0, arguments='"UTC"}'),
            UsageDelta(5, 7),
        ]
    )
    reader, bodies, first = _reader(model)

    message = await reader.read(ChatRequest(messages=[], tools=[]))

    kinds = [type(b).__name__ for b in bodies]
    assert kinds == [
        "ReasoningStart",
        "ReasoningMessageStart",
        "ReasoningMessageContent",
        "ReasoningMessageEnd",
        "ReasoningEnd",
        "TextMessageStart",
        "TextMessageContent",
        "TextMessageContent",
        "TextMessageEnd",
        "ToolCallStart",
        "ToolCallArgs",
        "ToolCallArgs",
        "ToolCallEnd",
    ]
    assert first[0] == 0  # the reasoning was the first token
    assert message.role is Role.ASSISTANT and message.content == [TextPart("Hello")]
    assert message.tool_calls == [ToolCall("c1", "clock", '{"tz":"UTC"}')]
    assert (reader.usage.input_tokens, reader.usage.output_tokens) == (5, 7)
    assert reader.close() is None  # nothing is left open


async def test_a_stopped_round_closes_what_is_open_and_keeps_the_partial_answer() -> None:
    model = Scripted(
        [TextDelta("half an "), TextDelta("answer"), ToolCallDelta(0, id="c1", name="clock")],
        hang=True,
    )
    bodies: list[ev.EventBody] = []
    call_started = asyncio.Event()

    def emit(body: ev.EventBody) -> None:
        bodies.append(body)
        if isinstance(body, ev.ToolCallStart):
            call_started.set()

    reader = RoundReader(model, NO_TRACER, emit=emit, on_first_token=lambda: None)
    round_ = asyncio.create_task(reader.read(ChatRequest(messages=[], tools=[])))
    async with asyncio.timeout(10):
        await call_started.wait()
    round_.cancel()
    await asyncio.gather(round_, return_exceptions=True)

    partial = reader.close()

    assert [type(b).__name__ for b in bodies[-2:]] == ["ToolCallStart", "ToolCallEnd"]
    assert isinstance(bodies[3], ev.TextMessageEnd)  # the text closed as the call began
    assert partial is not None and partial.status is MessageStatus.INTERRUPTED
    assert partial.content == [TextPart("half an answer")]
    assert reader.close() is None


async def test_each_answer_s_start_is_sent_before_the_next_delta_is_read() -> None:
    # The first text, reasoning and tool call of a round each wait for send_now (stored
    # and sent) before the reader asks the model for more; later deltas only yield.
    read: list[str] = []

    class Recorded(ChatModel):
        name = "recorded"

        async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
            for delta in (
                ReasoningDelta("hm"),
                ReasoningDelta("m"),
                TextDelta("Hel"),
                TextDelta("lo"),
                ToolCallDelta(0, id="c1", name="clock", arguments="{}"),
            ):
                read.append(type(delta).__name__)
                yield delta

    sent: list[tuple[int, list[str]]] = []
    bodies: list[ev.EventBody] = []

    async def send_now() -> None:
        sent.append((len(bodies), list(read)))

    reader = RoundReader(
        Recorded(), NO_TRACER, emit=bodies.append, on_first_token=lambda: None, send_now=send_now
    )
    await reader.read(ChatRequest(messages=[], tools=[]))

    # Sent right after each start's events were emitted, before the next delta was read.
    assert sent == [
        (3, ["ReasoningDelta"]),
        (8, ["ReasoningDelta", "ReasoningDelta", "TextDelta"]),
        (12, ["ReasoningDelta", "ReasoningDelta", "TextDelta", "TextDelta", "ToolCallDelta"]),
    ]
    assert [type(b).__name__ for b in bodies[:3]] == [
        "ReasoningStart",
        "ReasoningMessageStart",
        "ReasoningMessageContent",
    ]
    assert type(bodies[7]).__name__ == "TextMessageContent"
    assert type(bodies[11]).__name__ == "ToolCallArgs"


# --- the bounds of a round, for any ChatModel ---------------------------------------------


async def test_a_round_s_text_reasoning_and_tool_calls_count_together_in_utf8_bytes() -> None:
    # 4 + 6 ("héhé" is 6 bytes) + 5 ("clock") + 6 (the arguments) = 21: one past 20.
    model = Scripted(
        [
            ReasoningDelta("hmm "),
            TextDelta("héhé"),
            ToolCallDelta(0, id="c1", name="clock", arguments='{"tz":'),
            TextDelta("never shown"),
        ],
        hang=True,
    )
    bodies: list[ev.EventBody] = []
    reader = RoundReader(
        model, NO_TRACER, emit=bodies.append, on_first_token=lambda: None, max_answer_bytes=20
    )

    with pytest.raises(LLMError) as caught:
        async with asyncio.timeout(10):
            await reader.read(ChatRequest(messages=[], tools=[]))

    assert caught.value.code == "llm_answer_too_long"
    assert not caught.value.retryable
    assert caught.value.message == (
        "the LLM's answer passed 20 bytes in one round ([llm] max_answer_bytes);"
        " the engine stopped reading it"
    )
    assert model.closed  # the reader closed the model's stream, not the collector
    assert any(isinstance(b, ev.ToolCallStart) for b in bodies)
    assert not any(isinstance(b, ev.ToolCallArgs) for b in bodies)  # its arguments passed it
    assert [b.delta for b in bodies if isinstance(b, ev.TextMessageContent)] == ["héhé"]
    partial = reader.close()
    assert partial is not None and partial.content == [TextPart("héhé")]


async def test_a_round_with_one_tool_call_too_many_fails_as_that_call_opens() -> None:
    deltas: list[ChatDelta] = [ToolCallDelta(0, id="c0", name="clock", arguments="{}")]
    deltas += [ToolCallDelta(1, id="c1", name="clock"), ToolCallDelta(1, arguments="{}")]
    deltas += [ToolCallDelta(0, arguments=" "), ToolCallDelta(2, id="c2", name="clock")]
    model = Scripted(deltas, hang=True)  # more of an open call is no new call
    bodies: list[ev.EventBody] = []
    reader = RoundReader(
        model, NO_TRACER, emit=bodies.append, on_first_token=lambda: None, max_tool_calls=2
    )

    with pytest.raises(LLMError) as caught:
        async with asyncio.timeout(10):
            await reader.read(ChatRequest(messages=[], tools=[]))

    assert caught.value.code == "llm_too_many_tool_calls"
    assert "more than 2 tool calls in one round" in caught.value.message
    assert "[llm] max_tool_calls_per_round" in caught.value.message
    assert [b.tool_call_id for b in bodies if isinstance(b, ev.ToolCallStart)] == ["c0", "c1"]
    assert model.closed


async def test_a_round_that_outlasts_round_timeout_fails_and_closes_the_model_s_stream() -> None:
    model = Scripted([TextDelta("slow")], hang=True)
    reader = RoundReader(
        model, NO_TRACER, emit=lambda body: None, on_first_token=lambda: None, round_timeout=0.2
    )

    with pytest.raises(LLMError) as caught:
        async with asyncio.timeout(10):
            await reader.read(ChatRequest(messages=[], tools=[]))

    assert caught.value.code == "llm_timeout"
    assert caught.value.message == (
        "the LLM's answer took longer than 0.2s ([llm] round_timeout);"
        " the engine stopped reading it"
    )
    assert model.closed


async def test_a_stop_during_a_round_is_a_cancel_not_a_timeout() -> None:
    model = Scripted([TextDelta("a")], hang=True)
    answered = asyncio.Event()
    reader = RoundReader(
        model, NO_TRACER, emit=lambda body: None, on_first_token=answered.set, round_timeout=60
    )
    round_ = asyncio.create_task(reader.read(ChatRequest(messages=[], tools=[])))
    async with asyncio.timeout(10):
        await answered.wait()
    round_.cancel()

    with pytest.raises(asyncio.CancelledError):
        await round_
    assert model.closed
