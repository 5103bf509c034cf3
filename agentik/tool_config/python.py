"""``[[tools.python]]``: Python functions the engine offers the LLM as tools (docs/tools.md).

Each entry has ``function`` (``package.module:function``, required), and optionally ``name``
(default: the function's), ``description`` (default: its docstring's first paragraph) and
``timeout`` (seconds per call, default ``[tools] timeout``). Only the text is checked here;
the engine imports the module (``engine_service/tools/python/tool.py``), never the facade.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from agentik.config import ConfigError

__all__ = ["PythonToolConfig", "parse_python_tools"]

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_KEYS = ("function", "name", "description", "timeout")


@dataclass(frozen=True, slots=True)
class PythonToolConfig:
    """One configured Python function."""

    label: str
    """``[[tools.python]] entry N`` (1-based), for error messages."""
    function: str
    """``package.module:function`` (the part after ``:`` may be dotted, ``Class.method``)."""
    name: str | None = None
    description: str | None = None
    timeout: float | None = None
    """Seconds per call; None means the engine's ``[tools] timeout``."""


def _entry(table: object, label: str) -> PythonToolConfig:
    def refuse(key: str, why: str, value: object) -> ConfigError:
        return ConfigError(f"{label}: {key!r} must be {why}; got {value!r}")

    if not isinstance(table, dict):
        raise ConfigError(f"{label}: must be a table with a 'function' key")
    for key in table:
        if key not in _KEYS:
            raise ConfigError(f"{label}: unknown key {key!r}; known: {', '.join(_KEYS)}")
    function, name = table.get("function"), table.get("name")
    description, timeout = table.get("description"), table.get("timeout")
    if not isinstance(function, str) or not re.match(rf"^{_DOTTED}:{_DOTTED}$", function.strip()):
        raise refuse("function", "'package.module:function'", function)
    if name is not None and (
        not isinstance(name, str) or not re.match(r"^[\w-]{1,64}$", name, re.A)
    ):
        raise refuse("name", "1 to 64 of A-Z a-z 0-9 _ -", name)
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise refuse("description", "a non-empty string", description)
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise refuse("timeout", "a positive number of seconds", timeout)
    return PythonToolConfig(
        label=label,
        function=function.strip(),
        name=name,
        description=description.strip() if description is not None else None,
        timeout=float(timeout) if timeout is not None else None,
    )


def parse_python_tools(raw: object, where: str) -> tuple[PythonToolConfig, ...]:
    """The entries of ``tools.python`` (an array of tables) from ``where`` (a file name)."""
    if not isinstance(raw, list):
        raise ConfigError(f"tools.python in {where} must be an array of tables ([[tools.python]])")
    return tuple(_entry(table, f"[[tools.python]] entry {n}") for n, table in enumerate(raw, 1))
