"""The PostgreSQL store's tables and their migrations.

JSON (state, messages, events) is stored as ``text``, exactly as the other stores write
it (``jsonb`` would reorder keys and renormalise numbers); times as ``timestamptz``; event
times as ``double precision`` epoch seconds, as the events carry them. Id columns use
the "C" collation so that ordering by id matches the SQLite store (bytewise).

The schema is versioned in ``agentik_schema_migrations``. A store migrates on its first
call (:func:`migrate_async`), ``agentik migrate`` ahead of time (:func:`migrate`); both under
one advisory lock, so engines starting together migrate once, and both refuse a database
whose schema is newer than this code.
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from engine_service.stores.postgres.backfill import backfill, backfill_async
from engine_service.stores.postgres.calls import storage_error
from engine_service.stores.postgres.dsn import check_dsn

__all__ = ["SCHEMA_VERSION", "migrate", "migrate_async"]

_MIGRATIONS_TABLE = "agentik_schema_migrations"
_LOCK_KEY = 0x6167656E74696B  # "agentik": the advisory lock serialising migrations

_SCHEMA_V1 = """
CREATE TABLE sessions (
    id            text COLLATE "C" PRIMARY KEY,
    title         text NOT NULL,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    state         text NOT NULL DEFAULT 'null',
    last_seq      bigint NOT NULL DEFAULT 0,
    reserved_seq  bigint NOT NULL DEFAULT 0,
    active_run_id text COLLATE "C",
    owner         text COLLATE "C" NOT NULL DEFAULT ''
);
CREATE INDEX sessions_by_update ON sessions (updated_at DESC, id);
CREATE INDEX sessions_by_owner ON sessions (owner, updated_at DESC, id);

CREATE TABLE messages (
    session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    position   integer NOT NULL,
    id         text COLLATE "C" NOT NULL,
    body       text NOT NULL,
    PRIMARY KEY (session_id, position),
    UNIQUE (session_id, id)
);

CREATE TABLE runs (
    n             bigint GENERATED ALWAYS AS IDENTITY,
    session_id    text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    id            text COLLATE "C" NOT NULL,
    status        text NOT NULL
                  CHECK (status IN ('running', 'succeeded', 'failed', 'interrupted')),
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    error_code    text NOT NULL DEFAULT '',
    error_message text NOT NULL DEFAULT '',
    pending       text NOT NULL DEFAULT '[]',
    start_seq     bigint NOT NULL DEFAULT 0,
    replica       text NOT NULL DEFAULT '',
    lease_until   timestamptz,
    PRIMARY KEY (session_id, id)
);
CREATE UNIQUE INDEX runs_one_running ON runs (session_id) WHERE status = 'running';
CREATE INDEX runs_by_id ON runs (id);
CREATE INDEX runs_by_start ON runs (started_at, n);
CREATE INDEX runs_leases ON runs (replica) WHERE status = 'running';

CREATE TABLE events (
    session_id text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq        bigint NOT NULL,
    time       double precision NOT NULL,
    run_id     text NOT NULL,
    body       text NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX events_by_time ON events (time);

CREATE TABLE write_probe (
    id integer PRIMARY KEY CHECK (id = 1),
    n  bigint NOT NULL
);
INSERT INTO write_probe (id, n) VALUES (1, 0);
"""

_SCHEMA_V2 = """
ALTER TABLE sessions ADD COLUMN interrupts text;
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK
    (status IN ('running', 'succeeded', 'failed', 'interrupted', 'input_required'));
ALTER TABLE runs ADD COLUMN interrupts text;
ALTER TABLE runs ADD COLUMN resumed_by text NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN parent_run_id text NOT NULL DEFAULT '';
"""
"""Human in the loop: pending interrupts on the session, status ``input_required``, and
who resumed a run."""

_SCHEMA_V3 = r"""
ALTER TABLE messages ADD COLUMN run_id text NOT NULL DEFAULT '';
UPDATE messages SET run_id = coalesce(substring(body from '"run_id":"([^"\\]*)"'), '');
CREATE INDEX messages_by_run ON messages (session_id, run_id, position);
"""
"""A run's messages found by index (``run_messages``, A2A ListTasks), not by a scan of the
whole history. The run id is a column of its own: an index on ``body::jsonb`` would refuse
every message whose text holds U+0000 (jsonb cannot), which the store otherwise keeps. The
backfill reads it from the compact JSON text (a ``"`` inside a string is always escaped, so
only the key itself matches)."""

_SCHEMA_V4 = """
ALTER TABLE sessions ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
CREATE TABLE token_usage (
    principal text COLLATE "C" NOT NULL,
    day       date NOT NULL,
    tokens    bigint NOT NULL,
    PRIMARY KEY (principal, day)
);
"""
"""Usage: the tokens of each run and the totals of each session, and the tokens counted
per principal per UTC day (``[auth] tokens_per_day``), shared by every replica."""

_SCHEMA_V5 = """
CREATE TABLE checkpoints (
    session_id text COLLATE "C" PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    position   integer NOT NULL,
    through_id text COLLATE "C" NOT NULL,
    summary    text NOT NULL,
    tokens     integer NOT NULL
);
"""
"""Compaction (``core.context``): the message position a session's checkpoint covers up
to, and its summary; runs read the messages after it only."""

_SCHEMA_V6 = """
ALTER TABLE sessions ADD COLUMN webhook_url text NOT NULL DEFAULT '';
CREATE TABLE deliveries (
    id              text COLLATE "C" PRIMARY KEY,
    kind            text NOT NULL,
    url             text NOT NULL,
    headers         text NOT NULL,
    payload         text NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz,
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    status          text NOT NULL,
    last_error      text NOT NULL DEFAULT '',
    replica         text NOT NULL DEFAULT '',
    lease_until     timestamptz
);
CREATE INDEX deliveries_due ON deliveries (status, next_attempt_at);
CREATE TABLE push_configs (
    task_id          text COLLATE "C" NOT NULL,
    id               text COLLATE "C" NOT NULL,
    session_id       text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    url              text NOT NULL,
    token            text NOT NULL DEFAULT '',
    auth_scheme      text NOT NULL DEFAULT '',
    auth_credentials text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL,
    n                bigserial,
    PRIMARY KEY (task_id, id)
);
CREATE INDEX push_configs_session ON push_configs (session_id);
"""
"""The webhook delivery outbox (``core.deliveries``), shared by every replica."""

_SCHEMA_V7 = """
ALTER TABLE sessions ADD COLUMN agent text COLLATE "C" NOT NULL DEFAULT '';
"""
"""Several agents (``core.agents``): the agent a session belongs to ('' for the default)."""

_SCHEMA_V8 = """
CREATE TABLE replicas (
    id          text COLLATE "C" PRIMARY KEY,
    alive_until timestamptz NOT NULL
);
ALTER TABLE runs ADD COLUMN kept text NOT NULL DEFAULT '';
"""
"""Runs that outlive their engine: the replicas alive (``note_alive``: a stopping one hands
its runs over only when another is there to take them), and what a run keeps of its
request for a resume (``core.kept_input``)."""

_SCHEMA_V9 = """
LOCK TABLE sessions IN SHARE ROW EXCLUSIVE MODE;
ALTER TABLE deliveries ADD COLUMN session_id text COLLATE "C";
ALTER TABLE deliveries ADD CONSTRAINT deliveries_session_id_fkey FOREIGN KEY (session_id)
    REFERENCES sessions (id) ON DELETE CASCADE NOT VALID;
CREATE INDEX deliveries_session ON deliveries (session_id);
"""
"""A delivery belongs to the conversation whose run it announces and is deleted with it
(NULL: none). The rows of an older schema are given theirs by the backfill that follows
(``postgres.backfill``), in the same transaction.

The key needs ``sessions`` locked against writes (SHARE ROW EXCLUSIVE) until the commit:
taken first, before ``deliveries``, as an engine of the older schema takes them (a run's
end updates its session, then adds its delivery), so the migration cannot deadlock with
one still running; and no conversation can be deleted between the backfill's read and the
commit. The key is added NOT VALID (nothing to scan: the column is new), the backfill's
UPDATE checks each value it sets, and :data:`_VALIDATE` marks it valid after the commit,
under locks that let reads and writes go on."""

_VALIDATE = "ALTER TABLE deliveries VALIDATE CONSTRAINT deliveries_session_id_fkey"
_KEYED = 9
"""The version whose transaction adds that key (and its backfill)."""

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
)
"""Script ``i`` takes the schema from version ``i`` to ``i + 1``."""

SCHEMA_VERSION = len(_MIGRATIONS)

_VERSION_QUERY = sql.SQL("SELECT coalesce(max(version), 0) FROM {}").format(
    sql.Identifier(_MIGRATIONS_TABLE)
)


def _newer(version: int) -> RuntimeError:
    return RuntimeError(
        f"database schema version {version} is newer than this engine's "
        f"({SCHEMA_VERSION}); upgrade the engine"
    )


def _record(version: int) -> sql.Composed:
    return sql.SQL("INSERT INTO {} (version) VALUES ({})").format(
        sql.Identifier(_MIGRATIONS_TABLE), sql.Literal(version)
    )


_CREATE_TABLE = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {} ("
    " version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
).format(sql.Identifier(_MIGRATIONS_TABLE))
_EXISTS = sql.SQL("SELECT to_regclass({})").format(sql.Literal(_MIGRATIONS_TABLE))


async def _current_version(conn: psycopg.AsyncConnection[TupleRow]) -> int:
    row = await (await conn.execute(_EXISTS)).fetchone()
    if row is None or row[0] is None:
        return 0
    found = await (await conn.execute(_VERSION_QUERY)).fetchone()
    return int(found[0]) if found else 0


async def migrate_async(conn: psycopg.AsyncConnection[TupleRow]) -> tuple[int, int]:
    """Bring the schema ``conn`` sees to ``SCHEMA_VERSION``; (before, after)."""
    version = await _current_version(conn)
    if version == SCHEMA_VERSION:
        return version, version  # nothing to write
    if version > SCHEMA_VERSION:
        raise _newer(version)
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        await conn.execute(_CREATE_TABLE)
        version = await _current_version(conn)  # another engine may have got here first
        if version > SCHEMA_VERSION:
            raise _newer(version)
        for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
            await conn.execute(sql.SQL(script))
            if number == _KEYED:
                await backfill_async(conn)
            await conn.execute(_record(number))
    if version < _KEYED:
        await conn.execute(_VALIDATE)
    return version, SCHEMA_VERSION


def migrate(dsn: str, *, connect_timeout: float = 10.0) -> tuple[int, int]:
    """Migrate the database ``dsn`` names (synchronously, for ``agentik migrate``).

    Returns the schema version before and after; ``StorageUnavailable`` when the
    database cannot be reached, ``RuntimeError`` when its schema is newer than this code,
    ``ValueError`` when ``dsn`` cannot be parsed.
    """
    check_dsn(dsn)
    try:
        with psycopg.connect(
            dsn, autocommit=True, connect_timeout=max(1, round(connect_timeout))
        ) as conn:
            version = _current_version_sync(conn)
            if version > SCHEMA_VERSION:
                raise _newer(version)
            if version == SCHEMA_VERSION:
                return version, version
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                conn.execute(_CREATE_TABLE)
                version = _current_version_sync(conn)
                if version > SCHEMA_VERSION:
                    raise _newer(version)
                for number, script in enumerate(_MIGRATIONS[version:], start=version + 1):
                    conn.execute(sql.SQL(script))
                    if number == _KEYED:
                        backfill(conn)
                    conn.execute(_record(number))
            if version < _KEYED:
                conn.execute(_VALIDATE)
            return version, SCHEMA_VERSION
    except psycopg.Error as exc:
        raise storage_error(exc) from exc


def _current_version_sync(conn: psycopg.Connection[TupleRow]) -> int:
    row = conn.execute(_EXISTS).fetchone()
    if row is None or row[0] is None:
        return 0
    found = conn.execute(_VERSION_QUERY).fetchone()
    return int(found[0]) if found else 0
