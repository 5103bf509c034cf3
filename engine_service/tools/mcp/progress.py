"""A call's progress notifications as ``tool_progress`` events: throttled and counted.

A server may send any number of ``notifications/progress`` during a call, and each event
is streamed to every follower and stored in the conversation's log for good. So, as for
A2A agents: at most one event per ``PROGRESS_EVERY`` seconds per call, carrying the latest
notification (one that arrives sooner waits, replaced by any later one, and goes out when
the interval is over or just before the result); and at most the server's
``max_progress_events`` per call, past which notifications are dropped and counted.
"""

from __future__ import annotations

import asyncio
import logging

from engine_service.core.events import Custom
from engine_service.core.models import JSON
from engine_service.core.tool import TOOL_PROGRESS, ToolContext

__all__ = ["MAX_PROGRESS_CHARS", "PROGRESS_EVERY", "CallProgress", "log_dropped"]

PROGRESS_EVERY = 0.1
"""Seconds between two progress events of one call (the value of the A2A tool's)."""
MAX_PROGRESS_CHARS = 2_000
"""A progress message longer than this is cut."""


class CallProgress:
    """The progress events of one tool call; the SDK's progress callback."""

    def __init__(self, context: ToolContext, limit: int) -> None:
        self._context = context
        self.limit = limit
        self._last = -PROGRESS_EVERY
        self._pending: dict[str, JSON] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.emitted = 0
        self.dropped = 0
        """Notifications past the limit, not streamed."""

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        if self.emitted >= self.limit:
            self.dropped += 1
            return
        if message is not None and len(message) > MAX_PROGRESS_CHARS:
            message = message[: MAX_PROGRESS_CHARS - 1] + "…"
        self._pending = {
            "tool_call_id": self._context.tool_call_id,
            "progress": progress,
            "total": total,
            "message": message,
        }
        loop = asyncio.get_running_loop()
        wait = self._last + PROGRESS_EVERY - loop.time()
        if wait <= 0:
            self._emit()
        elif self._timer is None:
            self._timer = loop.call_later(wait, self._emit)

    def finish(self) -> None:
        """The call answered: the waiting notification goes out (before the result)."""
        self._emit()

    def cancel(self) -> None:
        """The call is over: nothing more is emitted."""
        self._pending = None
        self._emit()

    def _emit(self) -> None:
        """Send the waiting notification, if any, and stop the timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        value, self._pending = self._pending, None
        if value is None:
            return
        if self.emitted >= self.limit:
            self.dropped += 1
            return
        self._last = asyncio.get_running_loop().time()
        self.emitted += 1
        self._context.emit(Custom(TOOL_PROGRESS, value))


def log_dropped(log: logging.Logger, server: str, tool: str, progress: CallProgress) -> None:
    """Say how many notifications of a call were dropped past ``max_progress_events``."""
    if progress.dropped:
        log.warning(
            "MCP tool %r of server %r: %d progress notifications dropped past "
            "max_progress_events (%d)",
            tool,
            server,
            progress.dropped,
            progress.limit,
        )
