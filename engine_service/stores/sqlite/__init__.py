"""A ``SessionStore`` in one SQLite file (stdlib ``sqlite3``): :class:`SqliteSessionStore`,
made of parts, one module each (``store`` says which), on one ``file.SqliteFile`` whose
operations a ``writer.Writer`` runs."""

from __future__ import annotations

from engine_service.stores.sqlite.errors import storage_error
from engine_service.stores.sqlite.schema import SCHEMA_VERSION, migrate_connection
from engine_service.stores.sqlite.store import SqliteSessionStore, migrate

__all__ = ["SCHEMA_VERSION", "SqliteSessionStore", "migrate", "migrate_connection", "storage_error"]
