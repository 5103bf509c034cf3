"""Session stores and ``open_store``, which picks one from a URL.

``memory://``
    :class:`MemorySessionStore`, gone with the process.
``sqlite:///path.db``
    :class:`SqliteSessionStore`; the path after ``sqlite:///`` is used as written, so
    ``sqlite:///data/agentik.db`` is relative to the working directory and
    ``sqlite:////var/lib/agentik.db`` is absolute. ``sqlite:///:memory:`` is a private
    in-memory database.
``postgresql://...`` or ``postgres://...``
    :class:`~engine_service.stores.postgres.PostgresSessionStore`; the URL is handed to
    libpq as written (``?options=-csearch_path%3Dmyschema`` picks a schema). It connects
    on first use.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from engine_service.core.store import RunBegun, SessionStore
from engine_service.stores.memory import MemorySessionStore
from engine_service.stores.sqlite import SqliteSessionStore

__all__ = [
    "DriverMissing",
    "MemorySessionStore",
    "RunBegun",
    "SessionStore",
    "SqliteSessionStore",
    "migrate_store",
    "open_store",
    "redacted_url",
    "sqlite_file",
    "store_label",
]

_SQLITE = "sqlite:///"


def redacted_url(url: str) -> str:
    """``url`` with any password replaced, safe to put in an error message."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        if parts.port is not None:
            host = f"{host}:{parts.port}"
        netloc = f"{parts.username or ''}:***@{host}"
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<unparseable URL>"


class DriverMissing(ValueError):
    """The store URL needs a driver that is not installed (the ``postgres`` extra)."""


def sqlite_file(url: str) -> str | None:
    """The absolute path of the SQLite file ``url`` opens (three slashes are relative to the
    working directory, four absolute), or None for another store."""
    path = url[len(_SQLITE) :] if url.startswith(_SQLITE) else ""
    return os.path.abspath(path) if path and path != ":memory:" else None


def store_label(url: str) -> str:
    """``url`` for a log line: its password replaced, a SQLite file's absolute path after it."""
    path = sqlite_file(url)
    return f"{redacted_url(url)} ({path})" if path else redacted_url(url)


def open_store(url: str, *, retry_seconds: float = 5.0, batch_max: int = 256) -> SessionStore:
    """The store a URL names; ``ValueError`` naming the URL when none fits.

    ``retry_seconds``: how long a PostgreSQL store call retries a lost connection;
    ``batch_max``: how many writes a PostgreSQL store sends in one transaction at most."""
    if url == "memory://":
        return MemorySessionStore()
    if url.startswith(_SQLITE):
        path = url[len(_SQLITE) :]
        if not path:
            raise ValueError(f"store URL {url!r} names no database file")
        return SqliteSessionStore(path)
    scheme = url.partition(":")[0].lower()
    if scheme == "sqlite":
        raise ValueError(
            f"store URL {url!r} is not sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    if scheme in ("postgres", "postgresql"):
        _require_psycopg()
        from engine_service.stores.postgres import PostgresSessionStore

        return PostgresSessionStore(url, retry_seconds=retry_seconds, max_batch=batch_max)
    if scheme.startswith("postgresql+"):
        raise ValueError(
            f"store URL {redacted_url(url)!r}: write postgresql://... (no driver suffix)"
        )
    raise ValueError(
        f"unsupported store URL {redacted_url(url)!r};"
        " use sqlite:///path.db, postgresql://... or memory://"
    )


def _require_psycopg() -> None:
    """``ValueError`` saying how to install the PostgreSQL driver, when it is absent (it is
    the ``postgres`` extra: ``make run`` installs the runtime dependencies only)."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise DriverMissing(
            "a postgresql:// store needs the PostgreSQL driver: pip install 'agentik[postgres]'"
            " (in a clone: .venv/bin/pip install -e '.[postgres]')"
        ) from None


def migrate_store(url: str) -> tuple[int, int] | None:
    """Apply the migrations of the store ``url`` names; the schema version before and
    after, or None for a store without a schema (``memory://``).

    ``ValueError`` for a URL naming no store, ``StorageUnavailable`` when the database
    cannot be reached or written, ``RuntimeError`` when its schema is newer than this code.
    """
    if url.startswith(_SQLITE) and url[len(_SQLITE) :]:
        from engine_service.stores.sqlite import migrate as migrate_sqlite

        return migrate_sqlite(url[len(_SQLITE) :])
    if url.partition(":")[0].lower() in ("postgres", "postgresql"):
        _require_psycopg()
        from engine_service.stores.postgres import migrate as migrate_postgres

        return migrate_postgres(url)
    opened = open_store(url)  # raises for anything else but memory://
    assert isinstance(opened, MemorySessionStore)
    return None
