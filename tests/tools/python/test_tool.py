"""Python functions as tools: schema from the signature, validation, results, loading."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from pathlib import Path

import pytest

from agentik.config import ConfigError, PythonToolConfig, load_settings
from engine_service.build import build_tools
from engine_service.core.registry import ToolRegistry
from engine_service.core.tool import ToolContext, ToolError
from engine_service.tools.builtin import builtin_tools
from engine_service.tools.python.tool import (
    PythonTool,
    PythonToolLoadError,
    load_python_tool,
    parse_docstring,
    register_python_tools,
)
from tests.engine.harness import WAIT
from tests.tools import sample_tools

SAMPLES = "tests.tools.sample_tools"


def context() -> ToolContext:
    return ToolContext(
        session_id="s1",
        run_id="r1",
        tool_call_id="call_1",
        emit=lambda event: None,
        get_state=lambda: None,
        set_state=lambda state: None,
    )


def entry(function: str, number: int = 1, **extra: object) -> PythonToolConfig:
    return PythonToolConfig(label=f"[[tools.python]] entry {number}", function=function, **extra)  # type: ignore[arg-type]


# --- schema -------------------------------------------------------------------------


def test_the_docstring_gives_the_description_and_each_arguments_description() -> None:
    tool = PythonTool(sample_tools.forecast)

    assert tool.name == "forecast"
    assert tool.description == "Tomorrow's weather in a city."
    assert tool.source == "python"
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "The city's name, e.g. 'Paris'."},
            "days": {
                "type": "integer",
                "default": 1,
                "description": "How many days ahead (1 means tomorrow).",
            },
            "unit": {
                "type": "string",
                "enum": ["C", "F"],
                "default": "C",
                "description": "Celsius or Fahrenheit.",
            },
        },
        "required": ["city"],
        "additionalProperties": False,
    }


def test_each_parameter_type_maps_to_its_json_schema() -> None:
    schema = PythonTool(sample_tools.everything).parameters
    props = schema["properties"]
    assert isinstance(props, dict)

    assert props["text"] == {"type": "string"}
    assert props["count"] == {"type": "integer"}
    assert props["ratio"] == {"type": "number"}
    assert props["flag"] == {"type": "boolean"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"]}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }
    assert props["point"] == {
        "anyOf": [{"$ref": "#/$defs/Point"}, {"type": "null"}],
        "default": None,
    }
    defs = schema["$defs"]
    assert isinstance(defs, dict)
    point = defs["Point"]
    assert isinstance(point, dict)
    assert point["required"] == ["x", "y"]
    assert schema["required"] == ["text", "count", "ratio", "flag", "mode"]


def test_config_overrides_the_name_description_and_timeout() -> None:
    tool = load_python_tool(
        entry(f"{SAMPLES}:forecast", name="weather", description="The weather.", timeout=2.5)
    )
    assert (tool.name, tool.description, tool.timeout) == ("weather", "The weather.", 2.5)


def test_a_function_without_a_docstring_is_described_by_its_name() -> None:
    def bare(x: int) -> int:
        return x

    assert "bare" in PythonTool(bare).description


def test_the_docstring_parser_stops_the_summary_at_the_first_blank_line_and_reads_args() -> None:
    summary, args = parse_docstring(
        "Add two\nnumbers.\n\nMore.\n\nArgs:\n    a (int): the first\n    b: the second,\n"
        "        continued\n\nReturns:\n    the sum\n"
    )
    assert summary == "Add two numbers."
    assert args == {"a": "the first", "b": "the second, continued"}


# --- calls ----------------------------------------------------------------------------


async def test_a_sync_function_runs_and_its_pydantic_model_is_dumped_as_json() -> None:
    tool = PythonTool(sample_tools.forecast)
    result = await tool.call({"city": "Paris"}, context())
    assert json.loads(result.content) == {"city": "Paris", "celsius": 21.5, "sky": "sunny"}
    assert not result.is_error


async def test_a_sync_function_runs_in_a_daemon_thread_off_the_event_loop() -> None:
    result = await PythonTool(sample_tools.which_thread).call({}, context())
    assert json.loads(result.content) == {"main": False, "daemon": True}


def threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"python-tool-{name}"]


async def test_a_tool_with_max_stranded_calls_still_running_refuses_new_calls_until_one_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="engine_service.tools.python.tool")
    tool = PythonTool(sample_tools.wait_sync, name="stuck", max_stranded_calls=2)
    # A timeout strands one call: its thread blocks on ``release``, which only the test sets.
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await tool.call({}, context())
    # An interrupt strands another.
    interrupted = asyncio.ensure_future(tool.call({}, context()))
    async with asyncio.timeout(WAIT):
        await asyncio.to_thread(sample_tools.started.wait, WAIT)
    interrupted.cancel()
    with pytest.raises(asyncio.CancelledError):
        await interrupted
    assert tool.threads.stranded == 2
    assert len(threads_named("stuck")) == 2

    for _ in range(2):
        with pytest.raises(ToolError) as refused:
            await tool.call({}, context())
        assert str(refused.value) == (
            "tool 'stuck' not started: 2 earlier calls are still running after a timeout or an "
            "interrupt ([[tools.python]] max_stranded_calls = 2); try again later"
        )
    assert len(threads_named("stuck")) == 2  # the refused calls started nothing
    # One warning, when the count reached the limit; none per refusal.
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.WARNING,
            "python tool 'stuck': 2 calls are still running after a timeout or an interrupt "
            "([[tools.python]] max_stranded_calls = 2); new calls are refused until one returns",
        )
    ]
    caplog.clear()

    sample_tools.release.set()
    for thread in threads_named("stuck"):
        thread.join(WAIT)
    assert threads_named("stuck") == []
    assert tool.threads.stranded == 0
    assert (await tool.call({}, context())).content == "released"
    assert [r.getMessage() for r in caplog.records] == [
        "python tool 'stuck': a stranded call returned; calls are accepted again"
    ]


async def test_one_stranded_call_of_a_tool_limited_to_one_refuses_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tool = PythonTool(sample_tools.wait_sync, name="stuck", max_stranded_calls=1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0):
            await tool.call({}, context())

    with pytest.raises(ToolError) as refused:
        await tool.call({}, context())
    assert "not started: 1 earlier call is still running" in str(refused.value)
    assert "python tool 'stuck': 1 call is still running" in caplog.text


async def test_a_call_that_returned_before_its_timeout_fired_is_not_stranded() -> None:
    tool = PythonTool(sample_tools.which_thread, name="quick", max_stranded_calls=1)
    for _ in range(3):
        await tool.call({}, context())
    assert tool.threads.stranded == 0


async def test_an_async_function_is_awaited_and_a_string_is_returned_as_is() -> None:
    result = await PythonTool(sample_tools.shout).call({"text": "hi"}, context())
    assert result.content == "HI!"


async def test_arguments_are_converted_to_the_annotated_types_including_models() -> None:
    tool = PythonTool(sample_tools.everything)
    arguments = {
        "text": "t",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "mode": "fast",
        "tags": ["a", "b"],
        "point": {"x": 1, "y": 2.5},
    }
    result = json.loads((await tool.call(arguments, context())).content)
    assert result["point_type"] == "Point"
    assert result["x_plus_y"] == 3.5
    assert result["tags"] == ["a", "b"]
    assert result["note"] is None


async def test_parameters_named_like_basemodel_attributes_or_private_names_work() -> None:
    tool = PythonTool(sample_tools.reserved_names)
    props = tool.parameters["properties"]
    assert isinstance(props, dict)
    assert list(props) == ["json", "model_config", "_private"]
    result = await tool.call({"json": "j", "model_config": "m", "_private": 2}, context())
    assert json.loads(result.content) == ["j", "m", 2]


async def test_a_tool_error_raised_by_the_function_reaches_the_llm_as_its_message() -> None:
    with pytest.raises(ToolError) as raised:
        await PythonTool(sample_tools.refuse).call({"reason": "no such city"}, context())
    assert str(raised.value) == "no such city"


async def test_none_is_returned_as_json_null() -> None:
    assert (await PythonTool(sample_tools.nothing).call({}, context())).content == "null"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, "argument 'city': Field required"),
        ({"city": "Paris", "days": "many"}, "argument 'days'"),
        ({"city": "Paris", "unit": "K"}, "argument 'unit'"),
        ({"city": "Paris", "wind": 3}, "argument 'wind': Extra inputs are not permitted"),
    ],
)
async def test_invalid_arguments_are_a_tool_error_naming_the_argument(
    arguments: dict[str, object], expected: str
) -> None:
    with pytest.raises(ToolError, match="invalid arguments") as raised:
        await PythonTool(sample_tools.forecast).call(arguments, context())
    assert expected in str(raised.value)


async def test_a_nested_model_field_error_names_its_path() -> None:
    arguments = {"text": "t", "count": 1, "ratio": 1, "flag": False, "mode": "slow"}
    with pytest.raises(ToolError, match=r"argument 'point\.y'"):
        await PythonTool(sample_tools.everything).call({**arguments, "point": {"x": 1}}, context())


async def test_an_exception_in_the_function_is_a_tool_error_with_its_type_and_message() -> None:
    with pytest.raises(ToolError, match="ZeroDivisionError: float division by zero"):
        await PythonTool(sample_tools.divide).call({"a": 1, "b": 0}, context())


async def test_a_result_that_is_not_json_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="not JSON"):
        await PythonTool(sample_tools.unserializable).call({}, context())


# --- loading --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz'"),
        (f"{SAMPLES}:missing", "has no attribute 'missing'"),
        (f"{SAMPLES}:NOT_A_FUNCTION", "is not a function (it is a int)"),
        (f"{SAMPLES}:Point", "is not a function"),
        (f"{SAMPLES}:untyped", "parameter 'x' has no type annotation"),
        (f"{SAMPLES}:variadic", "*args and **kwargs"),
        (f"{SAMPLES}:odd_type", "unsupported parameter type"),
    ],
)
def test_a_function_that_cannot_be_a_tool_is_refused_naming_the_entry(
    function: str, expected: str
) -> None:
    with pytest.raises(PythonToolLoadError) as raised:
        load_python_tool(entry(function, number=3))
    message = str(raised.value)
    assert message.startswith(f"[[tools.python]] entry 3 ({function}): ")
    assert expected in message


def test_a_name_taken_by_another_tool_is_refused_naming_the_entry() -> None:
    registry = ToolRegistry(builtin_tools())
    configs = [entry(f"{SAMPLES}:shout"), entry(f"{SAMPLES}:calculate", number=2)]
    with pytest.raises(PythonToolLoadError, match=r"entry 2 .*'calculate' is already registered"):
        register_python_tools(configs, registry)

    registry = ToolRegistry()
    configs = [entry(f"{SAMPLES}:shout"), entry(f"{SAMPLES}:forecast", number=2, name="shout")]
    with pytest.raises(PythonToolLoadError, match=r"entry 2 .*'shout' is already registered"):
        register_python_tools(configs, registry)


# --- config -----------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text)
    return path


def test_tools_python_tables_are_read_from_the_config_beside_the_tools_settings(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        "[tools]\ntimeout = 5.0\n\n"
        f'[[tools.python]]\nfunction = "{SAMPLES}:forecast"\nname = "weather"\ntimeout = 2\n'
        "max_stranded_calls = 3\n\n"
        f'[[tools.python]]\nfunction = "{SAMPLES}:shout"\n',
    )
    settings = load_settings(path, {})

    assert settings.tools.timeout == 5.0
    first, second = settings.tools.python
    assert (first.function, first.name, first.timeout) == (f"{SAMPLES}:forecast", "weather", 2.0)
    assert (first.max_stranded_calls, second.max_stranded_calls) == (3, 8)
    assert (second.label, second.name, second.timeout) == ("[[tools.python]] entry 2", None, None)
    registry = build_tools(settings)
    assert registry.source_of("weather") == "python"
    assert registry.source_of("shout") == "python"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('name = "x"', "entry 1: 'function' must be 'package.module:function'; got None"),
        ('function = "just_a_module"', "entry 1: 'function' must be 'package.module:function'"),
        (f'function = "{SAMPLES}:shout"\nfunc = 1', "entry 1: unknown key 'func'"),
        (f'function = "{SAMPLES}:shout"\ntimeout = 0', "entry 1: 'timeout' must be a positive"),
        (f'function = "{SAMPLES}:shout"\nname = "a b"', "entry 1: 'name' must be"),
        (
            f'function = "{SAMPLES}:shout"\nmax_stranded_calls = 0',
            "entry 1: 'max_stranded_calls' must be a positive integer; got 0",
        ),
    ],
)
def test_a_bad_tools_python_table_is_a_config_error_naming_the_entry(
    tmp_path: Path, table: str, expected: str
) -> None:
    path = write(tmp_path, f"[[tools.python]]\n{table}\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(path, {})
    assert str(raised.value).startswith("[[tools.python]] ")
    assert expected in str(raised.value)


def test_a_function_that_does_not_load_stops_the_build_with_a_config_error(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        f'[[tools.python]]\nfunction = "{SAMPLES}:shout"\n\n'
        '[[tools.python]]\nfunction = "no_such_module_xyz:f"\n',
    )
    with pytest.raises(ConfigError, match=r"^\[\[tools.python\]\] entry 2 .*cannot import"):
        build_tools(load_settings(path, {}))


def test_a_misspelt_tools_python_table_gets_a_did_you_mean(tmp_path: Path) -> None:
    path = write(tmp_path, f'[[tools.pyton]]\nfunction = "{SAMPLES}:shout"\n')
    with pytest.raises(ConfigError, match="did you mean 'python'"):
        load_settings(path, {})


@pytest.fixture
def own_path(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``sys.path`` and ``sys.modules`` as they were, once the test is over."""
    import sys

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    return sys.path


def test_a_module_beside_the_config_file_loads_from_the_config_files_directory(
    tmp_path: Path, own_path: list[str]
) -> None:
    (tmp_path / "beside_tools_1.py").write_text(
        'def greet(name: str) -> str:\n    """Say hello."""\n    return f"hello {name}"\n'
    )
    path = write(tmp_path, '[[tools.python]]\nfunction = "beside_tools_1:greet"\n')

    registry = build_tools(load_settings(path, {}))

    assert registry.source_of("greet") == "python"
    assert own_path[-1] == str(tmp_path)  # appended: it shadows no installed module


def test_a_module_that_is_nowhere_is_named_with_where_the_engine_looks(
    tmp_path: Path, own_path: list[str]
) -> None:
    path = write(tmp_path, '[[tools.python]]\nfunction = "nowhere_tools_xyz.sub:f"\n')

    with pytest.raises(ConfigError) as raised:
        build_tools(load_settings(path, {}))

    message = str(raised.value)
    assert message.startswith(
        "[[tools.python]] entry 1 (nowhere_tools_xyz.sub:f): cannot import "
        "'nowhere_tools_xyz.sub': No module named 'nowhere_tools_xyz'; is 'nowhere_tools_xyz' "
        f"on the engine's PYTHONPATH or beside the config file ({tmp_path})? The working "
        "directory is not searched: start the engine with PYTHONPATH=."
    )
    assert str(tmp_path) not in own_path


def test_a_missing_module_without_a_config_file_names_pythonpath() -> None:
    with pytest.raises(PythonToolLoadError) as raised:
        load_python_tool(entry("nowhere_tools_xyz:f"))

    message = str(raised.value)
    assert "is 'nowhere_tools_xyz' on the engine's PYTHONPATH? The working directory" in message
    assert "config file" not in message


def test_a_dependency_the_module_lacks_is_named_without_the_path_hint(
    tmp_path: Path, own_path: list[str]
) -> None:
    (tmp_path / "beside_tools_2.py").write_text("import no_such_dependency_xyz\n")
    path = write(tmp_path, '[[tools.python]]\nfunction = "beside_tools_2:f"\n')

    with pytest.raises(ConfigError) as raised:
        build_tools(load_settings(path, {}))

    assert str(raised.value).endswith(
        "cannot import 'beside_tools_2': No module named 'no_such_dependency_xyz'"
    )
