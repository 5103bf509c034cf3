"""A signal watcher for the tests: what it was told, and when."""

from __future__ import annotations

import asyncio
import time

from engine_service.core.store import Signal

__all__ = ["Heard"]


class Heard:
    """What a watcher was told, with the time each signal came."""

    def __init__(self) -> None:
        self.signals: list[tuple[float, Signal]] = []
        self.seen = 0
        self.arrived = asyncio.Event()

    def __call__(self, signal: Signal) -> None:
        self.signals.append((time.monotonic(), signal))
        self.arrived.set()

    async def next(self, within: float = 1.0) -> tuple[float, Signal]:
        """The first signal not returned yet, waiting ``within`` seconds for it."""
        deadline = time.monotonic() + within
        while len(self.signals) <= self.seen:
            self.arrived.clear()
            await asyncio.wait_for(self.arrived.wait(), max(0.0, deadline - time.monotonic()))
        self.seen += 1
        return self.signals[self.seen - 1]
