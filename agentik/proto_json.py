"""Protobuf ``Value``, ``ListValue`` and ``Struct`` as the plain JSON a client expects.

``google.protobuf.Value`` keeps every number as a double, and ``json_format.MessageToDict``
hands them back as floats: state ``{"count": 1}`` would leave as ``{"count": 1.0}``. Every
protocol converts the engine's free-form values (state, deltas, results, custom values)
through :func:`json_value`, so all of them send the integer the client wrote.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

__all__ = ["json_value", "whole_numbers"]

_EXACT = 2**53
"""Doubles below this are exact integers; beyond it ``int(x)`` would invent digits."""


def whole_numbers(value: Any) -> Any:
    """``value`` with every integral float inside it as an int (``1.0`` → ``1``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _EXACT:
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


def json_value(message: Message) -> Any:
    """A ``Value`` / ``ListValue`` / ``Struct`` as JSON, whole numbers as integers."""
    return whole_numbers(json_format.MessageToDict(message))
