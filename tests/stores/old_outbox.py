"""An outbox as engines of the schema before deliveries named their conversation left it
(SQLite 11, PostgreSQL 8), with conversations deleted since and their ids taken again,
and what each row must become once migrated (``stores.delivery_sessions``' rules).

Conversations that exist at the upgrade: "B" (bob's; run "r1", an id alice's deleted
conversation "A" used before), "s1" (carol's; runs "r2", "job.0123456789abcdef", "task1")
and "C" (erin's, made after dave's conversation "C", with run "rc" as his had)."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from google.protobuf import json_format

from engine_service.core import events as ev
from engine_service.core.run_webhooks import RunNotice, run_delivery_id, run_payload
from engine_service.core.store import SessionStore
from engine_service.core.tool import session_key
from engine_service.stores.sqlite.schema import _MIGRATIONS
from engine_service.webhooks.a2a_push import push_updates

T0 = datetime(2026, 12, 6, 8, 0, 0, 250000, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class Conversation:
    id: str
    owner: str
    created_at: datetime
    runs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Row:
    id: str
    kind: str
    payload: str
    created_at: datetime
    status: str
    becomes: str | None
    """The session id it names once migrated; "" kept naming none; None deleted."""


ALICE_A = Conversation("A", "alice", at(0), ("r1",))  # deleted before the upgrade
BOB_B = Conversation("B", "bob", at(20), ("r1",))
CAROL = Conversation("s1", "carol", at(30), ("r2", "job.0123456789abcdef", "task1"))
DAVE_C = Conversation("C", "dave", at(0), ("rc",))  # deleted before the upgrade
ERIN_C = Conversation("C", "erin", at(50), ("rc",))

EXISTING = (BOB_B, CAROL, ERIN_C)
"""The conversations the store holds at the upgrade."""


def _key(conversation: Conversation) -> str:
    return session_key(conversation.id, conversation.owner, conversation.created_at)


def webhook_row(
    of: Conversation, run_id: str, seconds: float, status: str, becomes: str | None, *, old: bool
) -> Row:
    """A run's webhook; ``old``: as engines before the incarnation wrote it."""
    payload = run_payload(of.id, run_id, ev.RunFinished(), [], at(seconds), _key(of))
    delivery_id = f"run_{run_id}" if old else run_delivery_id(_key(of), run_id)
    payload["id"] = delivery_id
    body = json.dumps(payload, separators=(",", ":"))
    return Row(delivery_id, "run", body, at(seconds), status, becomes)


def _push(
    session_id: str, task_id: str, seconds: float, status: str, becomes: str | None, name: str
) -> Row:
    """An A2A push update (the task's end) of ``session_id``'s task ``task_id``."""
    notice = RunNotice(session_id, task_id, "", False, ev.RunFinished(), [], at(seconds))
    (update,) = push_updates(task_id, notice)
    body = json.dumps(json_format.MessageToDict(update), separators=(",", ":"))
    return Row(f"push_{name}", "a2a", body, at(seconds), status, becomes)


ROWS = (
    webhook_row(ALICE_A, "r1", 1, "failed", None, old=False),  # its conversation is gone
    webhook_row(BOB_B, "r1", 21, "pending", "B", old=False),
    webhook_row(CAROL, "r2", 31, "delivered", "s1", old=True),
    webhook_row(CAROL, "job.0123456789abcdef", 32, "failed", "s1", old=True),
    webhook_row(CAROL, "r9", 33, "pending", None, old=True),  # no such run in s1 (now)
    _push("s1", "task1", 34, "pending", "s1", "carol"),
    _push("gone", "t9", 35, "delivered", None, "gone"),
    webhook_row(DAVE_C, "rc", 1, "pending", None, old=False),  # another incarnation of C
    webhook_row(DAVE_C, "rc", 2, "failed", "", old=True),  # C now is newer than the row
    Row("run_x.0123456789abcdef", "run", '{"secret":1}', at(3), "failed", ""),  # not ours
)


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def write_sqlite_v11(path: Path) -> None:
    """A SQLite file of schema 11 holding :data:`EXISTING` and :data:`ROWS`."""
    with closing(sqlite3.connect(path)) as conn, conn:
        for script in _MIGRATIONS[:11]:
            conn.executescript(script)
        for c in EXISTING:
            made = _iso(c.created_at)
            conn.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, owner)"
                " VALUES (?, '', ?, ?, ?)",
                (c.id, made, made, c.owner),
            )
            for run_id in c.runs:
                conn.execute(
                    "INSERT INTO runs (session_id, id, status, started_at)"
                    " VALUES (?, ?, 'succeeded', ?)",
                    (c.id, run_id, made),
                )
        for r in ROWS:
            made = _iso(r.created_at)
            conn.execute(
                "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
                " next_attempt_at, status) VALUES (?, ?, 'https://h.example.com/', '{}', ?,"
                " ?, ?, ?)",
                (r.id, r.kind, r.payload, made, made, r.status),
            )
        conn.execute("PRAGMA user_version = 11")


def write_postgres_v8(url: str) -> None:
    """The schema of ``url``, migrated to 9 and empty, taken back to 8 and given
    :data:`EXISTING` and :data:`ROWS`."""
    with psycopg.connect(url, autocommit=True) as conn, conn.transaction():
        conn.execute("DROP INDEX deliveries_session")
        conn.execute("ALTER TABLE deliveries DROP COLUMN session_id")
        conn.execute("DELETE FROM agentik_schema_migrations WHERE version >= 9")
        for c in EXISTING:
            conn.execute(
                "INSERT INTO sessions (id, title, created_at, updated_at, owner)"
                " VALUES (%s, '', %s, %s, %s)",
                (c.id, c.created_at, c.created_at, c.owner),
            )
            for run_id in c.runs:
                conn.execute(
                    "INSERT INTO runs (session_id, id, status, started_at)"
                    " VALUES (%s, %s, 'succeeded', %s)",
                    (c.id, run_id, c.created_at),
                )
        for r in ROWS:
            conn.execute(
                "INSERT INTO deliveries (id, kind, url, headers, payload, created_at,"
                " next_attempt_at, status) VALUES (%s, %s, 'https://h.example.com/', '{}',"
                " %s, %s, %s, %s)",
                (r.id, r.kind, r.payload, r.created_at, r.created_at, r.status),
            )


async def assert_migrated(store: SessionStore) -> None:
    """``store``, opened on an outbox of :data:`ROWS`, holds each row as it must become
    (its payload and status as they were), and deleting each conversation deletes the rows
    tied to it and no other."""
    for row in ROWS:
        found = await store.get_delivery(row.id)
        if row.becomes is None:
            assert found is None, f"{row.id} outlived its conversation"
            continue
        assert found is not None, f"{row.id} was deleted"
        assert (found.session_id, found.payload, found.status.value) == (
            row.becomes,
            row.payload,
            row.status,
        ), row.id
    for conversation in EXISTING:
        await store.delete_session(conversation.id)
        for row in ROWS:
            found = await store.get_delivery(row.id)
            if row.becomes == conversation.id:
                assert found is None, f"{row.id} outlived {conversation.id}"
            elif row.becomes == "":
                assert found is not None and found.session_id == "", row.id
