"""A ``SessionStore`` in PostgreSQL, which several engine replicas may share.

Built on psycopg 3 rather than asyncpg: psycopg delivers LISTEN/NOTIFY as an async
iterator (``conn.notifies()``), which is how replicas hear about each other's writes; it
comes with a maintained async connection pool (``psycopg_pool``); the same library runs
the migrations synchronously for ``agentik migrate``; and its parameters are plain SQL
``%s`` placeholders bound server-side.

Every write is one transaction on a pooled connection (autocommit outside explicit
transactions). Each call runs through ``calls.CallRunner``: a connection that
dies under it is replaced and the call run again where that is safe (reads, and writes
that did not commit), for up to ``retry_seconds``.

The "one active run per session" rule holds across replicas twice over: ``begin_run``
locks the session row (``SELECT ... FOR UPDATE``) and a unique partial index allows one
running run per session. Event appends lock the session row too, so ``last_seq`` and
``reserved_seq`` never go back whatever the number of writers.

:class:`PostgresSessionStore` is made of parts, a module each, all built on its
connections (``connections``):

- ``sessions``: the sessions themselves;
- ``messages``: their messages and checkpoints;
- ``events``: the event log;
- ``begin``: how a run begins, with its opening;
- ``runs``: runs after they began, their interrupts, tokens per principal;
- ``replicas``: signals, leases, and the takeover of runs between replicas;
- ``deliveries``: the webhook outbox and push notification configs.

Beside them: ``schema`` (the tables, their migrations, ``migrate``) and ``backfill``
(a migration's rows filled in from Python), ``rows`` (rows to the core's values),
``dsn`` (what the URL says), ``signals`` (NOTIFY payloads and the listener), ``calls``
(how one call runs and is retried), ``batch`` and ``literals`` (the writer's batches).
"""

from __future__ import annotations

from engine_service.stores.postgres.begin import OPENING_BYTES, PostgresBeginRun
from engine_service.stores.postgres.calls import data_error, storage_error
from engine_service.stores.postgres.connections import IDLE_IN_TRANSACTION, WRITER_NAME
from engine_service.stores.postgres.deliveries import PostgresDeliveries
from engine_service.stores.postgres.dsn import CHANNEL, channel_for, check_dsn
from engine_service.stores.postgres.events import PostgresEvents
from engine_service.stores.postgres.messages import PostgresMessages
from engine_service.stores.postgres.replicas import PostgresReplicas
from engine_service.stores.postgres.runs import PostgresRuns
from engine_service.stores.postgres.schema import SCHEMA_VERSION, migrate
from engine_service.stores.postgres.sessions import PostgresSessions
from engine_service.stores.postgres.signals import decode_signal, encode_signal

__all__ = [
    "CHANNEL",
    "IDLE_IN_TRANSACTION",
    "OPENING_BYTES",
    "SCHEMA_VERSION",
    "WRITER_NAME",
    "PostgresSessionStore",
    "channel_for",
    "check_dsn",
    "data_error",
    "decode_signal",
    "encode_signal",
    "migrate",
    "storage_error",
]


class PostgresSessionStore(
    PostgresSessions,
    PostgresMessages,
    PostgresEvents,
    PostgresBeginRun,
    PostgresRuns,
    PostgresReplicas,
    PostgresDeliveries,
):
    """Sessions in PostgreSQL. A limit of zero means no limit.

    Made with the arguments of ``PostgresConnections``: nothing connects until the first
    call (or ``open``)."""
