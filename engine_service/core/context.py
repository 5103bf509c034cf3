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

import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agentik.limits import COMPACTION_MODES, MIN_CONTEXT_TOKENS
from engine_service.core import events as ev
from engine_service.core.chat import ChatModel, ChatRequest, TextDelta, ToolSpec, UsageDelta
from engine_service.core.errors import ContextTooLong, LLMError
from engine_service.core.history import chat_messages
from engine_service.core.models import ContextItem, ImagePart, Message, Role, TextPart
from engine_service.core.store import Checkpoint
from engine_service.core.trace import NO_TRACER, AttributeValue, Tracer

__all__ = [
    "COMPACTION_MODES",
    "CONTEXT_TOO_LONG",
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

CONTEXT_TOO_LONG = "context_too_long"
LLM_CONTEXT_ERROR = "llm_context_too_long"
"""The ``LLMError`` code of a model that answered that its context is exceeded."""

DEFAULT_WINDOW = 128_000
_WINDOWS: tuple[tuple[str, int], ...] = (
    # Most specific first: the first prefix the model name starts with wins.
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-32k", 32_768),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("gpt-5", 400_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("claude", 200_000),
    ("gemini", 1_048_576),
    ("llama3.1", 131_072),
    ("llama3.2", 131_072),
    ("llama3.3", 131_072),
    ("llama3", 8_192),
    ("mistral", 32_768),
    ("qwen2.5", 32_768),
    ("qwen3", 40_960),
    ("phi3", 4_096),
    ("gemma2", 8_192),
    ("gemma3", 131_072),
)
"""Context windows of well-known model names (a prefix, after any ``provider/``)."""

MESSAGE_OVERHEAD = 4
"""Tokens a message costs beyond its text (role, separators), as chat templates add."""
IMAGE_TOKENS = 800
"""What an image is counted as (a detailed image costs about this with most models)."""
KEEP_SHARE = 0.5
"""After a compaction the messages kept take at most this share of the budget, so the
next turns have room before the next compaction."""
SUMMARY_SHARE = 0.125
"""The most of the budget a summary may take (longer ones are clipped), and never more
than the room kept for an answer."""
MAX_SUMMARY_PIECES = 8
"""The most LLM calls one summary takes; older messages beyond them are trimmed."""
MAX_ANCHORS = 4096
SMALLEST_MESSAGE = 64
"""Bytes a stored message takes at least as an event: a messages snapshot read from the
store reads at most its room divided by this."""

SUMMARY_INSTRUCTION = (
    "You summarise conversations between a user and an AI assistant so the assistant can "
    "go on without the full text. Write a concise summary of the conversation below, "
    "merged with the summary so far if there is one: the user's goals and preferences, "
    "facts and decisions, what tools returned that still matters, and open questions. "
    "Write only the summary, in at most {words} words."
)
SUMMARY_HEADING = "Summary of the earlier conversation (older messages are not shown):"


@dataclass(frozen=True, slots=True)
class ContextLimits:
    window: int = DEFAULT_WINDOW
    """``[llm] context_tokens``: the model's context window in tokens."""
    reserve_output: int = 0
    """``[llm] reserve_output_tokens``; 0: the smaller of 4,096 and a quarter of the window."""
    compaction: str = "summarize"
    """``[llm] compaction``: summarize | trim | off."""
    max_result_chars: int = 50_000
    """``[tools] max_result_chars``: a longer tool result is clipped for the LLM."""

    @property
    def reserve(self) -> int:
        return self.reserve_output or min(4096, self.window // 4)

    @property
    def budget(self) -> int:
        """Tokens a request may take: the window less the room for the answer."""
        return max(1, self.window - self.reserve)


def default_window(model: str) -> int:
    """The window of a well-known model name, else ``DEFAULT_WINDOW``."""
    name = model.rsplit("/", 1)[-1].lower()
    name = name.split(":", 1)[1] if name.startswith("openai:") else name
    for prefix, window in _WINDOWS:
        if name.startswith(prefix):
            return window
    return DEFAULT_WINDOW


# -- counting ---------------------------------------------------------------------


def estimate_text(text: str) -> int:
    """Tokens ``text`` takes, estimated: a quarter of its characters, plus half a token
    per byte beyond one of each non-ASCII character (so about 1.25 for CJK)."""
    if not text:
        return 0
    chars = len(text)
    extra = len(text.encode("utf-8", "surrogatepass")) - chars
    return (chars + 3) // 4 + (extra + 1) // 2


def estimate_message(message: Message) -> int:
    tokens = MESSAGE_OVERHEAD
    for part in message.content:
        if isinstance(part, TextPart):
            tokens += estimate_text(part.text)
        elif isinstance(part, ImagePart):
            tokens += IMAGE_TOKENS
    for call in message.tool_calls:
        tokens += MESSAGE_OVERHEAD + estimate_text(call.name) + estimate_text(call.arguments)
    return tokens


def estimate_tools(tools: Sequence[ToolSpec]) -> int:
    tokens = 0
    for tool in tools:
        spec = json.dumps(tool.parameters, separators=(",", ":"))
        tokens += MESSAGE_OVERHEAD + estimate_text(tool.name + tool.description + spec)
    return tokens


@dataclass(slots=True)
class _Anchor:
    ids: tuple[str, ...]
    tokens: int


class Anchors:
    """The LLM's own count of each session's last request (an LRU of ``MAX_ANCHORS``)."""

    def __init__(self, size: int = MAX_ANCHORS) -> None:
        self._size = size
        self._by_session: OrderedDict[str, _Anchor] = OrderedDict()

    def note(self, session_id: str, messages: Sequence[Message], prompt_tokens: int) -> None:
        if prompt_tokens <= 0:
            return
        self._by_session[session_id] = _Anchor(tuple(m.id for m in messages), prompt_tokens)
        self._by_session.move_to_end(session_id)
        while len(self._by_session) > self._size:
            self._by_session.popitem(last=False)

    def count(self, session_id: str, messages: Sequence[Message], tools: Sequence[ToolSpec]) -> int:
        """The request's tokens: the anchor plus an estimate of what follows it, when the
        request starts with the anchored messages; else all of it estimated."""
        anchor = self._by_session.get(session_id)
        if anchor is not None and len(anchor.ids) <= len(messages):
            n = len(anchor.ids)
            if all(m.id == i for m, i in zip(messages, anchor.ids, strict=False)):
                estimated = sum(estimate_message(m) for m in messages[:n])
                # The LLM's count, unless our estimate of the same messages is larger.
                base = max(anchor.tokens, estimated + estimate_tools(tools))
                return base + sum(estimate_message(m) for m in messages[n:])
        return sum(estimate_message(m) for m in messages) + estimate_tools(tools)


# -- what the LLM is sent -----------------------------------------------------------


def clip_results(messages: list[Message], max_chars: int) -> list[Message]:
    """Tool results longer than ``max_chars`` clipped for the LLM, with a note saying how
    much was cut (the stored result is untouched)."""
    out = []
    for message in messages:
        if message.role is Role.TOOL:
            text = "".join(p.text for p in message.content if isinstance(p, TextPart))
            if len(text) > max_chars:
                cut = len(text) - max_chars
                note = (
                    f"\n[... {cut:,} of {len(text):,} characters cut: the tool result is "
                    f"longer than {max_chars:,} ([tools] max_result_chars)]"
                )
                message = Message(
                    id=message.id,
                    role=message.role,
                    content=[
                        TextPart(text[:max_chars] + note),
                        *(p for p in message.content if not isinstance(p, TextPart)),
                    ],
                    tool_call_id=message.tool_call_id,
                    status=message.status,
                )
        out.append(message)
    return out


def plan_cut(
    messages: Sequence[Message], tokens: Sequence[int], target: int, *, force: bool = False
) -> int:
    """Where to cut ``messages`` (the conversation, without the system message): the
    index of the first message kept, so that those kept take at most ``target`` tokens.

    A cut is only ever before a message that is not a tool result (a call stays with its
    results), preferably before a user message (whole turns go). The last such message is
    always kept. 0 when nothing can be cut; with ``force`` at least one message goes when
    one can.
    """
    valid = [i for i, m in enumerate(messages) if m.role is not Role.TOOL]
    if not valid:
        return 0
    last = valid[-1]
    tail = [0] * (len(messages) + 1)
    for i in range(len(messages) - 1, -1, -1):
        tail[i] = tail[i + 1] + tokens[i]
    low = 1 if force else 0
    turns = [i for i in valid if messages[i].role is Role.USER and low <= i]
    for i in turns:
        if tail[i] <= target:
            return i
    for i in valid:
        if low <= i and tail[i] <= target:
            return i
    return last if (last >= low) else 0


def refuse_too_long(incoming: Sequence[Message], limits: ContextLimits, system_prompt: str) -> None:
    """``ContextTooLong`` naming the first new user message that alone (with the system
    prompt) does not fit the budget: refused before the run starts."""
    room = limits.budget - estimate_text(system_prompt) - MESSAGE_OVERHEAD
    for index, message in enumerate(incoming):
        if message.role is not Role.USER:
            continue
        size = estimate_message(message)
        if size > room:
            raise ContextTooLong(
                f"messages[{index}] is about {size:,} tokens, more than the model's context "
                f"budget of {room:,} ([llm] context_tokens {limits.window:,} less "
                f"reserve_output_tokens {limits.reserve:,} and the system prompt)"
            )


def is_overflow(exc: LLMError) -> bool:
    """Whether the LLM answered that the request is larger than its context."""
    return exc.code == LLM_CONTEXT_ERROR


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
            summary = _clip_tokens(await self._complete(request), room)
        return summary

    async def _complete(self, request: ChatRequest) -> str:
        parts: list[str] = []
        async for delta in self.model.stream(request):
            if isinstance(delta, TextDelta):
                parts.append(delta.text)
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
