"""What every answer to a hostile request must be: a clear refusal or a normal answer.

Never a server error (UNKNOWN, INTERNAL, DATA_LOSS, UNIMPLEMENTED), never UNAVAILABLE from an
engine that is not shutting down (that is its store failing, or a crash), never a hang
(DEADLINE_EXCEEDED: every call carries a deadline), and never internal text in the details:
a traceback, a source path, an address, an exception's class, protobuf's or gRPC's own
wording. Details stay short: an error never echoes a huge input back.
"""

from __future__ import annotations

import re
from pathlib import Path

import grpc

__all__ = [
    "DEADLINE",
    "FORBIDDEN_CODES",
    "MAX_DETAILS",
    "assert_clean_refusal",
    "internal_text",
    "rss_bytes",
]

DEADLINE = 10.0
"""Seconds every call may take; past it the call counts as a hang."""
MAX_DETAILS = 1024
"""Characters an error's details may have: a 900 KB id must not come back whole."""

FORBIDDEN_CODES = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    }
)

_INTERNAL = re.compile(
    r"Traceback|File \"|\.py\b|site-packages|/usr/|/home/|/tmp/|/var/lib"
    r"|127\.0\.0\.1:|\bipv[46]:|\bunix:|Exception|<class "
    r"|\b[A-Z][A-Za-z]*Error\b|google\.protobuf|\bgrpc\._|asyncio\.|sqlite3|psycopg"
)


def internal_text(details: str) -> str | None:
    """The first piece of internal text in ``details``, or None."""
    found = _INTERNAL.search(details)
    return found.group(0) if found else None


def assert_clean_refusal(error: grpc.RpcError, what: str = "") -> None:
    """``error`` is a refusal a client can act on: a 4xx-like status, short plain details."""
    code = error.code()
    details = str(error.details() or "")
    where = f"{what}: " if what else ""
    assert code not in FORBIDDEN_CODES, f"{where}{code} {details[:300]!r}"
    assert len(details) <= MAX_DETAILS, f"{where}{len(details)} characters of details"
    leak = internal_text(details)
    assert leak is None, f"{where}internal text {leak!r} in {details[:300]!r}"


def rss_bytes(pid: int) -> int:
    """The resident memory of process ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")
