"""``[[tools.python]]``: Python functions offered as tools, each a
:class:`PythonToolConfig` (docs/tools.md); the engine imports them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from agentik.config.entries import PER_CALL
from agentik.config.errors import ConfigError
from agentik.config.values import convert, setting

__all__ = ["DEFAULT_MAX_STRANDED_CALLS", "PythonToolConfig", "read_python_tools"]

DEFAULT_MAX_STRANDED_CALLS = 8
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"


@dataclass(frozen=True, slots=True)
class PythonToolConfig:
    """``[[tools.python]]``: a Python function as a tool (docs/tools.md); the engine imports it."""

    label: str = setting(doc="``[[tools.python]] entry N`` (1-based), for error messages.")
    function: str = setting(pattern=f"{_DOTTED}:{_DOTTED}", must="'package.module:function'")
    """``package.module:function`` (the part after ``:`` may be dotted, ``Class.method``)."""
    name: str | None = setting(None, name=64, strip=False, must="1 to 64 of A-Z a-z 0-9 _ -")
    description: str | None = setting(None, must="a non-empty string")
    timeout: float | None = setting(None, must="a positive number of seconds", doc=PER_CALL)
    max_stranded_calls: int = setting(DEFAULT_MAX_STRANDED_CALLS, must="a positive integer")
    """A plain ``def``'s calls still running after their timeout or interrupt (Python cannot
    stop a thread): with that many, a new call is refused, not started (calls in flight when
    a timeout hits them may strand more: the bound is this plus the calls in flight)."""
    directory: str = setting("", doc="the config file's directory (not a key of the table)")
    """Where a module not found on the engine's path is looked for next (appended to
    ``sys.path`` then): a ``my_tools.py`` beside the config file loads as ``my_tools``."""


_NOT_KEYS = ("label", "directory")
"""Fields of :class:`PythonToolConfig` that the reader fills in, not the table."""


def read_python_tools(
    raw: object, where: str, env: Mapping[str, str], engine: bool
) -> tuple[Any, ...]:
    """Each key of each table by the converter; a bad one is refused saying what it ``must`` be."""
    if not isinstance(raw, list):
        raise ConfigError(f"tools.python in {where} must be an array of tables ([[tools.python]])")
    keys, tools = [f for f in fields(PythonToolConfig) if f.name not in _NOT_KEYS], []
    known = [f.name for f in keys]
    directory = os.path.abspath(os.path.dirname(where.strip("'\"")))
    for label, table in ((f"[[tools.python]] entry {n}", table) for n, table in enumerate(raw, 1)):
        if not isinstance(table, dict):
            raise ConfigError(f"{label}: must be a table with a 'function' key")
        if unknown := [key for key in table if key not in known]:
            raise ConfigError(f"{label}: unknown key {unknown[0]!r}; known: {', '.join(known)}")
        values: dict[str, Any] = {}
        for f in keys:
            if (value := table.get(f.name)) is not None or f.default is MISSING:
                try:
                    values[f.name] = convert(str(f.type), f.metadata, value, False, entry=True)
                except ValueError:
                    why = f"must be {f.metadata['must']}; got {value!r}"
                    raise ConfigError(f"{label}: {f.name!r} {why}") from None
        tools.append(PythonToolConfig(label, **values, directory=directory))
    return tuple(tools)
