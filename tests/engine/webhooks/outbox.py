"""The delivery outbox of a store file or schema, read as it is stored (not through the
engine): what the tests hold a run's webhooks against."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.polling import wait_until


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    kind: str
    status: str
    payload: str


_OF_RUN = (
    "SELECT id, kind, status, payload FROM deliveries WHERE kind = 'run' AND id LIKE {} ORDER BY id"
)


def sqlite_rows(path: Path, run_id: str) -> list[Row]:
    """The outbox rows of run ``run_id``'s webhook in the SQLite file ``path`` (one read)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        found = conn.execute(_OF_RUN.format("?"), (f"run_{run_id}.%",)).fetchall()
    return [Row(*row) for row in found]


def sqlite_push_rows(path: Path) -> list[Row]:
    """The A2A push rows in the SQLite file ``path`` (one read)."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        found = conn.execute(
            "SELECT id, kind, status, payload FROM deliveries WHERE kind = 'a2a' ORDER BY id"
        ).fetchall()
    return [Row(*row) for row in found]


def sqlite_run_status(path: Path, run_id: str) -> str:
    """How run ``run_id`` stands in the SQLite file ``path``."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        (status,) = conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()
    return str(status)


def postgres_rows(url: str, run_id: str) -> list[Row]:
    """The same in the PostgreSQL schema of ``url``."""
    with psycopg.connect(url) as conn:
        found = conn.execute(_OF_RUN.format("%s"), (f"run_{run_id}.%",)).fetchall()
    return [Row(*row) for row in found]


def settled(read: Callable[[], list[Row]], within: float) -> list[Row]:
    """The rows ``read`` gives once there are some and none is pending (they are
    delivered, or failed: nothing more is sent of them); fails after ``within`` seconds."""
    rows: list[Row] = []

    def done() -> bool:
        rows[:] = read()
        return bool(rows) and all(row.status != "pending" for row in rows)

    wait_until(done, within, lambda: f"rows none of them pending, still {rows}")
    return rows
