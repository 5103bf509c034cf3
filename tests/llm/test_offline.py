"""OfflineChatModel: deterministic answers, tool calls for time and arithmetic."""

from __future__ import annotations

import json

import pytest

from engine_service.core.chat import (
    ChatDelta,
    ChatRequest,
    FinishDelta,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)
from engine_service.core.models import Message, Role, TextPart, ToolCall
from engine_service.llm.offline import OfflineChatModel

TIME = ToolSpec("current_time", "The time.", {"type": "object", "properties": {}})
CALCULATE = ToolSpec("calculate", "Arithmetic.", {"type": "object", "properties": {}})


def user(text: str) -> Message:
    return Message("u1", Role.USER, [TextPart(text)])


async def collect(request: ChatRequest) -> list[ChatDelta]:
    return [delta async for delta in OfflineChatModel().stream(request)]


def text_of(deltas: list[ChatDelta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


def calls_of(deltas: list[ChatDelta]) -> list[tuple[str, dict[str, object]]]:
    """The whole tool calls, assembled by index."""
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if isinstance(d, ToolCallDelta):
            name, arguments = calls.setdefault(d.index, ["", ""])
            calls[d.index] = [name + d.name, arguments + d.arguments]
    return [(name, json.loads(arguments)) for name, arguments in calls.values()]


async def test_it_echoes_the_user_in_word_chunks_and_says_it_is_offline() -> None:
    deltas = await collect(ChatRequest([user("hello there")]))

    chunks = [d.text for d in deltas if isinstance(d, TextDelta)]
    assert chunks[:3] == ["You ", "said: ", '"hello ']
    assert text_of(deltas) == (
        'You said: "hello there". '
        "(offline model — set OPENAI_BASE_URL/OPENAI_API_KEY to use a real LLM)"
    )
    assert deltas[-1] == FinishDelta("stop")


async def test_the_same_conversation_gets_the_same_answer() -> None:
    request = ChatRequest([user("think about the time in UTC")], [TIME])

    assert await collect(request) == await collect(request)


async def test_usage_counts_words_in_and_chunks_out() -> None:
    deltas = await collect(
        ChatRequest([Message("s", Role.SYSTEM, [TextPart("be nice")]), user("hi")])
    )

    usage = [d for d in deltas if isinstance(d, UsageDelta)]
    assert usage == [UsageDelta(input_tokens=3, output_tokens=len(text_of(deltas).split()))]
    assert deltas[-2:] == [usage[0], FinishDelta("stop")]


@pytest.mark.parametrize(
    ("question", "arguments"),
    [
        ("What time is it?", {}),
        ("what time is it in Europe/Paris", {"timezone": "Europe/Paris"}),
        ("Tell me the time in UTC please", {"timezone": "UTC"}),
        ("time in America/Argentina/Buenos_Aires?", {"timezone": "America/Argentina/Buenos_Aires"}),
    ],
)
async def test_asking_the_time_calls_current_time_when_offered(
    question: str, arguments: dict[str, object]
) -> None:
    deltas = await collect(ChatRequest([user(question)], [TIME, CALCULATE]))

    assert calls_of(deltas) == [("current_time", arguments)]
    assert text_of(deltas) == ""
    assert deltas[-1] == FinishDelta("tool_calls")
    head = next(d for d in deltas if isinstance(d, ToolCallDelta))
    assert head.id == "call_offline_1"


async def test_asking_the_time_without_the_tool_gets_an_echo() -> None:
    deltas = await collect(ChatRequest([user("What time is it?")], [CALCULATE]))

    assert calls_of(deltas) == []
    assert text_of(deltas).startswith('You said: "What time is it?".')


@pytest.mark.parametrize(
    ("question", "expression"),
    [
        ("calculate 2*(3+4)", "2*(3+4)"),
        ("What is 2+2?", "2+2"),
        ("Can you compute sqrt(16) + 1 for me", "sqrt(16) + 1"),
        ("evaluate 17 * 23.", "17 * 23"),
    ],
)
async def test_asking_to_calculate_calls_calculate_with_the_expression(
    question: str, expression: str
) -> None:
    deltas = await collect(ChatRequest([user(question)], [TIME, CALCULATE]))

    assert calls_of(deltas) == [("calculate", {"expression": expression})]


@pytest.mark.parametrize("question", ["What is love?", "what is 42", "calculate the odds"])
async def test_questions_without_arithmetic_are_not_calculated(question: str) -> None:
    deltas = await collect(ChatRequest([user(question)], [CALCULATE]))

    assert calls_of(deltas) == []
    assert text_of(deltas).startswith(f'You said: "{question}".')


async def test_tool_results_are_answered_in_a_sentence() -> None:
    history = [
        user("what is 2*(3+4) and what time is it in Europe/Paris"),
        Message(
            "a1",
            Role.ASSISTANT,
            tool_calls=[
                ToolCall("c1", "calculate", '{"expression": "2*(3+4)"}'),
                ToolCall("c2", "current_time", '{"timezone": "Europe/Paris"}'),
                ToolCall("c3", "lookup", "{}"),
            ],
        ),
        Message(
            "t1",
            Role.TOOL,
            [TextPart('{"expression": "2*(3+4)", "result": 14}')],
            tool_call_id="c1",
        ),
        Message(
            "t2",
            Role.TOOL,
            [TextPart('{"timezone": "Europe/Paris", "datetime": "2025-01-01T12:00:00+01:00"}')],
            tool_call_id="c2",
        ),
        Message("t3", Role.TOOL, [TextPart("no such thing")], tool_call_id="c3"),
    ]

    deltas = await collect(ChatRequest(history, [TIME, CALCULATE]))

    assert text_of(deltas) == (
        "2*(3+4) = 14. The current time in Europe/Paris is 2025-01-01T12:00:00+01:00. "
        "lookup returned: no such thing"
    )
    assert calls_of(deltas) == []
    assert deltas[-1] == FinishDelta("stop")


async def test_saying_think_streams_a_short_reasoning_first() -> None:
    deltas = await collect(ChatRequest([user("think it over")]))

    assert isinstance(deltas[0], ReasoningDelta)
    assert deltas[0].text
    assert not any(isinstance(d, ReasoningDelta) for d in deltas[1:])


async def test_its_name_is_offline() -> None:
    assert OfflineChatModel().name == "offline"
