"""``ToolSources``: the tool sources of one kind (MCP servers, remote A2A agents), started and
stopped with the engine, by name."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["ToolSource", "ToolSources"]


class _Config(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def target(self) -> str: ...


class ToolSource(Protocol):
    """What the set needs of each source."""

    @property
    def config(self) -> _Config: ...

    @property
    def attempts(self) -> int: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def wait_until(self, predicate: Callable[[Any], bool], within: float) -> None: ...

    def describe(self) -> str: ...


S = TypeVar("S", bound=ToolSource)


class ToolSources(Generic[S]):
    """Sources by name, started and stopped together."""

    def __init__(self, sources: dict[str, S] | None = None) -> None:
        self._sources: dict[str, S] = sources or {}

    def start(self) -> None:
        """Start every source in the background; returns at once."""
        for source in self._sources.values():
            source.start()

    async def stop(self) -> None:
        """Stop every source (closing its connections, removing its tools)."""
        await asyncio.gather(*(source.stop() for source in self._sources.values()))

    async def wait_settled(self, within: float) -> None:
        """Wait (at most ``within`` seconds) until every source has connected or failed once."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                for source in self._sources.values():
                    await source.wait_until(lambda s: s.attempts > 0, within)

    def __getitem__(self, name: str) -> S:
        return self._sources[name]

    def __iter__(self) -> Iterator[S]:
        return iter(self._sources.values())

    def __len__(self) -> int:
        return len(self._sources)
