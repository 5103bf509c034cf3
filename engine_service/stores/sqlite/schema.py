"""The SQLite store's schema: one script per version, each taking the file's ``PRAGMA
user_version`` one step up, and :func:`migrate_connection`, which runs those a file lacks in
one transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import suppress

from engine_service.stores.delivery_sessions import Conversation, claim_of, sort_rows
from engine_service.stores.sqlite.rows import from_iso

__all__ = ["SCHEMA_VERSION", "migrate_connection"]

_SCHEMA_V1 = """
CREATE TABLE sessions (
    id            TEXT PRIMARY KEY,
    title         TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    state         TEXT NOT NULL DEFAULT 'null',
    last_seq      INTEGER NOT NULL DEFAULT 0,
    active_run_id TEXT
);
CREATE INDEX sessions_by_update ON sessions (updated_at DESC, id);

CREATE TABLE messages (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    id         TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, position),
    UNIQUE (session_id, id)
);

CREATE TABLE runs (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id            TEXT NOT NULL,
    status        TEXT NOT NULL
                  CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted')),
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    error_code    TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    pending       TEXT NOT NULL DEFAULT '[]',
    start_seq     INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, id)
);
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE status = 'running';
CREATE INDEX runs_by_id ON runs (id);
CREATE INDEX runs_by_start ON runs (started_at);

CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        INTEGER NOT NULL,
    time       REAL NOT NULL,
    run_id     TEXT NOT NULL,
    body       TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE INDEX events_by_time ON events (time);
"""

_SCHEMA_V2 = """
ALTER TABLE sessions ADD COLUMN reserved_seq INTEGER NOT NULL DEFAULT 0;
UPDATE sessions SET reserved_seq = last_seq;
CREATE TABLE write_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    n  INTEGER NOT NULL
);
INSERT INTO write_probe (id, n) VALUES (1, 0);
"""

_SCHEMA_V3 = """
ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE INDEX sessions_by_owner ON sessions (owner, updated_at DESC, id);
"""

_SCHEMA_V4 = """
ALTER TABLE runs ADD COLUMN replica TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until TEXT;
"""

_SCHEMA_V5 = """
ALTER TABLE sessions ADD COLUMN interrupts TEXT;
CREATE TABLE runs_v5 (
    session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id            TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN
                  ('running', 'succeeded', 'failed', 'interrupted', 'input_required')),
    started_at    TEXT NOT NULL,
    finished_at   TEXT,
    error_code    TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    pending       TEXT NOT NULL DEFAULT '[]',
    start_seq     INTEGER NOT NULL DEFAULT 0,
    replica       TEXT NOT NULL DEFAULT '',
    lease_until   TEXT,
    interrupts    TEXT,
    resumed_by    TEXT NOT NULL DEFAULT '',
    parent_run_id TEXT NOT NULL DEFAULT '',
    UNIQUE (session_id, id)
);
INSERT INTO runs_v5 (rowid, session_id, id, status, started_at, finished_at, error_code,
    error_message, pending, start_seq, replica, lease_until)
    SELECT rowid, session_id, id, status, started_at, finished_at, error_code, error_message,
    pending, start_seq, replica, lease_until FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v5 RENAME TO runs;
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE status = 'running';
CREATE INDEX runs_by_id ON runs (id);
CREATE INDEX runs_by_start ON runs (started_at);
"""
"""Human in the loop: pending interrupts on the session, the run's status
``input_required`` (a CHECK constraint: the table is rebuilt, rowids kept), and who
resumed it."""

_SCHEMA_V6 = """
CREATE INDEX messages_by_run ON messages (session_id, json_extract(body, '$.run_id'), position);
"""
"""A run's messages found by index (``run_messages``, A2A ListTasks), not by a scan of the
whole history."""

_SCHEMA_V7 = """
ALTER TABLE sessions ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN input_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
CREATE TABLE token_usage (
    principal TEXT NOT NULL,
    day       TEXT NOT NULL,
    tokens    INTEGER NOT NULL,
    PRIMARY KEY (principal, day)
) WITHOUT ROWID;
"""
"""Usage: the tokens of each run and the totals of each session, and the tokens counted
per principal per UTC day (``[auth] tokens_per_day``)."""

_SCHEMA_V8 = """
CREATE TABLE checkpoints (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    position   INTEGER NOT NULL,
    through_id TEXT NOT NULL,
    summary    TEXT NOT NULL,
    tokens     INTEGER NOT NULL
);
"""
"""Compaction (``core.context``): the message position a session's checkpoint covers up
to, and its summary; runs read the messages after it only."""

_SCHEMA_V9 = """
ALTER TABLE sessions ADD COLUMN webhook_url TEXT NOT NULL DEFAULT '';
CREATE TABLE deliveries (
    id              TEXT PRIMARY KEY,
    kind            TEXT NOT NULL,
    url             TEXT NOT NULL,
    headers         TEXT NOT NULL,
    payload         TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TEXT NOT NULL,
    status          TEXT NOT NULL,
    last_error      TEXT NOT NULL DEFAULT '',
    replica         TEXT NOT NULL DEFAULT '',
    lease_until     TEXT
);
CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at);
CREATE TABLE push_configs (
    task_id          TEXT NOT NULL,
    id               TEXT NOT NULL,
    session_id       TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    url              TEXT NOT NULL,
    token            TEXT NOT NULL DEFAULT '',
    auth_scheme      TEXT NOT NULL DEFAULT '',
    auth_credentials TEXT NOT NULL DEFAULT '',
    created_at       TEXT NOT NULL,
    n                INTEGER NOT NULL,
    PRIMARY KEY (task_id, id)
);
CREATE INDEX push_configs_session ON push_configs (session_id);
"""
"""The webhook delivery outbox (``core.deliveries``) and A2A push configs."""

_SCHEMA_V10 = """
ALTER TABLE sessions ADD COLUMN agent TEXT NOT NULL DEFAULT '';
"""
"""Several agents (``core.agents``): the agent a session belongs to ('' for the default)."""

_SCHEMA_V11 = """
ALTER TABLE runs ADD COLUMN kept TEXT NOT NULL DEFAULT '';
"""
"""What a run keeps of its request for a resume (``core.kept_input``): the client's tools
and context, a person's answers."""

_SCHEMA_V12 = """
ALTER TABLE deliveries ADD COLUMN session_id TEXT REFERENCES sessions (id) ON DELETE CASCADE;
CREATE INDEX deliveries_session ON deliveries (session_id);
"""
"""A delivery belongs to the conversation whose run it announces and is deleted with it
(NULL: none). The rows of an older file are given theirs by :func:`_backfill_sessions`."""


def _backfill_sessions(conn: sqlite3.Connection) -> None:
    """Tie each row of the outbox to its conversation, and delete those whose
    conversation is gone (``stores.delivery_sessions``: what a row says, and the rules)."""
    rows = conn.execute("SELECT id, kind, payload, created_at FROM deliveries")
    claims = [
        claim
        for delivery_id, kind, payload, created in rows
        if (claim := claim_of(delivery_id, kind, payload, from_iso(created))) is not None
    ]
    found: dict[tuple[str, str], Conversation] = {}
    for claim in claims:
        pair = (claim.session_id, claim.run_id)
        if pair in found:
            continue
        row = conn.execute(
            "SELECT owner, created_at,"
            " EXISTS (SELECT 1 FROM runs WHERE session_id = sessions.id AND id = ?)"
            " FROM sessions WHERE id = ?",
            (claim.run_id, claim.session_id),
        ).fetchone()
        if row is not None:
            found[pair] = Conversation(row[0], from_iso(row[1]), bool(row[2]))
    verdicts = sort_rows(claims, found)
    conn.executemany(
        "UPDATE deliveries SET session_id = ? WHERE id = ?",
        [(session_id, delivery_id) for delivery_id, session_id in verdicts.links],
    )
    conn.executemany("DELETE FROM deliveries WHERE id = ?", [(i,) for i in verdicts.deletes])


_MIGRATIONS: tuple[str, ...] = (
    _SCHEMA_V1,
    _SCHEMA_V2,
    _SCHEMA_V3,
    _SCHEMA_V4,
    _SCHEMA_V5,
    _SCHEMA_V6,
    _SCHEMA_V7,
    _SCHEMA_V8,
    _SCHEMA_V9,
    _SCHEMA_V10,
    _SCHEMA_V11,
    _SCHEMA_V12,
)
"""Script ``i`` takes the schema from ``PRAGMA user_version`` ``i`` to ``i + 1``."""

_BACKFILLS: dict[int, Callable[[sqlite3.Connection], None]] = {12: _backfill_sessions}
"""What runs after the script of a version, in the same transaction: rows filled in by
rules SQL cannot say."""

SCHEMA_VERSION = len(_MIGRATIONS)


def migrate_connection(conn: sqlite3.Connection) -> tuple[int, int]:
    """Bring the schema of ``conn`` (in autocommit mode) to ``SCHEMA_VERSION`` in one
    transaction; the version before and after. ``RuntimeError`` when it is newer."""
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version == SCHEMA_VERSION:
        return version, version  # nothing to write: an engine can start on a full disk
    conn.execute("BEGIN IMMEDIATE")
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            raise RuntimeError(
                f"database schema version {version} is newer than this engine's "
                f"({SCHEMA_VERSION}); upgrade the engine"
            )
        for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
            for statement in script.split(";"):
                if statement.strip():
                    conn.execute(statement)
            if number in _BACKFILLS:
                _BACKFILLS[number](conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    return version, SCHEMA_VERSION
