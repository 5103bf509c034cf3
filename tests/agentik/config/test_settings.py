"""The whole configuration (``agentik.config.settings``): a model per table, the
engine target derived from the gRPC address, the limits derived from several keys, the
context budget checked across tables."""

from __future__ import annotations

import pytest

from agentik.config import ConfigError, LlmSettings, Settings, WebSettings, load_settings
from engine_service.build import context_limits


def test_each_toml_table_is_a_model_read_nested() -> None:
    settings = Settings(llm=LlmSettings(timeout=5.0), web=WebSettings(workers=3))
    assert (settings.llm.timeout, settings.web.workers, settings.engine.workers) == (5.0, 3, 1)
    assert settings.web.engine_target == "127.0.0.1:50051"  # derived from [engine] grpc_addr
    with pytest.raises(TypeError, match="'llm_timeout'"):
        Settings(llm_timeout=5.0)  # type: ignore[call-arg]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.llm = settings.llm  # type: ignore[misc]


def test_the_api_key_is_kept_out_of_the_repr() -> None:
    assert "sk-very-secret" not in repr(Settings(llm=LlmSettings(api_key="sk-very-secret")))


@pytest.mark.parametrize(
    ("grpc_addr", "target"),
    [
        ("127.0.0.1:6000", "127.0.0.1:6000"),
        ("0.0.0.0:6000", "127.0.0.1:6000"),
        ("[::]:6000", "[::1]:6000"),
        ("engine:6000", "engine:6000"),
    ],
)
def test_engine_target_defaults_to_a_dialable_grpc_addr(grpc_addr: str, target: str) -> None:
    assert load_settings(None, {"AGENTIK_GRPC_ADDR": grpc_addr}).web.engine_target == target


def test_an_explicit_engine_target_is_kept() -> None:
    env = {"AGENTIK_GRPC_ADDR": "0.0.0.0:6000", "AGENTIK_ENGINE_TARGET": "engine:6000"}
    assert load_settings(None, env).web.engine_target == "engine:6000"


def test_the_grpc_request_limit_follows_the_body_limit_and_the_discard_bound_defaults() -> None:
    default = Settings()
    assert default.request_message_bytes == 4 * 1024 * 1024
    assert default.discard_body_bytes == 4 * 1024 * 1024
    raised = load_settings(None, {"AGENTIK_MAX_BODY_BYTES": str(8 << 20)})
    assert raised.request_message_bytes == 16 << 20
    assert raised.discard_body_bytes == 16 << 20


def test_the_context_budget_comes_from_the_model_name_unless_set() -> None:
    assert context_limits(load_settings(None, {"AGENTIK_MODEL": "gpt-4o-mini"})).window == 128_000
    assert context_limits(load_settings(None, {"AGENTIK_MODEL": "llama3:8b"})).window == 8_192
    assert context_limits(load_settings(None, {"AGENTIK_MODEL": "something-new"})).window == 128_000
    small = context_limits(
        load_settings(None, {"AGENTIK_CONTEXT_TOKENS": "4000", "AGENTIK_COMPACTION": "TRIM"})
    )
    assert (small.window, small.reserve, small.budget) == (4000, 1000, 3000)
    assert small.compaction == "trim"
    big = context_limits(load_settings(None, {"AGENTIK_CONTEXT_TOKENS": "200000"}))
    assert (big.reserve, big.max_result_chars) == (4096, 50_000)


def test_bad_context_settings_name_the_setting() -> None:
    with pytest.raises(ConfigError, match=r"AGENTIK_COMPACTION.*summarize, trim, off"):
        load_settings(None, {"AGENTIK_COMPACTION": "squash"})
    with pytest.raises(ConfigError, match="AGENTIK_TOOLS_MAX_RESULT_CHARS"):
        load_settings(None, {"AGENTIK_TOOLS_MAX_RESULT_CHARS": "0"})
    with pytest.raises(ConfigError, match=r"context_tokens .100. must be 0 .* or at least 512"):
        load_settings(None, {"AGENTIK_CONTEXT_TOKENS": "100"})
    with pytest.raises(ConfigError, match="must be less than context_tokens"):
        load_settings(
            None, {"AGENTIK_CONTEXT_TOKENS": "4000", "AGENTIK_RESERVE_OUTPUT_TOKENS": "4000"}
        )
