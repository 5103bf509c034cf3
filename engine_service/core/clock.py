"""The core's one clock: the current time in UTC (stores and rules take times as arguments,
so tests give their own)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["utc_now"]


def utc_now() -> datetime:
    return datetime.now(UTC)
