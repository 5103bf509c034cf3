"""``A2aAgentSources``: every configured remote A2A agent, started and stopped with the engine.

Kept apart from :mod:`engine_service.tools.a2a_agents` so that an engine with no remote
agents never imports the A2A SDK's client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from engine_service.core.registry import ToolRegistry
from engine_service.tools.a2a_config import A2aAgentConfig

if TYPE_CHECKING:
    from engine_service.tools.a2a_agents import A2aAgentSource

__all__ = ["A2aAgentSources"]

_SDK_SPANS = "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"


class A2aAgentSources:
    """The configured remote agents, by name; each one's tool is registered at once."""

    def __init__(
        self,
        configs: Sequence[A2aAgentConfig],
        registry: ToolRegistry,
        *,
        default_call_timeout: float,
    ) -> None:
        self._sources: dict[str, A2aAgentSource] = {}
        if configs:
            # a2a-sdk traces its own calls, a span per streamed event: noise under our tool
            # call's span unless asked for (read once, when the SDK is first imported).
            os.environ.setdefault(_SDK_SPANS, "false")
            from engine_service.tools.a2a_agents import A2aAgentSource

            self._sources = {
                c.name: A2aAgentSource(c, registry, default_call_timeout=default_call_timeout)
                for c in configs
            }

    def start(self) -> None:
        """Read every agent's card in the background; returns at once."""
        for source in self._sources.values():
            source.start()

    async def stop(self) -> None:
        await asyncio.gather(*(source.stop() for source in self._sources.values()))

    async def wait_settled(self, within: float) -> None:
        """Wait (at most ``within`` seconds) until every card was read or failed once."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                for source in self._sources.values():
                    await source.wait_until(lambda s: s.attempts > 0, within)

    def describe(self) -> list[tuple[str, str, str]]:
        """``(agent, card URL, status)`` for each agent, for listings."""
        return [(s.config.name, s.config.target, s.describe()) for s in self._sources.values()]

    def __getitem__(self, name: str) -> A2aAgentSource:
        return self._sources[name]

    def __iter__(self) -> Iterator[A2aAgentSource]:
        return iter(self._sources.values())

    def __len__(self) -> int:
        return len(self._sources)
