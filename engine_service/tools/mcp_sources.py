"""``McpToolSources``: every configured MCP server, started and stopped with the engine.

Kept apart from :mod:`engine_service.tools.mcp` so that an engine with no MCP servers
never imports the MCP SDK (it adds a second or more to start-up).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from engine_service.core.registry import ToolRegistry
from engine_service.tools.mcp_config import McpServerConfig

if TYPE_CHECKING:
    from engine_service.tools.mcp import McpToolSource

__all__ = ["McpToolSources"]


class McpToolSources:
    """The configured MCP servers, by name, started and stopped together."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        registry: ToolRegistry,
        *,
        default_call_timeout: float,
    ) -> None:
        self._sources: dict[str, McpToolSource] = {}
        if configs:
            from engine_service.tools.mcp import McpToolSource

            self._sources = {
                c.name: McpToolSource(c, registry, default_call_timeout=default_call_timeout)
                for c in configs
            }

    def start(self) -> None:
        """Connect every server in the background; returns at once."""
        for source in self._sources.values():
            source.start()

    async def stop(self) -> None:
        """Close every connection and remove the servers' tools."""
        await asyncio.gather(*(source.stop() for source in self._sources.values()))

    async def wait_settled(self, within: float) -> None:
        """Wait (at most ``within`` seconds) until every server has connected or failed once."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                for source in self._sources.values():
                    await source.wait_until(lambda s: s.attempts > 0, within)

    def describe(self) -> list[tuple[str, str, str, str]]:
        """``(server, transport, target, status)`` for each server, for listings."""
        return [
            (s.config.name, s.config.transport, s.config.target, s.describe())
            for s in self._sources.values()
        ]

    def __getitem__(self, name: str) -> McpToolSource:
        return self._sources[name]

    def __iter__(self) -> Iterator[McpToolSource]:
        return iter(self._sources.values())

    def __len__(self) -> int:
        return len(self._sources)
