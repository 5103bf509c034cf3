"""The pure rules of the context budget (``core.window``): counting, where to cut,
clipping, the window of a model name."""

from __future__ import annotations

from typing import Any

import pytest

from engine_service.core import window
from engine_service.core.chat import ToolSpec
from engine_service.core.context import (
    Anchors,
    ContextLimits,
    clip_results,
    default_window,
    estimate_message,
    estimate_text,
    plan_cut,
)
from engine_service.core.models import JSON, ImagePart, Message, Role, TextPart, ToolCall


def msg(message_id: str, role: Role, text: str = "", calls: tuple[str, ...] = ()) -> Message:
    return Message(
        id=message_id,
        role=role,
        content=[TextPart(text)] if text else [],
        tool_calls=[ToolCall(c, "f", "{}") for c in calls],
        tool_call_id=message_id[1:] if role is Role.TOOL else "",
    )


def test_the_estimate_counts_ascii_by_four_and_other_scripts_higher() -> None:
    assert estimate_text("") == 0
    assert estimate_text("abcd" * 100) == 100
    assert estimate_text("漢字" * 100) >= 200  # about one token a character, or more
    image = Message(id="m", role=Role.USER, content=[ImagePart(url="https://x/y.png")])
    assert estimate_message(image) > 500


def test_the_budget_keeps_room_for_the_answer() -> None:
    assert ContextLimits(window=4000).budget == 3000
    assert ContextLimits(window=128_000).budget == 128_000 - 4096
    assert ContextLimits(window=8000, reserve_output=500).budget == 7500


def test_well_known_model_names_have_their_window() -> None:
    assert default_window("gpt-4o-mini") == 128_000
    assert default_window("openai/gpt-4.1-mini") == 1_047_576
    assert default_window("llama3.1:8b") == 131_072
    assert default_window("Llama3:8B") == 8_192
    assert default_window("my-finetune") == 128_000


def test_the_cut_is_before_a_user_message_when_one_fits() -> None:
    body = [
        msg("u1", Role.USER),
        msg("a1", Role.ASSISTANT),
        msg("u2", Role.USER),
        msg("a2", Role.ASSISTANT),
        msg("u3", Role.USER),
    ]
    tokens = [100, 100, 100, 100, 100]

    assert plan_cut(body, tokens, 300) == 2  # whole turns: u2 a2 u3 kept
    assert plan_cut(body, tokens, 250) == 4  # u3 alone fits under 250 ...
    assert plan_cut(body, tokens, 50) == 4  # ... and the last message is always kept


def test_a_tool_call_and_its_results_are_never_split() -> None:
    body = [
        msg("u1", Role.USER),
        msg("a1", Role.ASSISTANT, calls=("c1", "c2")),
        msg("tc1", Role.TOOL, "r"),
        msg("tc2", Role.TOOL, "r"),
        msg("a2", Role.ASSISTANT, "done"),
    ]
    tokens = [10, 10, 500, 500, 10]

    cut = plan_cut(body, tokens, 600)

    assert body[cut].role is not Role.TOOL
    assert cut in (1, 4)
    assert plan_cut(body, tokens, 600) == 4  # no cut before tc2: a1's results go with it


def test_nothing_to_cut_is_zero_and_force_always_cuts_something() -> None:
    body = [msg("u1", Role.USER), msg("a1", Role.ASSISTANT)]
    assert plan_cut(body, [10, 10], 1000) == 0
    assert plan_cut(body, [10, 10], 1000, force=True) == 1
    assert plan_cut([msg("u1", Role.USER)], [10], 1, force=True) == 0


def test_long_tool_results_are_clipped_with_a_note_and_others_left_alone() -> None:
    short = msg("tc1", Role.TOOL, "ok")
    long = msg("tc2", Role.TOOL, "y" * 5000)

    clipped = clip_results([short, long], 1000)

    assert clipped[0] is short
    text = clipped[1].content[0]
    assert isinstance(text, TextPart)
    assert text.text.startswith("y" * 1000) and "4,000 of 5,000 characters cut" in text.text
    assert clipped[1].tool_call_id == "c2"
    assert long.content == [TextPart("y" * 5000)]  # the message itself is untouched


def test_the_llms_count_of_the_last_request_anchors_the_next_one() -> None:
    anchors = Anchors(size=2)
    first = [msg("u1", Role.USER, "a" * 400), msg("a1", Role.ASSISTANT, "b" * 400)]
    tools = [ToolSpec("f", "does f", {"type": "object"})]
    estimated = anchors.count("s", first, tools)

    anchors.note("s", first, 900)  # the real tokenizer counts more than we estimate
    grown = [*first, msg("u2", Role.USER, "c" * 40)]

    assert anchors.count("s", grown, tools) == 900 + estimate_message(grown[-1])
    assert anchors.count("s", [grown[0], grown[2]], tools) < 900  # another prefix: estimated
    assert estimated < 900
    anchors.note("t", first, 10)
    anchors.note("u", first, 10)
    assert anchors.count("s", grown, tools) < 900  # forgotten: the LRU holds two sessions


def test_a_tools_estimate_is_made_once_while_its_schema_is_the_same(
    json_dumps_calls: list[Any],
) -> None:
    made = json_dumps_calls
    schema: dict[str, JSON] = {"type": "object", "properties": {"q": {"type": "string"}}}
    tool = ToolSpec("search", "Search the web.", schema)
    first = window.estimate_tools([tool])
    assert first > estimate_text("searchSearch the web.")
    assert window.estimate_tools([tool, ToolSpec("search", "Search the web.", schema)]) == 2 * first
    assert made == [schema]  # the schema's JSON was made once for three estimates
    # Another schema (equal or not), name or description is estimated again.
    longer = ToolSpec("search", "Search the web, and say where each result is from.", schema)
    assert window.estimate_tools([longer]) > first
    other: dict[str, JSON] = {"type": "object", "properties": {"q": {"type": "string"}}}
    assert window.estimate_tools([ToolSpec("search", "Search the web.", other)]) == first
    assert made == [schema, schema, other]


def test_the_kept_estimates_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "MAX_CACHED_TOOLS", 8)
    monkeypatch.setattr(window, "_tool_tokens", {})
    tools = [ToolSpec(f"t{i}", "", {"type": "object"}) for i in range(20)]
    assert window.estimate_tools(tools) == sum(window.estimate_tools([t]) for t in tools)
    assert 0 < len(window._tool_tokens) <= 8
