"""How the SQLite store reads and writes its rows: the columns each table is read with and
the records made of them, times as fixed-width UTC text, page sizes as SQL ``LIMIT``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from engine_service.core.deliveries import Delivery, DeliveryStatus, PushConfig
from engine_service.core.errors import InvalidInput
from engine_service.core.models import RunRecord, Session
from engine_service.stores.encoding import (
    DELIVERY_COLUMNS,
    PUSH_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    run_from_row,
    session_from_row,
)

__all__ = [
    "DELIVERY_COLUMNS",
    "PUSH_COLUMNS",
    "RUN_COLUMNS",
    "SESSION_COLUMNS",
    "from_iso",
    "iso",
    "sql_limit",
    "to_delivery",
    "to_push_config",
    "to_run",
    "to_session",
]


def iso(value: datetime, what: str) -> str:
    """Fixed-width UTC text; naive datetimes are refused rather than guessed at."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(f"{what} must be a timezone-aware datetime")
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def to_session(row: Any) -> Session:
    return session_from_row(row, from_iso)


def to_run(row: Any) -> RunRecord:
    return run_from_row(row, from_iso)


def to_delivery(row: Any) -> Delivery:
    return Delivery(
        id=row[0],
        url=row[1],
        payload=row[2],
        created_at=from_iso(row[3]),
        next_attempt_at=from_iso(row[4]),
        headers=json.loads(row[5]),
        kind=row[6],
        attempts=row[7],
        status=DeliveryStatus(row[8]),
        last_error=row[9],
        updated_at=from_iso(row[10]) if row[10] else None,
        session_id=row[11] or "",
    )


def to_push_config(row: Any) -> PushConfig:
    return PushConfig(row[0], row[1], row[2], row[3], from_iso(row[4]), row[5], row[6], row[7])


def sql_limit(limit: int) -> int:
    """A page size for SQL ``LIMIT``: zero means no limit (-1 to SQLite)."""
    if limit < 0:
        raise InvalidInput("limit must not be negative")
    return limit or -1
