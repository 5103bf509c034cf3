"""The rules for the names a client chooses, which both processes check: ids (session,
run, message and tool call ids) and principals.

An id is 1 to 128 characters of ``A-Z a-z 0-9 . _ : ~ -`` (RFC 3986's unreserved
characters plus ``:``), and not ``.`` or ``..``. That takes UUIDs, ULIDs, ``urn:uuid:``
ids and the prefixed ids clients and LLM APIs send (``call_…``, ``msg-…``), and every id
stays one path segment of an HTTP URL with nothing to escape.
"""

from __future__ import annotations

import re

__all__ = ["ID_RULE", "MAX_ID_LENGTH", "PRINCIPAL_RULE", "is_valid_id", "is_valid_principal"]

MAX_ID_LENGTH = 128
ID_RULE = f"1 to {MAX_ID_LENGTH} characters of A-Z a-z 0-9 . _ : ~ - (not '.' or '..')"
_ID = re.compile(rf"[A-Za-z0-9._:~-]{{1,{MAX_ID_LENGTH}}}")


def is_valid_id(value: str) -> bool:
    return _ID.fullmatch(value) is not None and value not in (".", "..")


PRINCIPAL_RULE = "1-128 letters, digits or ._~@+- (no spaces, ':' or ',')"
"""The one rule for a principal, whoever names it: a configured token's or a JWT's ``sub``.
Principals are stored as session owners and shown in logs, lists and metrics."""
_PRINCIPAL = re.compile(r"[A-Za-z0-9._~@+-]{1,128}")


def is_valid_principal(value: str) -> bool:
    return _PRINCIPAL.fullmatch(value) is not None
