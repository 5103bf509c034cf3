"""Schema 9's backfill: each row of the outbox tied to its conversation, and those whose
conversation is gone deleted (``stores.delivery_sessions``: what a row says, and the
rules), in the migration's transaction.

One pass over the outbox (a server-side cursor: the payloads are read a page at a time and
only the ids are kept), one read of the conversations the rows name, one UPDATE joined on
the deliveries' primary key and one DELETE. :func:`backfill` for ``agentik migrate``,
:func:`backfill_async` for a store migrating on its first call."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from engine_service.stores.delivery_sessions import Claim, Conversation, Sorted, claim_of, sort_rows

__all__ = ["backfill", "backfill_async"]

_ROWS = "SELECT id, kind, payload, created_at FROM deliveries"
_FOUND = """
SELECT c.session_id, c.run_id, s.owner, s.created_at,
       EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.id AND r.id = c.run_id)
FROM unnest(%s::text[], %s::text[]) AS c (session_id, run_id)
JOIN sessions s ON s.id = c.session_id
"""
_LINK = """
UPDATE deliveries SET session_id = m.session_id
FROM unnest(%s::text[], %s::text[]) AS m (id, session_id)
WHERE deliveries.id = m.id
"""
_DELETE = "DELETE FROM deliveries WHERE id = ANY(%s::text[])"
_CURSOR = "agentik_backfill"


def _claim(row: Sequence[Any]) -> Claim | None:
    created: datetime = row[3]
    return claim_of(row[0], row[1], row[2], created.astimezone(UTC))


def _pairs(claims: list[Claim]) -> tuple[list[str], list[str]]:
    pairs = sorted({(c.session_id, c.run_id) for c in claims})
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _found(rows: list[TupleRow]) -> dict[tuple[str, str], Conversation]:
    return {(r[0], r[1]): Conversation(r[2], r[3].astimezone(UTC), bool(r[4])) for r in rows}


def _writes(verdicts: Sorted) -> list[tuple[str, tuple[list[str], ...]]]:
    writes: list[tuple[str, tuple[list[str], ...]]] = []
    if verdicts.links:
        ids, sessions = zip(*verdicts.links, strict=True)
        writes.append((_LINK, (list(ids), list(sessions))))
    if verdicts.deletes:
        writes.append((_DELETE, (verdicts.deletes,)))
    return writes


async def backfill_async(conn: psycopg.AsyncConnection[TupleRow]) -> None:
    """The backfill on ``conn``, inside its transaction."""
    async with conn.cursor(name=_CURSOR) as cursor:
        await cursor.execute(_ROWS)
        claims = [claim async for row in cursor if (claim := _claim(row)) is not None]
    if not claims:
        return
    found = await (await conn.execute(_FOUND, _pairs(claims))).fetchall()
    for statement, params in _writes(sort_rows(claims, _found(found))):
        await conn.execute(statement, params)


def backfill(conn: psycopg.Connection[TupleRow]) -> None:
    """The same on a synchronous ``conn``."""
    with conn.cursor(name=_CURSOR) as cursor:
        cursor.execute(_ROWS)
        claims = [claim for row in cursor if (claim := _claim(row)) is not None]
    if not claims:
        return
    found = conn.execute(_FOUND, _pairs(claims)).fetchall()
    for statement, params in _writes(sort_rows(claims, _found(found))):
        conn.execute(statement, params)
