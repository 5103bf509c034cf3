"""Session stores and ``open_store``, which picks one from a URL.

``memory://``
    :class:`MemorySessionStore`, gone with the process.
``sqlite:///path.db``
    :class:`SqliteSessionStore`; the path after ``sqlite:///`` is used as written, so
    ``sqlite:///data/agentik.db`` is relative to the working directory and
    ``sqlite:////var/lib/agentik.db`` is absolute. ``sqlite:///:memory:`` is a private
    in-memory database.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from engine_service.core.store import RunBegun, SessionStore
from engine_service.stores.memory import MemorySessionStore
from engine_service.stores.sqlite import SqliteSessionStore

__all__ = [
    "MemorySessionStore",
    "RunBegun",
    "SessionStore",
    "SqliteSessionStore",
    "open_store",
]

_SQLITE = "sqlite:///"


def _redacted(url: str) -> str:
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


def open_store(url: str) -> SessionStore:
    """The store a URL names; ``ValueError`` naming the URL when none fits."""
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
    if scheme in ("postgres", "postgresql") or scheme.startswith("postgresql+"):
        raise ValueError(
            f"store URL {_redacted(url)!r}: PostgreSQL is not supported yet;"
            " use sqlite:///path.db or memory://"
        )
    raise ValueError(
        f"unsupported store URL {_redacted(url)!r}; use sqlite:///path.db or memory://"
    )
