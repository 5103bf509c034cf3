"""The LLM round reader: deltas in, events and the assistant message out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

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
from engine_service.core.models import MessageStatus, Role, TextPart, ToolCall
from engine_service.core.rounds import RoundReader
from engine_service.core.trace import NO_TRACER


class Scripted(ChatModel):
    """Yields ``deltas``, then waits forever when ``hang``."""

    name = "scripted"

    def __init__(self, deltas: list[ChatDelta], *, hang: bool = False) -> None:
        self.deltas = deltas
        self.hang = hang

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        for delta in self.deltas:
            yield delta
        if self.hang:
            await asyncio.Event().wait()


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
