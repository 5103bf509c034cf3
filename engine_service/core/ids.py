"""``check_id``: the one id rule (``agentik.ids``, which the facade checks too) as the
core's ``InvalidInput``, naming the field and the rule."""

from __future__ import annotations

from agentik.ids import ID_RULE, MAX_ID_LENGTH, is_valid_id
from engine_service.core.errors import InvalidInput

__all__ = ["ID_RULE", "MAX_ID_LENGTH", "check_id", "is_valid_id"]


def check_id(value: str, field: str) -> None:
    """Raise ``InvalidInput`` naming ``field`` and the rule unless ``value`` is an id."""
    if not value:
        raise InvalidInput(f"{field} is required")
    if not is_valid_id(value):
        shown = repr(value) if len(value) <= 40 else repr(value[:40]) + "…"
        raise InvalidInput(f"{field} {shown} is not a valid id: ids are {ID_RULE}")
