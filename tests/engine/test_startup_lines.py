"""The engine's start-up lines say whether auth is on, which tools loaded, which wait for a
person, and which model each agent talks to."""

from __future__ import annotations

import logging
from pathlib import Path

from agentik.config import load_settings
from engine_service.build import build_engine
from engine_service.server import llm_lines, startup_lines


def lines(config: Path | None = None, **env: str) -> list[str]:
    settings = load_settings(config, {"AGENTIK_STORE": "memory://", **env})
    return startup_lines(settings, build_engine(settings))


def models(config: Path | None = None, **env: str) -> list[tuple[int, str]]:
    settings = load_settings(config, {"AGENTIK_STORE": "memory://", **env})
    return llm_lines(build_engine(settings))


RESEARCHER = '[[agents]]\nname = "researcher"\nbase_url = "http://127.0.0.1:9/v1"\n'


def test_the_defaults_say_auth_off_the_native_tools_and_no_approval() -> None:
    assert lines() == [
        "auth: off (no tokens; serves loopback only unless AGENTIK_ALLOW_ANONYMOUS)",
        "tools: 3 loaded (current_time, calculate, update_state)",
        "approval needed: none (AGENTIK_TOOLS_APPROVAL)",
    ]


def test_tokens_ask_user_and_approvals_are_named() -> None:
    said = lines(
        AGENTIK_TOKENS="alice:tokenA,bob:tokenB",
        AGENTIK_TOOLS_ASK_USER="true",
        AGENTIK_TOOLS_APPROVAL="calc*,time__*",
    )

    assert said == [
        "auth: on (2 tokens)",
        "tools: 4 loaded (current_time, calculate, update_state, ask_user)",
        "approval needed: calculate (calc*, time__*)",
    ]


def test_one_mcp_server_is_said_in_the_singular(tmp_path: Path) -> None:
    server = '[[mcp.servers]]\nname = "{}"\ncommand = "true"\n'
    one = tmp_path / "one.toml"
    one.write_text(server.format("a"))
    two = tmp_path / "two.toml"
    two.write_text(server.format("a") + server.format("b"))

    assert lines(one)[1].endswith("; MCP tools join as their server connects")
    assert lines(two)[1].endswith("; MCP tools join as their 2 servers connect")


def test_the_offline_model_alone_is_one_warning() -> None:
    assert models() == [
        (
            logging.WARNING,
            "using the built-in OFFLINE model: answers are canned echoes. "
            "Set OPENAI_BASE_URL and/or OPENAI_API_KEY to use a real LLM.",
        )
    ]


def test_an_offline_default_agent_beside_agents_with_endpoints_is_named_as_the_default(
    tmp_path: Path,
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(RESEARCHER)

    assert models(config) == [
        (
            logging.WARNING,
            "the default agent 'agentik' uses the built-in OFFLINE model: its answers are "
            "canned echoes (agent 'researcher' has an LLM endpoint of its own). Set "
            "OPENAI_BASE_URL and/or OPENAI_API_KEY ([llm]) to give it a real LLM.",
        ),
        (logging.INFO, "LLM of agent 'researcher': openai:gpt-4o-mini at http://127.0.0.1:9/v1"),
    ]


def test_each_agent_with_a_model_of_its_own_is_named_after_the_default(tmp_path: Path) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(RESEARCHER + '[[agents]]\nname = "same"\n')

    assert models(config, OPENAI_BASE_URL="http://127.0.0.1:8/v1") == [
        (logging.INFO, "LLM: openai:gpt-4o-mini at http://127.0.0.1:8/v1"),
        (logging.INFO, "LLM of agent 'researcher': openai:gpt-4o-mini at http://127.0.0.1:9/v1"),
    ]
