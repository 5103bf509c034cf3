"""What a bad configuration raises: :class:`ConfigError`, whose message names the setting,
where it came from and why."""

from __future__ import annotations

import difflib

__all__ = ["ConfigError", "unknown_name"]


class ConfigError(Exception):
    """The configuration is unusable; the message says which setting, from where, and why."""

    kind = "configuration error"
    """How a command's one line names it: ``agentik: KIND: MESSAGE``."""


def unknown_name(kind: str, name: str, known: list[str], where: str) -> ConfigError:
    """``unknown KIND 'NAME' in WHERE`` with the closest known name, or the known ones."""
    hint = difflib.get_close_matches(name, known, n=1)
    tail = f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(known)}"
    return ConfigError(f"unknown {kind} {name!r} in {where}{tail}")
