"""A ``SessionStore`` in one SQLite file (stdlib ``sqlite3``): :class:`SqliteSessionStore`."""

from __future__ import annotations

from engine_service.stores.sqlite.errors import storage_error
from engine_service.stores.sqlite.schema import SCHEMA_VERSION, migrate_connection
from engine_service.stores.sqlite.store import SqliteSessionStore, migrate

__all__ = ["SCHEMA_VERSION", "SqliteSessionStore", "migrate", "migrate_connection", "storage_error"]
