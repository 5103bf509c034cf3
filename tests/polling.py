"""Waiting in a test for something another task or thread does, without a fixed sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["until", "wait_until"]


async def until(condition: Callable[[], bool], within: float = 5.0) -> None:
    """Return once ``condition()`` holds, checking every 5 ms; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the condition did not hold within {within} s")
        await asyncio.sleep(0.005)


def wait_until(
    condition: Callable[[], object], within: float, what: Callable[[], str] | str = ""
) -> None:
    """The same from a thread: block until ``condition()`` holds, checking every 20 ms;
    fail after ``within`` s saying ``what`` (a text, or made then from what is seen)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"{said or 'the condition'}: not so within {within} s")
        time.sleep(0.02)
