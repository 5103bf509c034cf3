"""The tools the engine can run, by name, with where each came from.

Native tools are registered at start-up; MCP sources add and remove theirs while the
engine runs (a server connects, reconnects or goes away), so every tool is kept with
a *source* string (``"native"``, ``"mcp:<server>"``) and a *status* for listings.
The run loop takes a consistent view per LLM round with :meth:`ToolRegistry.specs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from engine_service.core.chat import ToolSpec
from engine_service.core.tool import Tool

__all__ = ["READY", "ToolRegistry"]

READY = "ready"
"""The status of a tool that can be called."""


@dataclass(slots=True)
class _Entry:
    tool: Tool
    source: str
    status: str


class ToolRegistry:
    """Tools by unique name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._entries: dict[str, _Entry] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool, *, source: str | None = None, status: str = READY) -> None:
        """Add ``tool``; ``source`` defaults to ``tool.source``. A taken name is a ValueError."""
        name = tool.name
        if not name:
            raise ValueError("a tool needs a non-empty name")
        existing = self._entries.get(name)
        if existing is not None:
            raise ValueError(
                f"a tool named {name!r} is already registered (from {existing.source!r})"
            )
        self._entries[name] = _Entry(tool, source if source is not None else tool.source, status)

    def unregister(self, name: str) -> Tool | None:
        """Remove the tool called ``name``; return it, or None if there was none."""
        entry = self._entries.pop(name, None)
        return entry.tool if entry is not None else None

    def unregister_source(self, source: str) -> list[str]:
        """Remove every tool from ``source`` (an MCP server went away); return their names."""
        names = [name for name, entry in self._entries.items() if entry.source == source]
        for name in names:
            del self._entries[name]
        return names

    def set_status(self, name: str, status: str) -> None:
        """Record a tool's status (e.g. ``"ready"``, ``"disconnected"``) for listings."""
        entry = self._entries.get(name)
        if entry is None:
            raise KeyError(name)
        entry.status = status

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        entry = self._entries.get(name)
        return entry.tool if entry is not None else None

    def source_of(self, name: str) -> str | None:
        """Where the tool called ``name`` came from, or None if there is no such tool."""
        entry = self._entries.get(name)
        return entry.source if entry is not None else None

    def names(self) -> list[str]:
        """Every tool name, in registration order."""
        return list(self._entries)

    def specs(self) -> list[ToolSpec]:
        """The ready tools as the LLM sees them."""
        return [
            ToolSpec(name=e.tool.name, description=e.tool.description, parameters=e.tool.parameters)
            for e in self._entries.values()
            if e.status == READY
        ]

    def describe(self) -> list[tuple[str, str, str]]:
        """``(name, source, status)`` for each tool, for a CLI listing."""
        return [(name, e.source, e.status) for name, e in self._entries.items()]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Tool]:
        return iter([e.tool for e in self._entries.values()])
