"""The engine's start-up lines say whether auth is on, which tools loaded, which wait for a
person."""

from __future__ import annotations

from agentik.config import load_settings
from engine_service.build import build_engine
from engine_service.server import startup_lines


def lines(**env: str) -> list[str]:
    settings = load_settings(None, {"AGENTIK_STORE": "memory://", **env})
    return startup_lines(settings, build_engine(settings))


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
