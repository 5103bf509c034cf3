"""The bound on a session's shared state: its size as compact JSON.

Checked on every state a client sends with a run and every state the ``update_state`` tool
sets; a patch is bounded while it applies (``core.jsonpatch``), so it fails before it
costs the memory, not after. A state stored before the limit was lowered stays readable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from engine_service.core.errors import InvalidInput, StorageUnavailable
from engine_service.core.jsonpatch import json_size
from engine_service.core.models import JSON

__all__ = ["DEFAULT_MAX_STATE_BYTES", "SharedState", "check_state"]

DEFAULT_MAX_STATE_BYTES = 1024 * 1024


def check_state(state: JSON, max_bytes: int, field: str = "state") -> None:
    """Raise ``InvalidInput`` naming ``field`` and the limit when ``state`` is too big."""
    size = json_size(state)
    if size > max_bytes:
        raise InvalidInput(
            f"{field} is {size} bytes as JSON, over the limit of {max_bytes} bytes"
            " (max_state_bytes)"
        )


class SharedState:
    """A run's view of its session's shared state: ``value`` is what tools read; each state
    they set is stored right away by ``write`` (the next run must see it even if this one
    is stopped), a failed store reported to ``on_failure``."""

    def __init__(
        self,
        write: Callable[[JSON], Coroutine[Any, Any, None]],
        value: JSON,
        on_failure: Callable[[StorageUnavailable], None],
    ) -> None:
        """``write(state)``: the session's state stored (under the run's hold: a write
        refused because the run is no longer this replica's stops the run, ``core.flush``)."""
        self._write = write
        self.value = value
        self._on_failure = on_failure

    def set(self, value: JSON) -> None:
        """A tool's new state (``ToolContext.set_state``)."""
        self.value = value
        task = asyncio.get_running_loop().create_task(self._write(value))
        task.add_done_callback(self._stored)

    async def take(self, value: JSON) -> None:
        """The client's state, stored before the run goes on."""
        self.value = value
        await self._write(value)

    def _stored(self, task: asyncio.Task[None]) -> None:
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, StorageUnavailable):
            self._on_failure(exc)
