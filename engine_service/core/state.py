"""The bound on a session's shared state: its size as compact JSON.

Checked on every state a client sends with a run and every state the ``update_state`` tool
sets; a patch is bounded while it applies (``core.jsonpatch``), so it fails before it
costs the memory, not after. A state stored before the limit was lowered stays readable.
"""

from __future__ import annotations

from engine_service.core.errors import InvalidInput
from engine_service.core.jsonpatch import json_size
from engine_service.core.models import JSON

__all__ = ["DEFAULT_MAX_STATE_BYTES", "check_state"]

DEFAULT_MAX_STATE_BYTES = 1024 * 1024


def check_state(state: JSON, max_bytes: int, field: str = "state") -> None:
    """Raise ``InvalidInput`` naming ``field`` and the limit when ``state`` is too big."""
    size = json_size(state)
    if size > max_bytes:
        raise InvalidInput(
            f"{field} is {size} bytes as JSON, over the limit of {max_bytes} bytes"
            " (max_state_bytes)"
        )
