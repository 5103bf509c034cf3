"""``OfflineChatModel``: the built-in model that answers when no LLM endpoint is configured.

It is deterministic and honest about what it is. Enough for the product (and its tests) to
run end to end with no network and no key, and to demo every kind of tool. The last user
message decides, first rule that applies:

1. ``use TOOL {json}`` calls any offered tool (native, Python, MCP, remote A2A agent) with
   that JSON object as its arguments; ``use TOOL`` alone fills them from the message (below).
   A message that starts with ``use`` and names no offered tool gets an answer listing them.
2. "ask me ..." asks the user with ``ask_user``; "time" calls ``current_time`` (with an IANA
   zone if one is named); "calculate 2*(3+4)" / "what is 2+2" calls ``calculate``.
3. A tool named in the message (a whole word: ``research``, ``time__get_current_time``) is
   called; else a tool whose description shares a word of five letters or more with the
   message (common words aside). The native tools (those of rule 2 and ``update_state``)
   are called by rules 1 and 2 only.
   Arguments from the message: ``name=value`` or ``name: value`` for a parameter of that name;
   otherwise a required string parameter gets the whole message, a required number the first
   number in it (else 0), a required boolean ``true``.
4. Otherwise it echoes the message, saying it is the offline model.

Tool results (answers and declined calls included) become a sentence. A message with the
word "slowly" streams its answer over about five seconds (a count to twenty after the
answer), so Stop, reload-and-resume and live follow can be tried.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable

from engine_service.core.chat import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    FinishDelta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)
from engine_service.core.models import JSON, Message, Role, message_text

__all__ = ["OfflineChatModel"]

NOTICE = "(offline model — set OPENAI_BASE_URL/OPENAI_API_KEY to use a real LLM)"

_WORD = re.compile(r"\S+\s*")
_TIME = re.compile(r"\btime\b", re.IGNORECASE)
_THINK = re.compile(r"\bthink", re.IGNORECASE)
_ASK = re.compile(r"\bask me\b[\s:,]*(?P<question>[^?]*)", re.IGNORECASE)
_DECLINED = ("The user declined", "The user did not answer")
_ZONE = re.compile(r"\b(?:[A-Z][A-Za-z_]+/[A-Za-z_]+(?:/[A-Za-z_]+)?|UTC|GMT)\b")
_CALCULATION = re.compile(
    r"\b(?:calculate|compute|evaluate|what\s+is|what's)\s+(?P<expression>[^?=]+)", re.IGNORECASE
)
_EXPRESSION = re.compile(r"[\d\s+\-*/%().,^a-z_]+")
_TRAILING_WORDS = re.compile(r"(?<=[\d)])(?:\s+[a-z]+)+$")
_OPERATION = re.compile(r"[+\-*/%^]|[a-z_]+\s*\(")
_REASONING = "The user asked me to think. I am the offline model, so I will keep it short."
_USE = re.compile(r"\buse\s+(?P<name>[A-Za-z0-9_.\-]+)", re.IGNORECASE)
_SLOWLY = re.compile(r"\bslowly\b", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_WORDS = re.compile(r"[a-z]{5,}")
_OWN_RULES = frozenset({"ask_user", "current_time", "calculate", "update_state"})
"""The native tools: called by rule 1 or 2 only, never matched by name or description."""
_COMMON_WORDS = (
    "about above after again against along answer answers argument arguments before being "
    "below between could default defaults every given other their there these thing things "
    "those through under until using value values where which while would should return "
    "returns string number optional optionally object tool tools agent agents message "
    "messages please thank thanks hello"
)
_COMMON = frozenset(_COMMON_WORDS.split())
_COUNT = (
    " Counting slowly: one, two, three, four, five, six, seven, eight, nine, ten, eleven, "
    "twelve, thirteen, fourteen, fifteen, sixteen, seventeen, eighteen, nineteen, twenty."
)
SLOW_CHUNK_DELAY = 0.2
"""Seconds between chunks of a "slowly" answer: about 30 chunks, about six seconds."""

Call = tuple[str, dict[str, JSON]]


class OfflineChatModel(ChatModel):
    """Deterministic echo-like answers in word chunks, with tool calls (see the module).

    ``chunk_delay`` (seconds) paces the chunks like a real stream; ``slow_delay`` paces the
    answers to a message that says "slowly"; ``sleep`` waits between chunks.
    """

    def __init__(
        self,
        chunk_delay: float = 0.0,
        *,
        slow_delay: float = SLOW_CHUNK_DELAY,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.name = "offline"
        self.chunk_delay = chunk_delay
        self.slow_delay = slow_delay
        self._sleep = sleep

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        """Answer the conversation's last message."""
        messages = request.messages
        results = _trailing_tool_results(messages)
        user = next((m for m in reversed(messages) if m.role is Role.USER), None)
        asked = message_text(user).strip() if user else ""
        produced = 0
        call: Call | None = None
        if results:
            text = " ".join(_describe_result(messages, m) for m in results)
        else:
            if _THINK.search(asked):
                yield ReasoningDelta(_REASONING)
                produced += len(_REASONING.split())
            call, refusal = _chosen_call(asked, request.tools)
            text = refusal or ("" if call else f'You said: "{asked}". {NOTICE}')
        delay = self.chunk_delay
        if text and _SLOWLY.search(asked):
            text += _COUNT
            delay = max(delay, self.slow_delay)
        for piece in _WORD.findall(text):
            await self._sleep(delay)  # also a cancellation point between chunks
            yield TextDelta(piece)
            produced += 1
        if call is not None:
            name, arguments = call
            call_id = f"call_offline_{len(messages)}"
            yield ToolCallDelta(index=0, id=call_id, name=name)
            yield ToolCallDelta(index=0, arguments=json.dumps(arguments))
            produced += 1
        prompt = sum(len(message_text(m).split()) for m in messages)
        yield UsageDelta(input_tokens=prompt, output_tokens=produced)
        yield FinishDelta("tool_calls" if call else "stop")


def _trailing_tool_results(messages: list[Message]) -> list[Message]:
    """The tool messages that end the conversation, in order."""
    results: list[Message] = []
    for message in reversed(messages):
        if message.role is not Role.TOOL:
            break
        results.insert(0, message)
    return results


def _chosen_call(asked: str, tools: list[ToolSpec]) -> tuple[Call | None, str]:
    """The tool call the message asks for, or an answer saying why none can be made."""
    specs = {tool.name: tool for tool in tools}
    if use := _USE.search(asked):
        name = use.group("name").rstrip(".,;:!?")
        if name in specs:
            rest = asked[use.end() :]
            if "{" in rest:
                return _json_arguments(name, rest)
            return (name, _arguments(specs[name], rest.strip())), ""
        if asked.lower().startswith("use ") and name.lower() not in _ENGLISH_USE:
            offered = ", ".join(sorted(specs)) or "none"
            return None, f'There is no tool "{name}" on offer. Tools offered: {offered}.'
    if call := _tool_call(asked, set(specs)):
        return call, ""
    if spec := _named_or_described(asked, tools):
        return (spec.name, _arguments(spec, asked)), ""
    return None, ""


_ENGLISH_USE = frozenset({"a", "an", "the", "it", "this", "that", "my", "your", "of", "to"})
"""Words after "use" that make it English rather than a tool's name: "the use of it"."""


def _json_arguments(name: str, rest: str) -> tuple[Call | None, str]:
    """``use NAME {json}``: the first JSON object after the name."""
    try:
        value, _ = json.JSONDecoder().raw_decode(rest, rest.index("{"))
    except ValueError as exc:
        return None, f"The arguments for {name} are not valid JSON: {exc}."
    if not isinstance(value, dict):
        return None, f"The arguments for {name} must be a JSON object."
    return (name, value), ""


def _named_or_described(asked: str, tools: list[ToolSpec]) -> ToolSpec | None:
    """The first tool named in the message, else the first whose description shares a
    notable word with it."""
    tools = [spec for spec in tools if spec.name not in _OWN_RULES]
    for spec in tools:
        if re.search(rf"(?<![\w.\-]){re.escape(spec.name)}(?![\w\-])", asked, re.IGNORECASE):
            return spec
    words = set(_WORDS.findall(asked.lower())) - _COMMON
    for spec in tools:
        if words & set(_WORDS.findall(spec.description.lower())):
            return spec
    return None


def _arguments(spec: ToolSpec, text: str) -> dict[str, JSON]:
    """Arguments for ``spec`` from plain words (see the module's rule 3)."""
    properties = spec.parameters.get("properties")
    required = spec.parameters.get("required")
    if not isinstance(properties, dict):
        return {}
    needed = set(required) if isinstance(required, list) else set()
    arguments: dict[str, JSON] = {}
    for name, schema in properties.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        given = re.search(
            rf"\b{re.escape(name)}\s*[:=]\s*(?:\"(?P<quoted>[^\"]*)\"|(?P<word>[^\s,;]+))", text
        )
        if given:
            raw = given.group("quoted") if given.group("quoted") is not None else given["word"]
            arguments[name] = _typed(raw, kind)
        elif name in needed:
            arguments[name] = _filled(text, kind)
    return arguments


def _typed(raw: str, kind: object) -> JSON:
    """``raw`` as the schema's type, when it reads as one; else the text."""
    if kind in ("integer", "number") and _NUMBER.fullmatch(raw):
        number = float(raw)
        return int(number) if kind == "integer" or number.is_integer() else number
    if kind == "boolean" and raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    return raw


def _filled(text: str, kind: object) -> JSON:
    """A required argument the message does not name: the message, a number in it, or true."""
    if kind in ("integer", "number"):
        number = _NUMBER.search(text)
        return _typed(number.group(0), kind) if number else 0
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return text


def _tool_call(asked: str, offered: set[str]) -> Call | None:
    """The tool call the user's words ask for, if that tool is on offer."""
    if "ask_user" in offered and (ask := _ASK.search(asked)):
        topic = ask.group("question").strip().rstrip(".!")
        question = f"{topic[:1].upper()}{topic[1:]}?" if topic else "What should I do next?"
        return "ask_user", {"question": question}
    if "current_time" in offered and _TIME.search(asked):
        zone = _ZONE.search(asked)
        return "current_time", ({"timezone": zone.group(0)} if zone else {})
    if "calculate" in offered and (expression := _expression(asked)):
        return "calculate", {"expression": expression}
    return None


def _expression(asked: str) -> str:
    """The arithmetic in 'calculate 2*(3+4)' or 'what is 2+2?', or '' if there is none."""
    match = _CALCULATION.search(asked)
    if not match:
        return ""
    expression = match.group("expression").strip().rstrip(".!").strip()
    expression = _TRAILING_WORDS.sub("", expression)  # "17 * 23 for me" → "17 * 23"
    if not _EXPRESSION.fullmatch(expression) or not any(c.isdigit() for c in expression):
        return ""
    return expression if _OPERATION.search(expression) else ""


def _describe_result(messages: list[Message], result: Message) -> str:
    """One sentence about a tool result, using the tool's name from the assistant's call."""
    name = next(
        (
            call.name
            for message in messages
            for call in message.tool_calls
            if call.id == result.tool_call_id
        ),
        "the tool",
    )
    content = message_text(result).strip()
    if name == "ask_user":
        return f'You answered: "{content}". Thank you.'
    if content.startswith(_DECLINED):
        return content
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    if isinstance(value, dict):
        if name == "calculate" and "result" in value:
            return f"{value.get('expression', 'The result')} = {value['result']}."
        if name == "current_time" and "datetime" in value:
            return f"The current time in {value.get('timezone', 'UTC')} is {value['datetime']}."
    return f"{name} returned: {content}"
