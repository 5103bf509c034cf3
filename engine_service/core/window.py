"""Counting a request against the model's window: the budget (``ContextLimits``), the
estimate of a message's tokens, the LLM's own counts (``Anchors``), clipping of long tool
results, where a cut may go, and the refusals. Compaction itself is ``core.context``."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from agentik.limits import COMPACTION_MODES, MIN_CONTEXT_TOKENS
from engine_service.core.chat import ToolSpec
from engine_service.core.errors import ContextTooLong, LLMError
from engine_service.core.models import JSON, DocumentPart, ImagePart, Message, Role, TextPart

__all__ = [
    "COMPACTION_MODES",
    "CONTEXT_TOO_LONG",
    "MIN_CONTEXT_TOKENS",
    "SMALLEST_MESSAGE",
    "Anchors",
    "ContextLimits",
    "clip_results",
    "default_window",
    "estimate_message",
    "estimate_text",
    "is_overflow",
    "plan_cut",
    "refuse_too_long",
]

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
MAX_ANCHORS = 4096
SMALLEST_MESSAGE = 64
"""Bytes a stored message takes at least as an event: a messages snapshot read from the
store reads at most its room divided by this."""


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
    summary_timeout: float = 600.0
    """``[llm] round_timeout``: seconds one call of the summariser may take."""

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
        elif isinstance(part, DocumentPart):
            # The provider reads the text and an image of each page: a guess from the size.
            tokens += max(IMAGE_TOKENS, len(part.data) // 4)
    for call in message.tool_calls:
        tokens += MESSAGE_OVERHEAD + estimate_text(call.name) + estimate_text(call.arguments)
    return tokens


MAX_CACHED_TOOLS = 1024
"""Tools whose estimate :func:`estimate_tools` keeps, at most (then it starts over)."""
_tool_tokens: dict[int, tuple[dict[str, JSON], str, str, int]] = {}
"""Each tool's estimate by the identity of its schema, which it holds (so that identity is
not reused while it is here), with the name and description it was made for."""


def estimate_tools(tools: Sequence[ToolSpec]) -> int:
    """The tools' share of a request. Each tool's estimate is kept while its schema is the
    same object (the registry's tools keep theirs, never changed in place): the schema's
    JSON is not made again for every request (23 µs for the three built-in tools, more
    with an MCP server's)."""
    tokens = 0
    kept = _tool_tokens
    for tool in tools:
        schema = tool.parameters
        known = kept.get(id(schema))
        if (
            known is not None
            and known[0] is schema
            and known[1] == tool.name
            and known[2] == tool.description
        ):
            tokens += known[3]
            continue
        spec = json.dumps(schema, separators=(",", ":"))
        estimate = MESSAGE_OVERHEAD + estimate_text(tool.name + tool.description + spec)
        if len(kept) >= MAX_CACHED_TOOLS:
            kept.clear()
        kept[id(schema)] = (schema, tool.name, tool.description, estimate)
        tokens += estimate
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
