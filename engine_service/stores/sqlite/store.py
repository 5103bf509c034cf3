"""A ``SessionStore`` in one SQLite file (stdlib ``sqlite3``).

The database runs in WAL mode with ``synchronous=NORMAL`` (durable across process
crashes, at worst the last commits lost on power failure) and foreign keys on, so
deleting a session cascades to its messages, runs and events.

The async methods run their SQL on the store's connection in one of two ways (see
``writer.Writer``). When the store is idle (no operation queued or running), the call runs
right away on the caller's thread, the event loop's: a short indexed statement or two on a
local file is far cheaper than handing it to a thread, which on a busy loop waits for the
GIL, and this is what keeps the first token of a lone run fast. When operations are
already queued, or one already ran so in this turn of the loop, the call joins the queue of
the writer thread, which runs every batch that queued meanwhile in one transaction (group
commit). Either way operations run one at a time, those on one session in the order they
were asked (what a client waits on to start may pass the streaming writes of other
sessions), so a run's events are appended in the order they were produced. The loop never
waits for another process holding the file's write lock: an operation that would wait goes
to the writer thread instead, which waits up to the connection timeout. WAL checkpoints
(which may fsync) never run on the loop: on a thread and connection of their own
(``writer.Checkpointer``), or on the writer thread when the file is held in exclusive mode.

Every write is one ``BEGIN IMMEDIATE`` transaction, committed when its block ends and
rolled back when it raises, so an error never leaves half a change behind. The "one
active run per session" rule is enforced inside that transaction and, as a second
line, by a partial unique index on running runs, so it holds across processes too.

Times are stored as fixed-width UTC ISO-8601 text with microseconds (exact, and
ordered as text); event times as REAL epoch seconds, as the events carry them.

The store is made of parts, one module each, all on one :class:`~.file.SqliteFile` (the
connection, the writer, the transactions): ``sessions``, ``messages``, ``runs``,
``events``, ``leases`` and ``deliveries``; ``schema`` migrates the file, ``rows`` converts
rows and times, ``errors`` names SQLite's failures.
"""

from __future__ import annotations

from pathlib import Path

from engine_service.core.store import SessionStore
from engine_service.stores.sqlite.deliveries import SqliteDeliveries
from engine_service.stores.sqlite.events import SqliteEvents
from engine_service.stores.sqlite.leases import SqliteLeases
from engine_service.stores.sqlite.messages import SqliteMessages
from engine_service.stores.sqlite.runs import SqliteRuns
from engine_service.stores.sqlite.sessions import SqliteSessions

__all__ = ["SqliteSessionStore", "migrate"]


class SqliteSessionStore(
    SqliteSessions,
    SqliteMessages,
    SqliteRuns,
    SqliteEvents,
    SqliteLeases,
    SqliteDeliveries,
    SessionStore,
):
    """Sessions in one SQLite file. A limit of zero means no limit."""


def migrate(path: str | Path) -> tuple[int, int]:
    """Migrate the SQLite file at ``path`` (creating it); the schema version before and
    after. ``StorageUnavailable`` when it cannot be opened or written."""
    store = SqliteSessionStore(path)
    try:
        return store.migrated
    finally:
        store._conn.close()
