"""Typed, validated ``[[tools.python]]`` entries of the config file.

Each entry names one Python function the engine offers the LLM as a tool::

    [[tools.python]]
    function = "my_tools.weather:forecast"  # package.module:function (required)
    name = "forecast"                       # default: the function's name
    description = "..."                     # default: the docstring's first paragraph
    timeout = 10.0                          # seconds per call (default: [tools] timeout)

Only the text is checked here; the module is imported when the engine builds its tools
(``engine_service/tools/python/tool.py``), so the web facade never imports it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from agentik.tool_config.tables import ConfigTableError

__all__ = ["PythonToolConfig", "parse_python_tools"]

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_FUNCTION = re.compile(rf"^{_DOTTED}:{_DOTTED}$")
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
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
    if not isinstance(table, dict):
        raise ConfigTableError(f"{label}: must be a table with a 'function' key")
    for key in table:
        if key not in _KEYS:
            raise ConfigTableError(f"{label}: unknown key {key!r}; known: {', '.join(_KEYS)}")
    function = table.get("function")
    if not isinstance(function, str) or not _FUNCTION.match(function.strip()):
        raise ConfigTableError(
            f"{label}: 'function' must be 'package.module:function'; got {function!r}"
        )
    name = table.get("name")
    if name is not None and (not isinstance(name, str) or not _NAME.match(name)):
        raise ConfigTableError(f"{label}: 'name' must be 1 to 64 of A-Z a-z 0-9 _ -; got {name!r}")
    description = table.get("description")
    if description is not None and (not isinstance(description, str) or not description.strip()):
        raise ConfigTableError(
            f"{label}: 'description' must be a non-empty string; got {description!r}"
        )
    timeout = table.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigTableError(
            f"{label}: 'timeout' must be a positive number of seconds; got {timeout!r}"
        )
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
        raise ConfigTableError(
            f"tools.python in {where} must be an array of tables ([[tools.python]])"
        )
    return tuple(
        _entry(table, f"[[tools.python]] entry {number}")
        for number, table in enumerate(raw, start=1)
    )
