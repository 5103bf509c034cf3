"""The settings as rows, for the tests (moved from agentik/config, where nothing read
them): ``setting_keys``, what the README's table and the docs must name, and ``describe``, a
settings object as a table with the secrets masked."""

from __future__ import annotations

from agentik.config import Settings
from agentik.config.keys import SETTINGS


def setting_keys() -> list[tuple[str, str, str]]:
    """``(setting, env var, TOML key)`` for every setting, in documentation order."""
    return [(key.flat, key.env, f"[{key.table}] {key.key}") for key in SETTINGS]


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """``(setting, env var, value)`` rows for a table; secrets are masked."""
    rows = []
    for key in SETTINGS:
        value = getattr(getattr(settings, key.table), key.key)
        if key.meta.get("secret") and value:
            shown = "***"
        elif value is None:
            shown = "(not set)"
        elif isinstance(value, tuple) and all(isinstance(item, str) for item in value):
            shown = ", ".join(value) or "(none)"
        else:
            shown = str(value)
        rows.append((key.flat, key.env, shown))
    return rows
