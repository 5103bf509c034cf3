"""The tables' models (``agentik.config.tables``): their defaults, and keys read from
the file and the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import DEFAULT_SYSTEM_PROMPT, ConfigError, Settings, load_settings


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_without_file_or_env_every_setting_has_its_default() -> None:
    settings = load_settings(None, {})
    assert settings == Settings()
    assert settings.engine.grpc_addr == "127.0.0.1:50051"
    assert settings.engine.store == "sqlite:///.agentik/agentik.db"
    assert settings.llm.base_url is None
    assert settings.llm.api_key is None
    assert settings.llm.model == "gpt-4o-mini"
    assert settings.llm.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert settings.llm.max_tool_rounds == 8
    assert settings.llm.timeout == 120.0
    assert settings.llm.first_token_timeout == 60.0
    assert settings.llm.max_retries == 2
    assert settings.tools.timeout == 30.0
    assert settings.engine.max_concurrent_runs == 512
    assert settings.engine.event_retention == 604800.0
    assert settings.engine.shutdown_grace == 10.0
    assert settings.engine.workers == 1
    assert settings.engine.max_message_bytes == 4194304
    assert settings.engine.max_event_bytes == 1048576
    assert settings.engine.stream_buffer_bytes == 8388608
    assert settings.engine.write_timeout == 120.0
    assert settings.engine.write_timeout > settings.web.write_timeout  # the facade cuts first
    assert settings.log.level == "INFO"
    assert settings.web.http_addr == "127.0.0.1:8000"
    assert settings.web.engine_target == "127.0.0.1:50051"
    assert settings.web.workers == 2
    assert settings.web.threads == 64
    assert settings.web.header_timeout == 5.0
    assert settings.web.body_timeout == 15.0
    assert settings.web.queue_timeout == 2.0
    assert settings.web.heartbeat_interval == 15.0
    assert settings.web.max_body_bytes == 1048576
    assert settings.web.on_disconnect == "continue"
    assert settings.web.cors_origins == ()
    assert settings.mcp.servers == ()


def test_the_state_limit_and_the_store_retry_time_come_from_toml_or_env_and_are_checked(
    tmp_path: Path,
) -> None:
    assert (Settings().engine.max_state_bytes, Settings().engine.store_retry_seconds) == (
        1048576,
        5.0,
    )
    path = _write(tmp_path, "[engine]\nmax_state_bytes = 2048\nstore_retry_seconds = 0.5\n")
    settings = load_settings(str(path), {})
    assert (settings.engine.max_state_bytes, settings.engine.store_retry_seconds) == (2048, 0.5)
    env = {"AGENTIK_MAX_STATE_BYTES": "4096", "AGENTIK_STORE_RETRY_SECONDS": "0"}
    settings = load_settings(str(path), env)
    assert (settings.engine.max_state_bytes, settings.engine.store_retry_seconds) == (4096, 0.0)
    with pytest.raises(ConfigError, match=r"invalid max_state_bytes \(from env"):
        load_settings(None, {"AGENTIK_MAX_STATE_BYTES": "0"})
    with pytest.raises(ConfigError, match=r"invalid store_retry_seconds \(from \[engine\]"):
        load_settings(str(_write(tmp_path, "[engine]\nstore_retry_seconds = -1\n")), {})


def test_the_token_budget_and_the_discard_bound_come_from_env_and_toml(tmp_path: Path) -> None:
    settings = load_settings(
        None, {"AGENTIK_TOKENS_PER_DAY": "50000", "AGENTIK_WEB_DISCARD_BODY_BYTES": "123"}
    )
    assert (settings.auth.tokens_per_day, settings.discard_body_bytes) == (50000, 123)
    path = _write(tmp_path, "[auth]\ntokens_per_day = 7\n[web]\ndiscard_body_bytes = 9\n")
    from_toml = load_settings(str(path), {})
    assert (from_toml.auth.tokens_per_day, from_toml.web.discard_body_bytes) == (7, 9)
    with pytest.raises(ConfigError, match="AGENTIK_TOKENS_PER_DAY"):
        load_settings(None, {"AGENTIK_TOKENS_PER_DAY": "-1"})


def test_the_a2a_card_settings_come_from_toml_and_bad_skills_name_the_setting(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        """
[a2a]
public_url = "https://agent.example/"
name = "helper"

[[a2a.skills]]
id = "chat"
name = "Chat"
description = "Talks."
""",
    )
    settings = load_settings(str(path), {})
    assert settings.a2a.public_url == "https://agent.example/"
    assert settings.a2a.name == "helper"
    assert settings.a2a.skills == ({"id": "chat", "name": "Chat", "description": "Talks."},)
    with pytest.raises(ConfigError, match=r"agent_skills.*AGENTIK_AGENT_SKILLS"):
        load_settings(None, {"AGENTIK_AGENT_SKILLS": '[{"id": "x"}]'})
    with pytest.raises(ConfigError, match="public_url"):
        load_settings(None, {"AGENTIK_PUBLIC_URL": "ftp://nope"})


def test_the_webhooks_table_reads_env_and_a_bad_secret_is_named_hidden() -> None:
    settings = load_settings(
        None,
        {
            "AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "true",
            "AGENTIK_WEBHOOKS_MAX_ATTEMPTS": "3",
            "AGENTIK_WEBHOOKS_BASE_DELAY": "0.5",
            "AGENTIK_WEBHOOK_SECRET": "whsec_c2VjcmV0",
        },
    )
    hooks = settings.webhooks
    assert (hooks.allow_private, hooks.max_attempts, hooks.base_delay) == (True, 3, 0.5)
    assert hooks.secret == "whsec_c2VjcmV0" and "c2VjcmV0" not in repr(settings)
    with pytest.raises(ConfigError) as refused:
        load_settings(None, {"AGENTIK_WEBHOOK_SECRET": "whsec_not base64!"})
    assert "webhook_secret" in str(refused.value) and "not base64!" not in str(refused.value)
    with pytest.raises(ConfigError, match="webhooks_max_attempts"):
        load_settings(None, {"AGENTIK_WEBHOOKS_MAX_ATTEMPTS": "0"})
