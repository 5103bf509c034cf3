"""``McpToolSources``: every configured MCP server, started and stopped with the engine.

Kept apart from :mod:`engine_service.tools.mcp.tool` so that an engine with no MCP servers
never imports the MCP SDK (it adds a second or more to start-up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentik.config import McpServerConfig
from engine_service.core.registry import ToolRegistry
from engine_service.tools.sources import ToolSources

if TYPE_CHECKING:
    from engine_service.tools.mcp.tool import McpToolSource

__all__ = ["McpToolSources"]


class McpToolSources(ToolSources["McpToolSource"]):
    """The configured MCP servers, by name, started and stopped together."""

    def __init__(
        self,
        configs: Sequence[McpServerConfig],
        registry: ToolRegistry,
        *,
        default_call_timeout: float,
    ) -> None:
        sources: dict[str, McpToolSource] = {}
        if configs:
            from engine_service.tools.mcp.tool import McpToolSource

            sources = {
                c.name: McpToolSource(c, registry, default_call_timeout=default_call_timeout)
                for c in configs
            }
        super().__init__(sources)

    def describe(self) -> list[tuple[str, str, str, str]]:
        """``(server, transport, target, status)`` for each server, for listings."""
        return [(s.config.name, s.config.transport, s.config.target, s.describe()) for s in self]
