"""A ``SessionStore`` in PostgreSQL, which several engine replicas may share:
:class:`PostgresSessionStore`, made of parts, one module each (``store`` says which), on the
connections of ``connections.PostgresConnections``."""

from __future__ import annotations

from engine_service.stores.postgres.store import (
    CHANNEL,
    IDLE_IN_TRANSACTION,
    OPENING_BYTES,
    SCHEMA_VERSION,
    WRITER_NAME,
    PostgresSessionStore,
    channel_for,
    check_dsn,
    data_error,
    decode_signal,
    encode_signal,
    migrate,
    storage_error,
)

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
