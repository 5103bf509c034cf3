"""SQL statements of the PostgreSQL store's batches with their values written in as
literals, so that a batch goes to the server as one query string (the simple query
protocol: one message, one send, one read of the results).

Why: psycopg's pipeline sends each statement of a batch as a message of its own, flushed
on its own and followed by a wake-up of the engine's loop; with server-side parameters it
also adapts each value through Python dumpers (an array of text a regular expression per
element). Measured on a store batch, that was 30-60 µs of the engine's CPU per statement,
more than the rest of the statement's life. Written in as literals, a statement costs a
few microseconds: the text goes through libpq's own escaping (``PQescapeStringConn``,
which follows the connection's encoding and ``standard_conforming_strings``), the other
values are numbers, booleans, times and arrays of them with one spelling each.

Only the types the store's batched statements use are accepted: ``str``, ``int``,
``float``, ``bool``, ``None``, timezone-aware ``datetime`` and lists of those; anything
else is a ``TypeError`` (a mistake in the store, never a value a client sent). Text with
a NUL character is refused as psycopg refuses it (``psycopg.DataError``): PostgreSQL text
cannot hold one. The query templates use psycopg's placeholders, ``%s`` or ``%(name)s``,
with ``%%`` for a percent sign.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import psycopg
from psycopg import pq

__all__ = ["MAX_PREPARED", "Renderer"]

log = logging.getLogger(__name__)

MAX_PREPARED = 256
"""Statements prepared per connection at most (the store has a few dozen)."""

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%s|%%|%")


class _Template:
    """A query split at its placeholders: the SQL pieces, and between each two a slot (a
    parameter's position or name); and the query with PostgreSQL's own placeholders
    (``$1``..., one per name), to prepare."""

    __slots__ = ("named", "numbered", "order", "slots", "sql")

    def __init__(self, query: str) -> None:
        self.sql: list[str] = []
        self.slots: list[str | int] = []
        numbers: dict[str | int, int] = {}
        position = 0
        start = 0
        named: bool | None = None
        for match in _PLACEHOLDER.finditer(query):
            token = match.group(0)
            if token == "%%":
                continue
            if token == "%":
                raise psycopg.ProgrammingError(
                    f"only '%s', '%(name)s' and '%%' are placeholders: {query[:80]!r}"
                )
            is_named = match.group(1) is not None
            if named is not None and named != is_named:
                raise psycopg.ProgrammingError(f"mixed placeholders in {query[:80]!r}")
            named = is_named
            self.sql.append(query[start : match.start()].replace("%%", "%"))
            slot: str | int = match.group(1) if is_named else position
            position += not is_named
            numbers.setdefault(slot, len(numbers) + 1)
            self.slots.append(slot)
            start = match.end()
        self.sql.append(query[start:].replace("%%", "%"))
        self.named = bool(named)
        self.order = list(numbers)
        """The slots in the order of their ``$n``."""
        parts = [self.sql[0]]
        for slot, sql in zip(self.slots, self.sql[1:], strict=True):
            parts.append(f"${numbers[slot]}")
            parts.append(sql)
        self.numbered = "".join(parts)


@functools.lru_cache(maxsize=512)
def _template(query: str) -> _Template:
    return _Template(query)


class Renderer:
    """Writes statements for one connection: with its escaping rules, and as ``EXECUTE``
    of a statement prepared on it once it is (:meth:`prepare`)."""

    __slots__ = ("__weakref__", "_encoding", "_escape", "_inline", "_names")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._escape = pq.Escaping(conn.pgconn).escape_string
        self._encoding = conn.info.encoding
        self._names: dict[str, str] = {}
        """Query → the name it is prepared under on the connection."""
        self._inline: set[str] = set()
        """Queries the server would not prepare (sent written out in full)."""

    @classmethod
    def of(cls, conn: psycopg.AsyncConnection[Any]) -> Renderer:
        """The renderer of ``conn`` (one per connection: it knows what is prepared)."""
        found = _renderers.get(conn)
        if found is None:
            found = _renderers[conn] = cls(conn)
        return found

    async def prepare(self, conn: psycopg.AsyncConnection[Any], queries: Iterable[str]) -> None:
        """Prepare on ``conn`` (its renderer's) those of ``queries`` not prepared yet, each
        once per connection: the server parses and plans a statement once, not per batch.
        One the server refuses to prepare (a parameter whose type it cannot tell) is sent
        in full from then on."""
        for query in queries:
            if query in self._names or query in self._inline:
                continue
            if len(self._names) >= MAX_PREPARED:
                self._inline.add(query)
                continue
            name = f"agentik_{len(self._names) + 1}"
            try:
                await conn.execute(f"PREPARE {name} AS {_template(query).numbered}", prepare=False)
            except psycopg.ProgrammingError as exc:
                if exc.sqlstate is None:
                    raise
                log.warning("statement not prepared (%s), sent in full: %.80r", exc, query)
                self._inline.add(query)
            else:
                self._names[query] = name

    def statement(self, query: str, params: Sequence[Any] | Mapping[str, Any]) -> str:
        """``query`` with ``params`` written in: ``EXECUTE`` of its prepared statement when
        there is one, else in full at its placeholders."""
        template = _template(query)
        if template.named != isinstance(params, Mapping) and (template.slots or params):
            raise TypeError(f"parameters do not match the placeholders of {query[:80]!r}")
        if not template.named and len(params) != len(template.order):
            raise TypeError(
                f"{len(params)} parameters for {len(template.order)} placeholders in {query[:80]!r}"
            )
        literal = self.literal
        name = self._names.get(query)
        if name is not None:
            if not template.order:
                return f"EXECUTE {name}"
            values = ",".join([literal(params[slot]) for slot in template.order])  # type: ignore[index]
            return f"EXECUTE {name}({values})"
        out = [template.sql[0]]
        for slot, sql in zip(template.slots, template.sql[1:], strict=True):
            out.append(literal(params[slot]))  # type: ignore[index]
            out.append(sql)
        return "".join(out)

    def literal(self, value: Any) -> str:
        """``value`` as an SQL literal."""
        kind = type(value)
        if kind is str:
            return self._text(value)
        if value is None:
            return "NULL"
        if kind is bool:
            return "true" if value else "false"
        if kind is int:
            return str(value) if value >= 0 else f"({value})"
        if kind is float:
            if math.isfinite(value):
                return repr(value) if value >= 0 else f"({value!r})"
            if math.isnan(value):
                return "'NaN'::float8"
            return "'Infinity'::float8" if value > 0 else "'-Infinity'::float8"
        if kind is list or kind is tuple:
            if not value:
                return "'{}'"
            return "ARRAY[" + ",".join(map(self.literal, value)) + "]"
        if isinstance(value, datetime):
            if value.tzinfo is None or value.utcoffset() is None:
                raise TypeError("a time for PostgreSQL must carry its timezone")
            return f"'{datetime.isoformat(value)}'::timestamptz"
        # Subclasses (a StrEnum or IntEnum member): their plain value.
        if isinstance(value, str):
            return self._text(str.__str__(value))
        if isinstance(value, int):
            return self.literal(int(value))
        if isinstance(value, float):
            return self.literal(float(value))
        if isinstance(value, list | tuple):
            return self.literal(list(value))
        raise TypeError(f"no SQL literal for a {kind.__name__}")

    def _text(self, value: str) -> str:
        if "\x00" in value:
            raise psycopg.DataError("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        if value.isascii() and "'" not in value and "\\" not in value:
            return f"'{value}'"  # nothing to escape (most ids, most JSON without quotes)
        try:
            encoded = value.encode(self._encoding)
        except UnicodeEncodeError as exc:  # a connection whose encoding is not UTF-8
            raise psycopg.DataError(f"text the connection's encoding cannot hold: {exc}") from exc
        return f"'{self._escape(encoded).decode(self._encoding)}'"


_renderers: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], Renderer] = (
    weakref.WeakKeyDictionary()
)
