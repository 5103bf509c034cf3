"""``OfflineChatModel``: the built-in model that answers when no LLM endpoint is configured.

It is deterministic and honest about what it is: it echoes the user, calls ``current_time``
or ``calculate`` when asked and offered, asks the user a question with ``ask_user`` when
told "ask me ..." (and the tool is offered), and turns tool results — answers and declined
calls included — into a sentence. Enough for
the product (and its tests) to run end to end with no network and no key.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator

from engine_service.core.chat import (
    ChatDelta,
    ChatModel,
    ChatRequest,
    FinishDelta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
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


class OfflineChatModel(ChatModel):
    """Deterministic echo-like answers in word chunks, with tool calls for time and arithmetic.

    ``chunk_delay`` (seconds) paces the chunks like a real stream, for demos.
    """

    def __init__(self, chunk_delay: float = 0.0) -> None:
        self.name = "offline"
        self.chunk_delay = chunk_delay

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        """Answer the conversation's last message."""
        messages = request.messages
        results = _trailing_tool_results(messages)
        offered = {tool.name for tool in request.tools}
        produced = 0
        call: tuple[str, dict[str, JSON]] | None = None
        if results:
            text = " ".join(_describe_result(messages, m) for m in results)
        else:
            user = next((m for m in reversed(messages) if m.role is Role.USER), None)
            asked = message_text(user).strip() if user else ""
            if _THINK.search(asked):
                yield ReasoningDelta(_REASONING)
                produced += len(_REASONING.split())
            call = _tool_call(asked, offered)
            text = "" if call else f'You said: "{asked}". {NOTICE}'
        for piece in _WORD.findall(text):
            await asyncio.sleep(self.chunk_delay)  # also a cancellation point between chunks
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


def _tool_call(asked: str, offered: set[str]) -> tuple[str, dict[str, JSON]] | None:
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
