"""The context budget: what the LLM is sent fits its window; the stored history keeps all.

Counting. A request's size is the LLM's own count of the previous request
(``usage.prompt_tokens``) when the new request starts with the same messages, plus an
estimate for what is new; with no such count, the whole request is estimated. The
estimate (``estimate_text``) needs no tokenizer files, so nothing is fetched at run time:
about four characters a token for ASCII, more tokens for other scripts, which most
tokenizers split finer; it errs on the large side.

Compaction. When the next request would be larger than the budget (the window less the
room kept for the answer), the oldest part of the conversation is replaced in what the
LLM is sent:

- ``summarize``: the LLM writes a summary of it (in pieces when it is larger than the
  window; trimming instead when the LLM fails);
- ``trim``: it is dropped, whole turns first;
- ``off``: the run fails with ``context_too_long``.

The cut is made before a message that is not a tool result, so a tool call and its result
are never separated. What was replaced is recorded as a :class:`Checkpoint` in the store
(the messages it covers, the summary, its size), and later runs read only the checkpoint
and the messages after it.

Each request is compacted at most once, plus once more when the LLM itself says the
context is too long: nothing here loops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agentik.limits import COMPACTION_MODES, MIN_CONTEXT_TOKENS
from engine_service.core import events as ev
from engine_service.core.chat import (
    ChatModel,
    ChatRequest,
    TextDelta,
    ToolSpec,
    UsageDelta,
    read_until,
)
from engine_service.core.errors import ContextTooLong, LLMError, StorageUnavailable
from engine_service.core.history import chat_messages
from engine_service.core.models import ContextItem, Message, Role, TextPart
from engine_service.core.store import Checkpoint, SessionStore
from engine_service.core.trace import NO_TRACER, AttributeValue, Tracer
from engine_service.core.window import (
    CONTEXT_TOO_LONG,
    LLM_CONTEXT_ERROR,
    MESSAGE_OVERHEAD,
    SMALLEST_MESSAGE,
    Anchors,
    ContextLimits,
    clip_results,
    default_window,
    estimate_message,
    estimate_text,
    estimate_tools,
    is_overflow,
    plan_cut,
    refuse_too_long,
)

__all__ = [
    "COMPACTION_MODES",
    "CONTEXT_TOO_LONG",
    "LLM_CONTEXT_ERROR",
    "MIN_CONTEXT_TOKENS",
    "SMALLEST_MESSAGE",
    "Anchors",
    "ContextLimits",
    "ContextTooLong",
    "RunContext",
    "clip_results",
    "default_window",
    "estimate_message",
    "estimate_text",
    "is_overflow",
    "plan_cut",
    "refuse_too_long",
]

log = logging.getLogger(__name__)

KEEP_SHARE = 0.5
"""After a compaction the messages kept take at most this share of the budget, so the
next turns have room before the next compaction."""
SUMMARY_SHARE = 0.125
"""The most of the budget a summary may take (longer ones are clipped), and never more
than the room kept for an answer."""
MAX_SUMMARY_PIECES = 8
"""The most LLM calls one summary takes; older messages beyond them are trimmed."""
SUMMARY_INSTRUCTION = (
    "You summarise conversations between a user and an AI assistant so the assistant can "
    "go on without the full text. Write a concise summary of the conversation below, "
    "merged with the summary so far if there is one: the user's goals and preferences, "
    "facts and decisions, what tools returned that still matters, and open questions. "
    "Write only the summary, in at most {words} words."
)
SUMMARY_HEADING = "Summary of the earlier conversation (older messages are not shown):"


def _transcript(messages: Sequence[Message], max_chars: int) -> str:
    """The messages as plain text lines for the summariser, each at most ``max_chars``."""
    lines = []
    for message in messages:
        text = "".join(p.text for p in message.content if isinstance(p, TextPart))
        calls = "".join(f" [calls {c.name}({c.arguments})]" for c in message.tool_calls)
        line = f"{message.role.value}: {text}{calls}"
        if len(line) > max_chars:
            line = line[:max_chars] + " [...]"
        lines.append(line)
    return "\n".join(lines)


Emit = Callable[[ev.EventBody], object]
SaveCheckpoint = Callable[[Checkpoint], Awaitable[Checkpoint]]


@dataclass(slots=True)
class RunContext:
    """One run's view of the budget: builds each request within it, compacting when it
    must, and records each compaction as the session's checkpoint.

    ``history`` handed to :meth:`messages` is what the run holds: the messages after the
    checkpoint it started from. ``start`` is how many of them a compaction during this
    run covered since.
    """

    limits: ContextLimits
    session_id: str
    model: ChatModel
    anchors: Anchors
    save: SaveCheckpoint
    emit: Emit
    checkpoint: Checkpoint | None = None
    start: int = 0
    usage: list[int] = field(default_factory=lambda: [0, 0])
    """Tokens the summariser used, (input, output)."""
    tracer: Tracer = NO_TRACER
    """Each compaction is a span ``agentik.compact`` (mode, messages covered)."""

    async def round(
        self,
        request: ChatRequest,
        read: Callable[[ChatRequest], Awaitable[Message]],
        usage: ev.Usage,
        *,
        said: Callable[[], bool],
        rebuild: Callable[[], Awaitable[list[Message]]],
    ) -> Message:
        """One LLM round (``read``); when the LLM answers that its context is exceeded, one
        compaction (``rebuild``) and one retry, then ``context_too_long`` (at once when it
        ``said`` anything first). What the summariser used is added to ``usage``; the LLM's
        count of the request is kept for counting the next one."""
        before = usage.input_tokens
        spent = [0, 0]
        try:
            assistant = await read(request)
        except LLMError as exc:
            if not is_overflow(exc):
                raise
            if said():  # said mid-answer: no retry
                raise self.too_long(self.count(request), said=True) from exc
            log.info("session %s: the LLM's context is exceeded; compacting", self.session_id)
            request.messages = await rebuild()
            before = usage.input_tokens
            try:
                assistant = await read(request)
            except LLMError as again:
                if is_overflow(again):
                    raise self.too_long(self.count(request), said=True) from again
                raise
        finally:
            spent = list(self.usage)
            self.usage[:] = [0, 0]
            usage.input_tokens += spent[0]
            usage.output_tokens += spent[1]
            usage.total_tokens = usage.input_tokens + usage.output_tokens
        self.observed(request, usage.input_tokens - before - spent[0])
        return assistant

    async def snapshot_history(
        self, store: SessionStore, held: list[Message], room: int
    ) -> list[Message]:
        """The history a messages snapshot is cut from: what the run holds, or, when a
        checkpoint keeps the older messages out of it, the latest messages from the store
        (as many as could fit in ``room``: bounded, whatever the conversation's length)."""
        if self.checkpoint is None:
            return held
        try:
            return await store.recent_messages(self.session_id, room // SMALLEST_MESSAGE)
        except StorageUnavailable:
            return held

    def too_long(self, needed: int, *, said: bool = False) -> LLMError:
        """``context_too_long``; ``said``: the LLM answered so, whatever our count."""
        limits = self.limits
        if said:
            return LLMError(
                CONTEXT_TOO_LONG,
                f"the conversation is too long for the model, which says its context is "
                f"exceeded (about {needed:,} tokens by our count); its window may be smaller "
                f"than [llm] context_tokens ({limits.window:,})",
            )
        return LLMError(
            CONTEXT_TOO_LONG,
            f"the conversation is too long for the model: about {needed:,} tokens, and the model's "
            f"budget is {limits.budget:,} ([llm] context_tokens {limits.window:,} less "
            f"reserve_output_tokens {limits.reserve:,})",
        )

    def count(self, request: ChatRequest) -> int:
        """The request's tokens (the LLM's count of the last request plus an estimate)."""
        return self.anchors.count(self.session_id, request.messages, request.tools)

    def observed(self, request: ChatRequest, prompt_tokens: int) -> None:
        """The LLM counted ``request`` as ``prompt_tokens`` (0: it did not say)."""
        self.anchors.note(self.session_id, request.messages, prompt_tokens)

    def _build(
        self, system_prompt: str, context: Sequence[ContextItem], history: Sequence[Message]
    ) -> list[Message]:
        built = chat_messages(system_prompt, context, history[self.start :])
        summary = self.checkpoint.summary if self.checkpoint else ""
        if summary:
            note = f"{SUMMARY_HEADING}\n{summary}"
            if built and built[0].role is Role.SYSTEM:
                head = "".join(p.text for p in built[0].content if isinstance(p, TextPart))
                built[0] = _system(f"{head}\n\n{note}")
            else:
                built.insert(0, _system(note))
        return clip_results(built, self.limits.max_result_chars)

    def fitting(
        self,
        system_prompt: str,
        context: Sequence[ContextItem],
        history: Sequence[Message],
        tools: Sequence[ToolSpec],
    ) -> list[Message] | None:
        """The next request's messages when they fit the budget as they are (what
        :meth:`messages` gives without compacting, and without awaiting), else None."""
        built = self._build(system_prompt, context, history)
        fits = self.anchors.count(self.session_id, built, tools) <= self.limits.budget
        return built if fits else None

    async def messages(
        self,
        system_prompt: str,
        context: Sequence[ContextItem],
        history: Sequence[Message],
        tools: Sequence[ToolSpec],
        *,
        force: bool = False,
    ) -> list[Message]:
        """The LLM's messages for the next request, within the budget: compacted when they
        would not fit (or when ``force``: the LLM said they did not).

        ``LLMError(context_too_long)`` when they cannot be made to fit, or compaction is off.
        """
        built = self._build(system_prompt, context, history)
        limits = self.limits
        before = self.anchors.count(self.session_id, built, tools)
        if before <= limits.budget and not force:
            return built
        if limits.compaction == "off":
            raise self.too_long(before)
        body = built[1:] if built and built[0].role is Role.SYSTEM else built
        tokens = [estimate_message(m) for m in body]
        # What stays whatever is cut: the system message (less the old summary) and tools.
        fixed = before - sum(tokens) - (self.checkpoint.tokens if self.checkpoint else 0)
        summarize = limits.compaction == "summarize"
        # The summary is the summariser's answer: it must fit the room kept for answers too.
        summary_room = min(int(limits.budget * SUMMARY_SHARE), limits.reserve) if summarize else 0
        target = min(int(limits.budget * KEEP_SHARE), limits.budget - fixed - summary_room)
        cut = plan_cut(body, tokens, target, force=True)
        if cut == 0:
            raise self.too_long(before, said=force)
        # The stored messages the cut covers: those before the first one kept.
        held = history[self.start :]
        first_kept = body[cut].id
        at = next((i for i, m in enumerate(held) if m.id == first_kept), None)
        if at is None or at == 0:
            raise self.too_long(before, said=force)
        covered = list(held[:at])
        attributes: dict[str, AttributeValue] = {
            "agentik.session.id": self.session_id,
            "agentik.compaction.tokens": before,
        }
        with self.tracer.span("agentik.compact", attributes) as span:
            mode, summary = await self._summarise(body[:cut], summary_room)
            checkpoint = Checkpoint(
                through_id=covered[-1].id, summary=summary, tokens=estimate_text(summary)
            )
            # Stored before it is used: a crash now leaves all messages and the old one.
            checkpoint = await self.save(checkpoint)
            span.set("agentik.compaction.mode", mode)
            span.set("agentik.compaction.covered", checkpoint.covered)
        self.checkpoint = checkpoint
        self.start += at
        built = self._build(system_prompt, context, history)
        after = sum(estimate_message(m) for m in built) + estimate_tools(tools)
        log.info(
            "session %s: %s through message %s (%d messages covered): %d -> %d tokens",
            self.session_id,
            "summarised" if mode == "summarize" else "trimmed",
            checkpoint.through_id,
            checkpoint.covered,
            before,
            after,
        )
        self.emit(
            ev.Custom(
                "compacted",
                {
                    "mode": mode,
                    "covered": checkpoint.covered,
                    "through_message_id": checkpoint.through_id,
                    "tokens_before": before,
                    "tokens_after": after,
                    "summary_tokens": checkpoint.tokens,
                    "summary": summary,
                },
            )
        )
        if after > limits.budget:
            raise self.too_long(after)
        return built

    async def _summarise(self, covered: Sequence[Message], room: int) -> tuple[str, str]:
        """(mode, summary) for ``covered``: the LLM's summary merged with the previous
        one, or on failure (or in trim mode) the previous summary alone."""
        previous = self.checkpoint.summary if self.checkpoint else ""
        if self.limits.compaction != "summarize" or room <= 0:
            return "trim", _clip_tokens(previous, room) if room else ""
        try:
            summary = await self._summary(previous, covered, room)
        except LLMError as exc:
            log.warning(
                "session %s: the summariser failed (%s: %s); trimming instead",
                self.session_id,
                exc.code,
                exc.detail or exc.message,
            )
            return "trim", _clip_tokens(previous, room)
        return "summarize", summary

    async def _summary(self, previous: str, covered: Sequence[Message], room: int) -> str:
        """The summary, one LLM call per piece of ``covered`` that fits the window (at
        most ``MAX_SUMMARY_PIECES``; the oldest beyond them are left out)."""
        limits = self.limits
        instruction = SUMMARY_INSTRUCTION.format(words=max(20, room * 3 // 4))
        # Each call: instruction + summary so far + a piece, within the budget.
        piece_room = limits.budget - estimate_text(instruction) - room - 4 * MESSAGE_OVERHEAD
        if piece_room < 64:
            raise LLMError(CONTEXT_TOO_LONG, "the window is too small to summarise in")
        line_chars = piece_room * 3  # a line's characters, safely under piece_room tokens
        pieces: list[list[Message]] = [[]]
        used = 0
        for message in covered:
            size = min(estimate_message(message), piece_room)
            if pieces[-1] and used + size > piece_room:
                pieces.append([])
                used = 0
            pieces[-1].append(message)
            used += size
        summary = _clip_tokens(previous, room)
        for piece in pieces[-MAX_SUMMARY_PIECES:]:
            transcript = _transcript(piece, line_chars)
            while estimate_text(transcript) > piece_room:  # bounded: halves each time
                transcript = transcript[: len(transcript) // 2]
            text = f"Summary so far:\n{summary or '(none)'}\n\nConversation:\n{transcript}"
            request = ChatRequest(
                messages=[
                    _system(instruction),
                    Message(id="summary-input", role=Role.USER, content=[TextPart(text)]),
                ]
            )
            summary = _clip_tokens(await self._complete(request, room), room)
        return summary

    async def _complete(self, request: ChatRequest, room: int) -> str:
        """The summariser's answer, read up to twice what ``room`` keeps of it and for
        at most ``summary_timeout``: a model that never ends its answer ends the read."""
        parts: list[str] = []
        enough = 8 * room  # characters: _clip_tokens keeps about 4 a token
        read = 0
        seconds = self.limits.summary_timeout
        timed_out = f"the summariser took longer than {seconds:g}s ([llm] round_timeout)"
        deadline = asyncio.get_running_loop().time() + seconds
        async with read_until(self.model.stream(request), deadline, timed_out) as deltas:
            async for delta in deltas:
                if isinstance(delta, TextDelta):
                    parts.append(delta.text)
                    read += len(delta.text)
                    if read > enough:
                        break
                elif isinstance(delta, UsageDelta):
                    self.usage[0] += delta.input_tokens
                    self.usage[1] += delta.output_tokens
        text = "".join(parts).strip()
        if not text:
            raise LLMError("llm_bad_stream", "the summariser's answer was empty")
        return text


def _system(text: str) -> Message:
    return Message(id="system", role=Role.SYSTEM, content=[TextPart(text)])


def _clip_tokens(text: str, tokens: int) -> str:
    """``text`` cut to about ``tokens`` tokens (at a word where it can)."""
    if estimate_text(text) <= tokens:
        return text
    cut = text[: max(0, tokens * 4)]
    while cut and estimate_text(cut) > tokens:
        cut = cut[: len(cut) * 3 // 4]
    space = cut.rfind(" ")
    return (cut[:space] if space > len(cut) // 2 else cut).rstrip() + " [...]"
