"""Waiting in a test for something another task or thread does, without a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["until"]


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Return once ``condition()`` holds, checking every 5 ms; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the condition did not hold within {within} s")
        await asyncio.sleep(0.005)
