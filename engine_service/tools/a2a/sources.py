"""``A2aAgentSources``: every configured remote A2A agent, started and stopped with the engine.

Kept apart from :mod:`engine_service.tools.a2a.tool` so that an engine with no remote
agents never imports the A2A SDK's client.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentik.config import A2aAgentConfig
from engine_service.core.registry import ToolRegistry
from engine_service.tools.sources import ToolSources

if TYPE_CHECKING:
    from engine_service.tools.a2a.tool import A2aAgentSource

__all__ = ["A2aAgentSources"]

_SDK_SPANS = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"


class A2aAgentSources(ToolSources["A2aAgentSource"]):
    """The configured remote agents, by name; each one's tool is registered at once."""

    def __init__(
        self,
        configs: Sequence[A2aAgentConfig],
        registry: ToolRegistry,
        *,
        default_call_timeout: float,
    ) -> None:
        sources: dict[str, A2aAgentSource] = {}
        if configs:
            # a2a-sdk traces its own calls, a span per streamed event: noise under our tool
            # call's span unless asked for (read once, when the SDK is first imported).
            os.environ.setdefault(_SDK_SPANS, "false")
            from engine_service.tools.a2a.tool import A2aAgentSource

            sources = {
                c.name: A2aAgentSource(c, registry, default_call_timeout=default_call_timeout)
                for c in configs
            }
        super().__init__(sources)

    def describe(self) -> list[tuple[str, str, str]]:
        """``(agent, card URL, status)`` for each agent, for listings."""
        return [(s.config.name, s.config.target, s.describe()) for s in self]
