"""Every key of every table (``agentik.config.keys``): its setting name and environment
variable, and a bad value's error naming the setting, where it came from and the value
(never a secret)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import ConfigError, Settings, load_settings
from tests.agentik.config.settings_rows import describe, setting_keys


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("env_var", "value", "setting", "why"),
    [
        ("AGENTIK_MAX_TOOL_ROUNDS", "0", "max_tool_rounds", "must be positive"),
        ("AGENTIK_MAX_TOOL_ROUNDS", "eight", "max_tool_rounds", "must be an integer"),
        ("AGENTIK_MAX_TOOL_ROUNDS", "2.5", "max_tool_rounds", "must be an integer"),
        ("AGENTIK_LLM_MAX_RETRIES", "-1", "llm_max_retries", "must be at least 0"),
        ("AGENTIK_LLM_TIMEOUT", "0", "llm_timeout", "must be positive"),
        ("AGENTIK_LLM_TIMEOUT", "soon", "llm_timeout", "must be a number of seconds"),
        ("AGENTIK_LLM_TIMEOUT", "inf", "llm_timeout", "must be a finite number"),
        ("AGENTIK_LLM_FIRST_TOKEN_TIMEOUT", "-5", "llm_first_token_timeout", "must be positive"),
        ("AGENTIK_TOOL_TIMEOUT", "nan", "tool_timeout", "must be a finite number"),
        ("AGENTIK_MAX_CONCURRENT_RUNS", "-3", "max_concurrent_runs", "must be positive"),
        ("AGENTIK_EVENT_RETENTION", "-1", "event_retention", "must not be negative"),
        ("AGENTIK_SHUTDOWN_GRACE", "-0.5", "shutdown_grace", "must not be negative"),
        ("AGENTIK_RESUME_RUNS", "maybe", "resume_runs", "must be true or false"),
        ("AGENTIK_MAX_RESUMES", "0", "max_resumes", "must be positive"),
        ("AGENTIK_TOOLS_IN_DOUBT", "retry", "tools_in_doubt", "must be one of"),
        ("AGENTIK_MAX_MESSAGE_BYTES", "0", "max_message_bytes", "must be positive"),
        ("AGENTIK_MAX_EVENT_BYTES", "100", "max_event_bytes", "must be between 16384 and"),
        ("AGENTIK_MAX_EVENT_BYTES", "4194304", "max_event_bytes", "must be between 16384 and"),
        ("AGENTIK_STREAM_BUFFER_BYTES", "1k", "stream_buffer_bytes", "must be an integer"),
        ("AGENTIK_WEB_WORKERS", "0", "web_workers", "must be positive"),
        ("AGENTIK_WEB_THREADS", "many", "web_threads", "must be an integer"),
        ("AGENTIK_WEB_HEADER_TIMEOUT", "0", "web_header_timeout", "must be positive"),
        ("AGENTIK_WEB_BODY_TIMEOUT", "soon", "web_body_timeout", "must be a number of seconds"),
        ("AGENTIK_WEB_QUEUE_TIMEOUT", "-1", "web_queue_timeout", "must not be negative"),
        ("AGENTIK_ENGINE_WRITE_TIMEOUT", "-1", "engine_write_timeout", "must not be negative"),
        ("AGENTIK_ENGINE_WRITE_TIMEOUT", "soon", "engine_write_timeout", "a number of seconds"),
        ("AGENTIK_HEARTBEAT", "0", "heartbeat_interval", "must be positive"),
        ("AGENTIK_MAX_BODY_BYTES", "-1", "max_body_bytes", "must be positive"),
        ("AGENTIK_GRPC_ADDR", "50051", "grpc_addr", "must be HOST:PORT"),
        ("AGENTIK_GRPC_ADDR", "localhost:", "grpc_addr", "must be HOST:PORT"),
        ("AGENTIK_GRPC_ADDR", ":50051", "grpc_addr", "valid host name"),
        ("AGENTIK_GRPC_ADDR", "localhost:http", "grpc_addr", "must be HOST:PORT"),
        ("AGENTIK_GRPC_ADDR", "localhost:70000", "grpc_addr", "port must be between 0 and 65535"),
        ("AGENTIK_GRPC_ADDR", "::1:50051", "grpc_addr", "IPv6 address in brackets"),
        ("AGENTIK_GRPC_ADDR", "[nope]:50051", "grpc_addr", "valid IPv6 address"),
        ("AGENTIK_GRPC_ADDR", "300.1.1.1:50051", "grpc_addr", "valid host name or IP"),
        ("AGENTIK_HTTP_ADDR", "my host:80", "http_addr", "valid host name"),
        ("AGENTIK_ENGINE_TARGET", "engine:0", "engine_target", "between 1 and 65535"),
        ("AGENTIK_STORE", "mysql://db/agentik", "store", "unknown store scheme 'mysql'"),
        ("AGENTIK_STORE", "agentik.db", "store", "must be a URL"),
        ("AGENTIK_STORE", "sqlite://agentik.db", "store", "needs three slashes"),
        ("AGENTIK_STORE", "sqlite:///", "store", "needs three slashes and a path"),
        ("AGENTIK_STORE", "memory://x", "store", "takes nothing after the scheme"),
        ("AGENTIK_LOG_LEVEL", "verbose", "log_level", "must be one of DEBUG, INFO"),
        ("AGENTIK_ON_DISCONNECT", "abort", "on_disconnect", "must be one of continue, cancel"),
        ("OPENAI_BASE_URL", "localhost:11434", "openai_base_url", "http:// or https:// URL"),
        ("AGENTIK_MODEL", "   ", "model", "must not be empty"),
        ("AGENTIK_CORS_ORIGINS", "app.example", "cors_origins", "is not an origin"),
        ("AGENTIK_CORS_ORIGINS", "https://app.example/", "cors_origins", "has a path"),
        ("AGENTIK_CORS_ORIGINS", "https://app.example/ui", "cors_origins", "has a path"),
        ("AGENTIK_CORS_ORIGINS", "https://u@app.example", "cors_origins", "has user info"),
        ("AGENTIK_CORS_ORIGINS", "https://app.example:99999", "cors_origins", "invalid port"),
        ("AGENTIK_CORS_ORIGINS", "https://my app", "cors_origins", "no valid host"),
        ("AGENTIK_CORS_ORIGINS", "*,https://a.example", "cors_origins", "give it alone"),
    ],
)
def test_a_bad_env_value_names_the_setting_the_variable_and_theconvert(
    env_var: str, value: str, setting: str, why: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {env_var: value})
    message = str(caught.value)
    assert message.startswith(f"invalid {setting} (from env {env_var}): ")
    assert why in message
    assert message.endswith(f"got {value!r}")


@pytest.mark.parametrize(
    ("toml", "setting", "key", "why", "shown"),
    [
        ("[llm]\nmax_tool_rounds = '8'", "max_tool_rounds", "[llm] max_tool_rounds", "str", "'8'"),
        (
            "[llm]\nmax_tool_rounds = 8.0",
            "max_tool_rounds",
            "[llm] max_tool_rounds",
            "float",
            "8.0",
        ),
        (
            "[llm]\nmax_tool_rounds = true",
            "max_tool_rounds",
            "[llm] max_tool_rounds",
            "bool",
            "True",
        ),
        ("[llm]\ntimeout = 'fast'", "llm_timeout", "[llm] timeout", "seconds, not str", "'fast'"),
        ("[llm]\ntimeout = inf", "llm_timeout", "[llm] timeout", "finite", "inf"),
        ("[llm]\nmodel = 5", "model", "[llm] model", "must be a string", "5"),
        ("[tools]\ntimeout = -1", "tool_timeout", "[tools] timeout", "must be positive", "-1"),
        ("[engine]\nstore = 'redis://x'", "store", "[engine] store", "'redis'", "'redis://x'"),
        ("[web]\nworkers = 0", "web_workers", "[web] workers", "must be positive", "0"),
        ("[engine]\nworkers = 0", "engine_workers", "[engine] workers", "must be positive", "0"),
        ("[engine]\nworkers = '2'", "engine_workers", "[engine] workers", "str", "'2'"),
        ("[log]\nlevel = 'loud'", "log_level", "[log] level", "must be one of", "'loud'"),
        ("[web]\nhttp_addr = 8000", "http_addr", "[web] http_addr", "must be a string", "8000"),
        (
            "[web]\ncors_origins = 'https://a.example'",
            "cors_origins",
            "[web] cors_origins",
            "must be an array of origins, not str",
            "'https://a.example'",
        ),
        (
            "[web]\ncors_origins = [1]",
            "cors_origins",
            "[web] cors_origins",
            "every origin must be a string, not int",
            "[1]",
        ),
    ],
)
def test_a_bad_toml_value_names_the_setting_the_key_and_theconvert(
    tmp_path: Path, toml: str, setting: str, key: str, why: str, shown: str
) -> None:
    path = _write(tmp_path, toml + "\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    message = str(caught.value)
    assert message.startswith(f"invalid {setting} (from {key} in {str(path)!r}): ")
    assert why in message
    assert message.endswith(f"got {shown}")


def test_a_bad_api_key_value_is_never_echoed(tmp_path: Path) -> None:
    path = _write(tmp_path, "[llm]\napi_key = 12345\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(path, {})
    assert "12345" not in str(caught.value)
    assert "openai_api_key" in str(caught.value)
    assert "[llm] api_key" in str(caught.value)


def test_describe_lists_every_setting_with_its_env_var_and_masks_the_api_key() -> None:
    rows = describe(load_settings(None, {"OPENAI_API_KEY": "sk-very-secret"}))
    by_name = {name: (env, value) for name, env, value in rows}
    assert by_name["openai_api_key"] == ("OPENAI_API_KEY", "***")
    assert by_name["openai_base_url"] == ("OPENAI_BASE_URL", "(not set)")
    assert by_name["max_tool_rounds"] == ("AGENTIK_MAX_TOOL_ROUNDS", "8")
    assert by_name["heartbeat_interval"] == ("AGENTIK_HEARTBEAT", "15.0")
    assert by_name["cors_origins"] == ("AGENTIK_CORS_ORIGINS", "(none)")
    assert by_name["tokens_per_day"] == ("AGENTIK_TOKENS_PER_DAY", "0")
    assert by_name["web_discard_body_bytes"] == ("AGENTIK_WEB_DISCARD_BODY_BYTES", "0")

    assert by_name["context_tokens"] == ("AGENTIK_CONTEXT_TOKENS", "0")
    assert by_name["reserve_output_tokens"] == ("AGENTIK_RESERVE_OUTPUT_TOKENS", "0")
    assert by_name["compaction"] == ("AGENTIK_COMPACTION", "summarize")
    assert by_name["tools_max_result_chars"] == ("AGENTIK_TOOLS_MAX_RESULT_CHARS", "50000")

    assert by_name["webhooks_max_attempts"] == ("AGENTIK_WEBHOOKS_MAX_ATTEMPTS", "8")
    assert by_name["webhooks_allow_private"] == ("AGENTIK_WEBHOOKS_ALLOW_PRIVATE", "False")
    assert by_name["resume_runs"] == ("AGENTIK_RESUME_RUNS", "True")
    assert by_name["max_resumes"] == ("AGENTIK_MAX_RESUMES", "3")
    assert by_name["tools_idempotent"] == (
        "AGENTIK_TOOLS_IDEMPOTENT",
        "current_time, calculate",
    )
    assert by_name["tools_in_doubt"] == ("AGENTIK_TOOLS_IN_DOUBT", "ask")
    assert by_name["default_agent"] == ("AGENTIK_DEFAULT_AGENT", "agentik")
    assert by_name["agent_max_depth"] == ("AGENTIK_AGENT_MAX_DEPTH", "3")
    assert by_name["a2a_grpc_url"] == ("AGENTIK_A2A_GRPC_URL", "")
    assert by_name["a2a_max_request_id_chars"] == ("AGENTIK_A2A_MAX_REQUEST_ID_CHARS", "256")
    assert by_name["input_modalities"] == ("AGENTIK_INPUT_MODALITIES", "text, image")
    assert by_name["max_media_parts"] == ("AGENTIK_MAX_MEDIA_PARTS", "16")
    assert by_name["web_stream_reader"][0] == "AGENTIK_WEB_STREAM_READER"
    assert by_name["gc_threshold"] == ("AGENTIK_GC_THRESHOLD", "10000")
    assert by_name["web_gc_threshold"] == ("AGENTIK_WEB_GC_THRESHOLD", "10000")
    assert by_name["llm_max_idle_connections"] == ("AGENTIK_LLM_MAX_IDLE_CONNECTIONS", "256")
    assert by_name["llm_idle_timeout"] == ("AGENTIK_LLM_IDLE_TIMEOUT", "30.0")
    assert by_name["llm_round_timeout"] == ("AGENTIK_LLM_ROUND_TIMEOUT", "1800.0")
    assert by_name["llm_max_answer_bytes"] == ("AGENTIK_LLM_MAX_ANSWER_BYTES", "8388608")
    assert by_name["max_tool_calls_per_round"] == ("AGENTIK_MAX_TOOL_CALLS_PER_ROUND", "128")
    assert by_name["max_streams"] == ("AGENTIK_MAX_STREAMS", "0")
    assert by_name["max_streams_per_caller"] == ("AGENTIK_MAX_STREAMS_PER_CALLER", "0")
    assert by_name["max_sessions_per_caller"] == ("AGENTIK_MAX_SESSIONS_PER_CALLER", "10000")
    assert by_name["engine_write_timeout"] == ("AGENTIK_ENGINE_WRITE_TIMEOUT", "120.0")
    assert by_name["web_write_timeout"] == ("AGENTIK_WEB_WRITE_TIMEOUT", "60.0")
    assert len(rows) == 95
    assert all("sk-very-secret" not in value for _, _, value in rows)


def test_setting_keys_give_env_var_and_toml_key_for_every_setting() -> None:
    keys = setting_keys()
    assert ("max_tool_rounds", "AGENTIK_MAX_TOOL_ROUNDS", "[llm] max_tool_rounds") in keys
    assert ("tool_timeout", "AGENTIK_TOOL_TIMEOUT", "[tools] timeout") in keys
    assert ("log_level", "AGENTIK_LOG_LEVEL", "[log] level") in keys
    assert [name for name, _, _ in keys] == [name for name, _, _ in describe(Settings())]
    assert len({env for _, env, _ in keys}) == len(keys)
