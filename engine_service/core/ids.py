"""The one rule for every id a client may choose: session (thread) ids, run ids, message
ids and tool call ids.

An id is 1 to 128 characters of ``A-Z a-z 0-9 . _ : ~ -`` (RFC 3986's unreserved
characters plus ``:``), and not ``.`` or ``..``. That takes UUIDs, ULIDs, ``urn:uuid:``
ids and the prefixed ids clients and LLM APIs send (``call_…``, ``msg-…``), and every id
stays one path segment of an HTTP URL with nothing to escape.
"""

from __future__ import annotations

import re

from engine_service.core.errors import InvalidInput

__all__ = ["ID_RULE", "MAX_ID_LENGTH", "check_id", "is_valid_id"]

MAX_ID_LENGTH = 128
ID_RULE = f"1 to {MAX_ID_LENGTH} characters of A-Z a-z 0-9 . _ : ~ - (not '.' or '..')"
_ID = re.compile(rf"[A-Za-z0-9._:~-]{{1,{MAX_ID_LENGTH}}}")


def is_valid_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None and value not in (".", "..")


def check_id(value: str, field: str) -> None:
    """Raise ``InvalidInput`` naming ``field`` and the rule unless ``value`` is an id."""
    if not value:
        raise InvalidInput(f"{field} is required")
    if not is_valid_id(value):
        shown = repr(value) if len(value) <= 40 else repr(value[:40]) + "…"
        raise InvalidInput(f"{field} {shown} is not a valid id: ids are {ID_RULE}")
