"""The LLM round reader: one round's deltas into events, and the assistant message.

A :class:`RoundReader` reads the model's stream for one round (``read``), emits the
reasoning, text and tool-call events as the deltas come, and returns the assistant
message. What is open at any moment (a text, a reasoning, the tool calls) is kept, so a
stop can close it and keep the partial answer (``close``).

One job, callbacks instead of imports (as ``core.leases``): events go out through
``emit``, the first token is reported to ``on_first_token``. When an answer starts (its
first text, reasoning or tool call) the reader awaits ``send_now`` before it reads on, so
that what a caller waits for is stored and sent before the rest of the LLM's burst is
parsed; between other deltas it only yields to the loop.

Whatever the model does, a round is bounded (``RunLimits``): its text, reasoning and
tool-call bytes by ``max_answer_bytes`` (``llm_answer_too_long``), its tool calls by
``max_tool_calls`` (``llm_too_many_tool_calls``), its time from the request by
``round_timeout`` (``llm_timeout``). Past a bound the reader stops reading and closes the
model's stream (its HTTP response), and the round fails like any other LLM failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from engine_service.core import events as ev
from engine_service.core.chat import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageDelta,
    read_until,
)
from engine_service.core.errors import LLMError
from engine_service.core.history import new_id
from engine_service.core.ids import is_valid_id
from engine_service.core.models import Message, MessageStatus, Role, TextPart, ToolCall
from engine_service.core.trace import Span, Tracer

__all__ = ["DELTAS_PER_TURN", "MAX_ANSWER_BYTES", "MAX_TOOL_CALLS", "ROUND_TIMEOUT", "RoundReader"]

DELTAS_PER_TURN = 4
"""Deltas a round reads, at most, before it lets the loop run others."""
MAX_ANSWER_BYTES = 8 * 1024 * 1024
"""Bytes (UTF-8) of one round's text, reasoning and tool calls, by default."""
MAX_TOOL_CALLS = 128
"""Tool calls in one round, by default (OpenAI's limit of tools a request may offer)."""
ROUND_TIMEOUT = 1800.0
"""Seconds one round may take from its request to its last delta, by default."""


@dataclass(slots=True)
class _Early:
    request: ChatRequest
    stream: AsyncIterator[ChatDelta]
    first: asyncio.Future[ChatDelta]
    """The stream's first delta, read as soon as it comes."""
    sent: float
    """When the request was sent (the loop's clock): the round's time starts there."""


async def _resumed(early: _Early) -> AsyncGenerator[ChatDelta, None]:
    """The early request's stream from its first delta on; closed when this one is."""
    try:
        try:
            delta = await early.first
        except StopAsyncIteration:
            return
        yield delta
        async for delta in early.stream:
            yield delta
    finally:
        early.first.cancel()
        await early.stream.aclose()  # type: ignore[attr-defined]


@dataclass(slots=True)
class _OpenCall:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    started: bool = False


class RoundReader:
    """Reads a run's LLM rounds, one at a time; ``usage`` adds up their tokens."""

    def __init__(
        self,
        model: ChatModel,
        tracer: Tracer,
        *,
        emit: Callable[[ev.EventBody], object],
        on_first_token: Callable[[], None],
        send_now: Callable[[], Awaitable[None]] | None = None,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
        max_tool_calls: int = MAX_TOOL_CALLS,
        round_timeout: float = ROUND_TIMEOUT,
    ) -> None:
        """``max_answer_bytes``, ``max_tool_calls``, ``round_timeout``: the bounds of each
        round (``[llm] max_answer_bytes``, ``max_tool_calls_per_round``, ``round_timeout``)."""
        self.model = model
        self.tracer = tracer
        self.usage = ev.Usage()
        self._emit = emit
        self._on_first_token = on_first_token
        self._send_now = send_now
        self._started = False
        """An answer started with the last delta: send it before reading on."""
        self._message_id = ""
        self._text_open = False
        self._text: list[str] = []
        self._reasoning_id = ""
        self._calls: dict[int, _OpenCall] = {}
        self._max_answer_bytes = max_answer_bytes
        self._max_tool_calls = max_tool_calls
        self._round_timeout = round_timeout
        self._answer_bytes = 0
        """Bytes of the round's answer so far (text, reasoning, tool names and arguments)."""
        self._early: _Early | None = None
        """The first round's request, sent before the run's input was stored."""

    def send_early(self, request: ChatRequest) -> None:
        """Send ``request`` now and read its stream up to the first delta, which waits
        until :meth:`read` is asked this very request: the LLM starts answering while
        the run's input is being stored, and nothing of its answer is published before."""
        stream = aiter(self.model.stream(request))
        sent = asyncio.get_running_loop().time()
        self._early = _Early(request, stream, asyncio.ensure_future(anext(stream)), sent)

    def cancel_early(self) -> None:
        """Stop reading an early request that was never read (``drop_early`` closes it)."""
        if self._early is not None:
            self._early.first.cancel()

    async def drop_early(self) -> None:
        """Close an early request that was never read (the run stopped or failed first)."""
        early, self._early = self._early, None
        if early is None:
            return
        early.first.cancel()
        await asyncio.wait([early.first])  # cancelled, or done: its delta or error is dropped
        if not early.first.cancelled():
            early.first.exception()  # retrieved: an error of an answer never read is not logged
        await early.stream.aclose()  # type: ignore[attr-defined]

    def _stream(self, request: ChatRequest) -> tuple[AsyncIterator[ChatDelta], float]:
        """The round's stream, and when its request was sent (the loop's clock)."""
        early, self._early = self._early, None
        if early is None or early.request is not request:
            if early is not None:
                early.first.cancel()
            return self.model.stream(request), asyncio.get_running_loop().time()
        return _resumed(early), early.sent

    async def read(self, request: ChatRequest) -> Message:
        """One LLM round in its span: model, endpoint, first token, tokens, error code."""
        model = self.model
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model.name}
        if model.endpoint_host:
            attributes["server.address"] = model.endpoint_host
        usage = self.usage
        input_before, output_before = usage.input_tokens, usage.output_tokens
        with self.tracer.span(f"chat {model.name}", attributes) as span:
            try:
                return await self._read(request, span)
            except LLMError as exc:
                span.fail(exc.code, exc.message)
                raise
            finally:
                span.set("gen_ai.usage.input_tokens", usage.input_tokens - input_before)
                span.set("gen_ai.usage.output_tokens", usage.output_tokens - output_before)

    async def _read(self, request: ChatRequest, span: Span) -> Message:
        self._message_id = new_id()
        self._text = []
        self._calls = {}
        self._answer_bytes = 0
        stream, sent = self._stream(request)
        timed_out = (
            f"the LLM's answer took longer than {self._round_timeout:g}s"
            " ([llm] round_timeout); the engine stopped reading it"
        )
        async with read_until(stream, sent + self._round_timeout, timed_out) as deltas:
            await self._deltas(deltas, span)
        return self._answer()

    async def _deltas(self, stream: AsyncIterator[ChatDelta], span: Span) -> None:
        """Read the round's deltas into events, to the stream's end."""
        message_id = self._message_id
        emit = self._emit
        usage = self.usage
        waiting = True  # for the first token
        unyielded = 0
        async for delta in stream:
            kind = type(delta)
            if waiting and kind is not UsageDelta:
                span.event("first_token")
                waiting = False
            if kind is TextDelta:
                text = delta.text  # type: ignore[union-attr]
                if not text:
                    continue
                self._took(text)
                if self._reasoning_id:
                    self._end_reasoning()
                if not self._text_open:
                    self._start()
                    emit(ev.TextMessageStart(message_id))
                    self._text_open = True
                self._text.append(text)
                emit(ev.TextMessageContent(message_id, text))
            elif kind is ToolCallDelta:
                self._tool_call_delta(delta)  # type: ignore[arg-type]
            elif kind is ReasoningDelta:
                self._reasoning_delta(delta.text)  # type: ignore[union-attr]
            elif kind is UsageDelta:
                usage.input_tokens += delta.input_tokens  # type: ignore[union-attr]
                usage.output_tokens += delta.output_tokens  # type: ignore[union-attr]
                usage.cached_tokens += delta.cached_tokens  # type: ignore[union-attr]
                usage.total_tokens = usage.input_tokens + usage.output_tokens
            # Yield to the loop every few deltas that came without a wait: a model whose
            # deltas come in a burst (or without ever awaiting) would otherwise be read in
            # one go while the followers' sends (and their completions) wait. Not after
            # each: a delta that came alone is followed by a wait for the next anyway, and a
            # turn of the loop more per token was 3-6 % of the engine at 256 slow streams.
            # The start of an answer waits until it is stored and sent: its write, the
            # followers' wake-up and the gRPC send each take a turn of the loop, and each
            # turn would otherwise parse another piece of the burst first.
            if self._started and self._send_now is not None:
                self._started = False
                unyielded = 0
                await self._send_now()
            else:
                unyielded += 1
                if unyielded == DELTAS_PER_TURN:
                    unyielded = 0
                    await asyncio.sleep(0)

    def _answer(self) -> Message:
        """Close what is open; the round's assistant message."""
        message_id = self._message_id
        emit = self._emit
        self._end_reasoning()
        self._end_text()
        calls = []
        for call in self._calls.values():  # in the order the calls began
            if not call.started:
                continue
            emit(ev.ToolCallEnd(call.id))
            calls.append(ToolCall(call.id, call.name, "".join(call.arguments)))
        self._calls = {}
        content = [TextPart("".join(self._text))] if self._text else []
        self._text = []
        return Message(id=message_id, role=Role.ASSISTANT, content=list(content), tool_calls=calls)

    def _tool_call_delta(self, delta: ToolCallDelta) -> None:
        call = self._calls.get(delta.index)
        if call is None:
            if len(self._calls) >= self._max_tool_calls:
                raise LLMError(
                    "llm_too_many_tool_calls",
                    f"the LLM asked for more than {self._max_tool_calls} tool calls in one"
                    " round ([llm] max_tool_calls_per_round)",
                )
            self._took(delta.name)
            # The client sends this id back with the result: it must keep the id rule.
            call_id = delta.id if is_valid_id(delta.id) else new_id()
            call = self._calls[delta.index] = _OpenCall(id=call_id, name=delta.name)
        elif delta.name and not call.name:
            self._took(delta.name)
            call.name = delta.name
        if not call.started and call.name:
            self._start()
            self._end_text()
            self._emit(ev.ToolCallStart(call.id, call.name, self._message_id))
            call.started = True
            if call.arguments:
                self._emit(ev.ToolCallArgs(call.id, "".join(call.arguments)))
        if delta.arguments:
            self._took(delta.arguments)
            call.arguments.append(delta.arguments)
            if call.started:
                self._emit(ev.ToolCallArgs(call.id, delta.arguments))

    def _reasoning_delta(self, text: str) -> None:
        if not text:
            return
        self._took(text)
        if not self._reasoning_id:
            self._start()
            self._end_text()
            self._reasoning_id = new_id()
            self._emit(ev.ReasoningStart(self._reasoning_id))
            self._emit(ev.ReasoningMessageStart(self._reasoning_id))
        self._emit(ev.ReasoningMessageContent(self._reasoning_id, text))

    def _took(self, text: str) -> None:
        """Count ``text`` into the round's answer; ``llm_answer_too_long`` past the bound
        (before it is kept or shown: what the round holds stays within it)."""
        self._answer_bytes += len(text) if text.isascii() else len(text.encode())
        if self._answer_bytes > self._max_answer_bytes:
            raise LLMError(
                "llm_answer_too_long",
                f"the LLM's answer passed {self._max_answer_bytes:,} bytes in one round"
                " ([llm] max_answer_bytes); the engine stopped reading it",
            )

    def _start(self) -> None:
        """An answer (a text, a reasoning or a tool call) starts with this delta."""
        self._on_first_token()
        self._started = True

    def _end_reasoning(self) -> None:
        if self._reasoning_id:
            self._emit(ev.ReasoningMessageEnd(self._reasoning_id))
            self._emit(ev.ReasoningEnd(self._reasoning_id))
            self._reasoning_id = ""

    def _end_text(self) -> None:
        if self._text_open:
            self._emit(ev.TextMessageEnd(self._message_id))
            self._text_open = False

    @property
    def said_anything(self) -> bool:
        """Whether the round read so far (or cut by an error) has shown text, reasoning or
        a tool call to clients."""
        return bool(self._text or self._calls or self._reasoning_id)

    def close(self) -> Message | None:
        """Close what is open; the partial answer so far, marked interrupted (the run
        stores it when it was stopped), or None."""
        self._end_reasoning()
        self._end_text()
        for open_call in self._calls.values():
            if open_call.started:
                self._emit(ev.ToolCallEnd(open_call.id))
        self._calls = {}
        if not self._text:
            return None
        partial = Message(
            id=self._message_id,
            role=Role.ASSISTANT,
            content=[TextPart("".join(self._text))],
            status=MessageStatus.INTERRUPTED,
        )
        self._text = []
        return partial
