"""The PostgreSQL store's rows as the core's values: the columns each read selects, and what
a row of them holds. Times come back as ``timestamptz`` and are handed on in UTC."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from engine_service.core.deliveries import Delivery, DeliveryStatus, PushConfig
from engine_service.core.errors import InvalidInput
from engine_service.core.models import Message, RunRecord, Session
from engine_service.core.store import Checkpoint
from engine_service.stores.encoding import (
    DELIVERY_COLUMNS,
    PUSH_COLUMNS,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    message_from_dict,
    run_from_row,
    session_from_row,
)

__all__ = [
    "DELIVERY_COLUMNS",
    "PUSH_COLUMNS",
    "RUN_COLUMNS",
    "SESSION_COLUMNS",
    "ContextRows",
    "context_from",
    "delivery_from",
    "push_config_from",
    "run_from",
    "session_from",
    "sql_limit",
]


def _time(value: datetime) -> datetime:
    return value.astimezone(UTC)


def session_from(row: Sequence[Any]) -> Session:
    """The session a row of ``SESSION_COLUMNS`` holds."""
    return session_from_row(row, _time)


def run_from(row: Sequence[Any]) -> RunRecord:
    """The run a row of ``RUN_COLUMNS`` holds."""
    return run_from_row(row, _time)


def delivery_from(row: Sequence[Any]) -> Delivery:
    """The delivery a row of ``DELIVERY_COLUMNS`` holds."""
    return Delivery(
        id=row[0],
        url=row[1],
        payload=row[2],
        created_at=_time(row[3]),
        next_attempt_at=_time(row[4]),
        headers=json.loads(row[5]),
        kind=row[6],
        attempts=row[7],
        status=DeliveryStatus(row[8]),
        last_error=row[9],
        updated_at=_time(row[10]) if row[10] is not None else None,
        session_id=row[11] or "",
    )


def push_config_from(row: Sequence[Any]) -> PushConfig:
    """The push notification config a row of ``PUSH_COLUMNS`` holds."""
    return PushConfig(row[0], row[1], row[2], row[3], _time(row[4]), row[5], row[6], row[7])


def sql_limit(limit: int) -> int | None:
    """A page size for SQL ``LIMIT``: zero means no limit (NULL to PostgreSQL)."""
    if limit < 0:
        raise InvalidInput("limit must not be negative")
    return limit or None


ContextRows = tuple[tuple[Any, ...] | None, list[tuple[Any, ...]]]
"""A session's checkpoint row (None without one) and the bodies of the messages after it."""


def context_from(
    row: tuple[Any, ...] | None, rows: list[tuple[Any, ...]]
) -> tuple[Checkpoint | None, list[Message]]:
    """The checkpoint and the messages after it that a session's runs start from."""
    checkpoint = None if row is None else Checkpoint(row[1], row[2], row[3], covered=row[0] + 1)
    return checkpoint, [message_from_dict(json.loads(r[0])) for r in rows]
