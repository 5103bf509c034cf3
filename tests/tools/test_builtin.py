"""The built-in tools: current_time, calculate and update_state."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from engine_service.core.events import EventBody, StateDelta, StateSnapshot
from engine_service.core.models import JSON
from engine_service.core.tool import ToolContext, ToolError
from engine_service.tools.builtin import (
    MAX_EXPRESSION_CHARS,
    CalculateTool,
    CurrentTimeTool,
    UpdateStateTool,
    builtin_tools,
    evaluate,
)


class FakeSession:
    """A session's state and the events tools emit into it."""

    def __init__(self, state: JSON = None) -> None:
        self.state: JSON = state
        self.events: list[EventBody] = []
        self.set_calls = 0

    def _set(self, state: JSON) -> None:
        self.set_calls += 1
        self.state = state

    def context(self) -> ToolContext:
        return ToolContext(
            session_id="s1",
            run_id="r1",
            tool_call_id="call_1",
            emit=self.events.append,
            get_state=lambda: self.state,
            set_state=self._set,
        )


FIXED = datetime(2024, 3, 1, 12, 30, 45, tzinfo=UTC)  # a Friday


async def _time(arguments: dict[str, JSON]) -> dict[str, JSON]:
    result = await CurrentTimeTool(clock=lambda: FIXED).call(arguments, FakeSession().context())
    assert result.is_error is False
    parsed: dict[str, JSON] = json.loads(result.content)
    return parsed


# --- builtin_tools ------------------------------------------------------------------


def test_builtin_tools_offers_three_uniquely_named_tools_with_object_schemas() -> None:
    tools = builtin_tools()
    assert [t.name for t in tools] == ["current_time", "calculate", "update_state"]
    for tool in tools:
        assert tool.source == "native"
        assert tool.parameters["type"] == "object"
        assert tool.description


# --- current_time -------------------------------------------------------------------


async def test_current_time_defaults_to_utc() -> None:
    assert await _time({}) == {
        "timezone": "UTC",
        "datetime": "2024-03-01T12:30:45+00:00",
        "weekday": "Friday",
        "utc_offset": "+00:00",
    }


async def test_current_time_converts_to_the_named_zone() -> None:
    berlin = await _time({"timezone": "Europe/Berlin"})
    assert berlin["datetime"] == "2024-03-01T13:30:45+01:00"
    assert berlin["utc_offset"] == "+01:00"
    assert berlin["timezone"] == "Europe/Berlin"


async def test_current_time_handles_negative_offsets_and_date_changes() -> None:
    late = datetime(2024, 3, 2, 2, 0, 0, tzinfo=UTC)
    tool = CurrentTimeTool(clock=lambda: late)
    result = await tool.call({"timezone": "America/New_York"}, FakeSession().context())
    assert json.loads(result.content) == {
        "timezone": "America/New_York",
        "datetime": "2024-03-01T21:00:00-05:00",
        "weekday": "Friday",
        "utc_offset": "-05:00",
    }


async def test_current_time_handles_half_hour_zones() -> None:
    kolkata = await _time({"timezone": "Asia/Kolkata"})
    assert kolkata["datetime"] == "2024-03-01T18:00:45+05:30"


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime"])
async def test_current_time_rejects_an_unknown_zone_by_name(zone: str) -> None:
    with pytest.raises(ToolError, match="unknown time zone") as caught:
        await CurrentTimeTool().call({"timezone": zone}, FakeSession().context())
    assert repr(zone) in str(caught.value)


async def test_current_time_rejects_a_non_string_zone() -> None:
    with pytest.raises(ToolError, match="must be a string"):
        await CurrentTimeTool().call({"timezone": 5}, FakeSession().context())


async def test_current_time_uses_the_real_clock_by_default() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = await CurrentTimeTool().call({}, FakeSession().context())
    after = datetime.now(UTC)
    moment = datetime.fromisoformat(json.loads(result.content)["datetime"])
    assert before <= moment <= after


# --- calculate ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("2 ** 10", 1024),
        ("2 ** -1", 0.5),
        ("-3 + +4", 1),
        ("--5", 5),
        ("1.5e3 + 0.5", 1500.5),
        ("sqrt(16)", 4.0),
        ("abs(-4.5)", 4.5),
        ("round(2.567, 2)", 2.57),
        ("round(2.5)", 2),
        ("floor(-1.5) + ceil(1.2)", 0),
        ("max(3, 9, 4) - min(3, 9, 4)", 6),
        ("log(8, 2)", 3.0),
        ("log10(1000)", 3.0),
        ("2 * pi", 6.283185307179586),
        ("e", 2.718281828459045),
        ("2 ** 4000", 2**4000),
    ],
)
def test_calculate_evaluates_arithmetic(expression: str, expected: float) -> None:
    result = evaluate(expression)
    assert result == expected
    assert type(result) is type(expected)


async def test_calculate_tool_returns_expression_and_result_as_json() -> None:
    result = await CalculateTool().call({"expression": "6 * 7"}, FakeSession().context())
    assert result.is_error is False
    assert json.loads(result.content) == {"expression": "6 * 7", "result": 42}


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("__import__('os').system('true')", "only the listed math functions can be called"),
        ("().__class__", "attribute access not allowed"),
        ("(1).__class__", "attribute access not allowed"),
        ("open('/etc/passwd')", "unknown function 'open'"),
        ("x + 1", "unknown name 'x'"),
        ("__builtins__", "unknown name '__builtins__'"),
        ("math.sqrt(4)", "only the listed math functions can be called"),
        ("sqrt(x=4)", "takes no keyword arguments"),
        ("sqrt(1, 2)", r"sqrt\(\) takes 1 argument\(s\), got 2"),
        ("'a' * 3", "only numbers are allowed"),
        ("True + 1", "only numbers are allowed"),
        ("1j * 2", "only numbers are allowed"),
        ("[1, 2][0]", "indexing not allowed"),
        ("(1, 2)", "tuples not allowed"),
        ("1 < 2", "comparisons not allowed"),
        ("lambda: 1", "lambda not allowed"),
        ("[x for x in (1,)]", "comprehensions not allowed"),
        ("1 if 1 else 2", "conditional expressions not allowed"),
        ("2 ^ 3", r"'\^' \(use \*\* for powers\)"),
        ("1 << 4", "'<<' is not allowed"),
        ("~1", "'~' is not allowed"),
        ("x := 1", "not a valid arithmetic expression"),
        ("import os", "not a valid arithmetic expression"),
        ("", "the expression is empty"),
    ],
)
def test_calculate_refuses_anything_outside_the_whitelist(expression: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    ["9 ** 9 ** 9", "2 ** 5000", "10 ** 100000", "(2 ** 4000) * (2 ** 4000)", "(-3) ** 10000"],
)
def test_calculate_refuses_integers_too_large_to_compute(expression: str) -> None:
    with pytest.raises(ToolError, match="too large"):
        evaluate(expression)


@pytest.mark.parametrize("expression", ["10.0 ** 400", "exp(1000)", "1e308 * 10", "1e999"])
def test_calculate_refuses_floats_that_overflow(expression: str) -> None:
    with pytest.raises(ToolError, match="too large"):
        evaluate(expression)


def test_calculate_refuses_round_with_an_absurd_number_of_digits() -> None:
    with pytest.raises(ToolError, match="number of digits"):
        evaluate("round(5, -100000000000)")


@pytest.mark.parametrize("expression", ["1 / 0", "1 // 0", "5 % 0", "1.0 / 0.0", "0 ** -1"])
def test_calculate_reports_division_by_zero(expression: str) -> None:
    with pytest.raises(ToolError, match=r"^division by zero$"):
        evaluate(expression)


def test_calculate_reports_math_domain_errors() -> None:
    with pytest.raises(ToolError, match="math error: math domain error"):
        evaluate("sqrt(-1)")


def test_calculate_refuses_fractional_powers_of_negative_numbers() -> None:
    with pytest.raises(ToolError, match="no real result"):
        evaluate("(-8) ** (1 / 3)")


def test_calculate_refuses_overlong_expressions() -> None:
    with pytest.raises(ToolError, match=f"longer than {MAX_EXPRESSION_CHARS} characters"):
        evaluate("1+" * MAX_EXPRESSION_CHARS + "1")


def test_calculate_survives_deep_nesting() -> None:
    with pytest.raises(ToolError):
        evaluate("(" * 240 + "1" + ")" * 240)
    assert evaluate("-" * 400 + "1") == 1


async def test_calculate_tool_requires_a_string_expression() -> None:
    with pytest.raises(ToolError, match="'expression' is required"):
        await CalculateTool().call({"expression": 12}, FakeSession().context())


# --- update_state -------------------------------------------------------------------


async def test_update_state_with_a_whole_state_sets_it_and_emits_a_snapshot() -> None:
    session = FakeSession({"old": True})
    result = await UpdateStateTool().call({"state": {"count": 1}}, session.context())
    assert session.state == {"count": 1}
    assert session.events == [StateSnapshot(snapshot={"count": 1})]
    assert json.loads(result.content) == {"state": {"count": 1}}


async def test_update_state_with_a_patch_applies_it_and_emits_the_ops() -> None:
    session = FakeSession({"count": 1, "items": ["a"]})
    ops: list[JSON] = [
        {"op": "replace", "path": "/count", "value": 2},
        {"op": "add", "path": "/items/-", "value": "b"},
    ]
    result = await UpdateStateTool().call({"patch": ops}, session.context())
    assert session.state == {"count": 2, "items": ["a", "b"]}
    assert session.events == [StateDelta(delta=ops)]
    assert json.loads(result.content) == {"state": {"count": 2, "items": ["a", "b"]}}


async def test_update_state_patch_does_not_mutate_the_previous_state_object() -> None:
    previous = {"items": ["a"]}
    session = FakeSession(previous)
    await UpdateStateTool().call(
        {"patch": [{"op": "add", "path": "/items/0", "value": "z"}]}, session.context()
    )
    assert previous == {"items": ["a"]}
    assert session.state == {"items": ["z", "a"]}


async def test_update_state_patching_a_session_without_state_starts_from_an_empty_object() -> None:
    session = FakeSession(None)
    await UpdateStateTool().call(
        {"patch": [{"op": "add", "path": "/mode", "value": "dark"}]}, session.context()
    )
    assert session.state == {"mode": "dark"}
    assert session.events == [StateSnapshot(snapshot={"mode": "dark"})]


async def test_update_state_failing_patch_leaves_state_untouched_and_emits_nothing() -> None:
    session = FakeSession({"count": 1})
    ops: list[JSON] = [
        {"op": "replace", "path": "/count", "value": 99},
        {"op": "remove", "path": "/missing"},
    ]
    with pytest.raises(ToolError) as caught:
        await UpdateStateTool().call({"patch": ops}, session.context())
    message = str(caught.value)
    assert "state is unchanged" in message
    assert "operation 1 (remove '/missing')" in message
    assert "does not exist" in message
    assert session.state == {"count": 1}
    assert session.set_calls == 0
    assert session.events == []


async def test_update_state_failing_test_op_names_the_op() -> None:
    session = FakeSession({"version": 3})
    ops: list[JSON] = [
        {"op": "test", "path": "/version", "value": 2},
        {"op": "replace", "path": "/version", "value": 4},
    ]
    with pytest.raises(ToolError, match=r"operation 0 \(test '/version'\): test failed"):
        await UpdateStateTool().call({"patch": ops}, session.context())
    assert session.state == {"version": 3}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "exactly one of"),
        ({"state": {}, "patch": []}, "exactly one of"),
        ({"state": [1, 2]}, "'state' must be a JSON object"),
        ({"patch": {"op": "add"}}, "'patch' must be a list"),
        ({"patch": [{"op": "frobnicate", "path": "/x"}]}, "unknown op 'frobnicate'"),
    ],
)
async def test_update_state_rejects_malformed_arguments(
    arguments: dict[str, JSON], message: str
) -> None:
    session = FakeSession({"keep": 1})
    with pytest.raises(ToolError, match=message):
        await UpdateStateTool().call(arguments, session.context())
    assert session.state == {"keep": 1}
    assert session.events == []
