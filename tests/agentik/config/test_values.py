"""The one converter (``agentik.config.values``): types and bounds of the values."""

from __future__ import annotations

import pytest

from agentik.config import ConfigError, load_settings
from agentik.config.values import convert


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_engine_workers_from_env_must_be_a_positive_integer(value: str) -> None:
    with pytest.raises(ConfigError, match=r"engine_workers \(from env AGENTIK_ENGINE_WORKERS\)"):
        load_settings(None, {"AGENTIK_ENGINE_WORKERS": value})


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("AGENTIK_LLM_MAX_ANSWER_BYTES", "1000", "must be at least 1024"),
        ("AGENTIK_LLM_ROUND_TIMEOUT", "0", "must be positive"),
        ("AGENTIK_MAX_TOOL_CALLS_PER_ROUND", "0", "must be positive"),
    ],
)
def test_a_bad_bound_of_an_llm_round_is_refused_naming_it(name: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError, match=f"{name}.*{said}"):
        load_settings(None, {name: value})


@pytest.mark.parametrize("name", ["AGENTIK_GC_THRESHOLD", "AGENTIK_WEB_GC_THRESHOLD"])
def test_a_collector_threshold_out_of_bounds_is_refused_naming_it(name: str) -> None:
    with pytest.raises(ConfigError, match="gc_threshold"):
        load_settings(None, {name: "2000000"})
    with pytest.raises(ConfigError, match="gc_threshold"):
        load_settings(None, {name: "-1"})
    assert load_settings(None, {name: "0"})  # 0: Python's own


def test_a_field_of_a_type_the_converter_does_not_know_needs_a_check() -> None:
    with pytest.raises(TypeError, match=r"list\[int\] needs a check"):
        convert("list[int]", {}, [1], False)
    assert convert("list[int]", {"check": lambda raw, env: tuple(raw)}, [1], False) == (1,)


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_request_id_limit_that_is_not_a_positive_integer_is_refused_naming_it(
    value: str,
) -> None:
    with pytest.raises(ConfigError, match="AGENTIK_A2A_MAX_REQUEST_ID_CHARS"):
        load_settings(None, {"AGENTIK_A2A_MAX_REQUEST_ID_CHARS": value})
