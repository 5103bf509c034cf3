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


async def no_wait(seconds: float) -> None:
    """The model's pauses, skipped: these tests check what is said, not when."""


async def collect(request: ChatRequest) -> list[ChatDelta]:
    return [delta async for delta in OfflineChatModel(sleep=no_wait).stream(request)]


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


FORECAST = ToolSpec(
    "forecast",
    "Tomorrow's weather in a city.",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)
RESEARCH = ToolSpec(  # a remote A2A agent's tool
    "research",
    "Finds sources on a topic.",
    {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
)
MCP_TIME = ToolSpec(
    "time__get_current_time",
    "Get current time in a specific timezones",
    {
        "type": "object",
        "properties": {"timezone": {"type": "string"}},
        "required": ["timezone"],
    },
)
EVERY_KIND = [TIME, CALCULATE, FORECAST, RESEARCH, MCP_TIME]


@pytest.mark.parametrize(
    ("message", "call"),
    [
        ('use forecast {"city": "Oslo", "days": 2}', ("forecast", {"city": "Oslo", "days": 2})),
        ('use research {"message": "moon"}', ("research", {"message": "moon"})),
        (
            'use time__get_current_time {"timezone": "Asia/Tokyo"}',
            ("time__get_current_time", {"timezone": "Asia/Tokyo"}),
        ),
        ('use current_time {"timezone": "UTC"}', ("current_time", {"timezone": "UTC"})),
        ('please use calculate {"expression": "6*7"} now', ("calculate", {"expression": "6*7"})),
        ("use forecast city=Lima days: 3", ("forecast", {"city": "Lima", "days": 3})),
        ("use research the history of tea", ("research", {"message": "the history of tea"})),
    ],
)
async def test_use_tool_json_calls_any_offered_tool_with_those_arguments(
    message: str, call: tuple[str, dict[str, object]]
) -> None:
    deltas = await collect(ChatRequest([user(message)], EVERY_KIND))

    assert calls_of(deltas) == [call]
    assert deltas[-1] == FinishDelta("tool_calls")


async def test_use_names_the_offered_tools_when_the_tool_is_not_offered() -> None:
    deltas = await collect(ChatRequest([user("use weather {}")], [TIME, FORECAST]))

    assert calls_of(deltas) == []
    assert text_of(deltas) == (
        'There is no tool "weather" on offer. Tools offered: current_time, forecast.'
    )


async def test_use_with_broken_json_says_so_instead_of_calling() -> None:
    deltas = await collect(ChatRequest([user('use forecast {"city": }')], [FORECAST]))

    assert calls_of(deltas) == []
    assert text_of(deltas).startswith("The arguments for forecast are not valid JSON")


@pytest.mark.parametrize(
    ("message", "call"),
    [
        ("ask research about tea", ("research", {"message": "ask research about tea"})),
        ("time__get_current_time timezone: Europe/Rome", None),
        ("will it rain? check the weather in city: Paris", ("forecast", {"city": "Paris"})),
        ("find me sources on tea", ("research", {"message": "find me sources on tea"})),
    ],
)
async def test_a_tool_named_in_the_message_or_matched_by_its_description_is_called(
    message: str, call: tuple[str, dict[str, object]] | None
) -> None:
    deltas = await collect(ChatRequest([user(message)], [FORECAST, RESEARCH, MCP_TIME]))

    expected = call or ("time__get_current_time", {"timezone": "Europe/Rome"})
    assert calls_of(deltas) == [expected]


async def test_common_words_match_no_description() -> None:
    deltas = await collect(ChatRequest([user("hello, please answer these")], EVERY_KIND))

    assert calls_of(deltas) == []
    assert text_of(deltas).startswith('You said: "hello, please answer these".')


async def test_slowly_streams_the_answer_over_several_seconds() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    model = OfflineChatModel(sleep=sleep)
    deltas = [d async for d in model.stream(ChatRequest([user("count slowly")]))]

    assert text_of(deltas).startswith('You said: "count slowly".')
    assert text_of(deltas).endswith("nineteen, twenty.")
    assert len(waits) == len([d for d in deltas if isinstance(d, TextDelta)]) > 20
    assert 4.0 <= sum(waits) <= 10.0


async def test_without_slowly_the_answer_does_not_wait() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    model = OfflineChatModel(sleep=sleep)
    deltas = [d async for d in model.stream(ChatRequest([user("count fast")]))]

    assert "Counting" not in text_of(deltas)
    assert sum(waits) == 0.0


async def test_slowly_paces_the_sentence_about_a_tool_result_too() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    history = [
        user("slowly, what time is it"),
        Message("a1", Role.ASSISTANT, tool_calls=[ToolCall("c1", "current_time", "{}")]),
        Message("t1", Role.TOOL, [TextPart('{"datetime": "x"}')], tool_call_id="c1"),
    ]
    model = OfflineChatModel(sleep=sleep)
    deltas = [d async for d in model.stream(ChatRequest(history, [TIME]))]

    assert text_of(deltas).startswith("The current time in UTC is x.")
    assert sum(waits) >= 4.0


async def test_native_tools_are_never_matched_by_their_description() -> None:
    update_state = ToolSpec("update_state", "Change the state, e.g. /count.", {"type": "object"})

    deltas = await collect(ChatRequest([user("count to twenty slowly")], [update_state]))

    assert calls_of(deltas) == []
