"""Statements with their values written in as literals (the PostgreSQL store's batches):
every value reads back from the server exactly as it was, whatever its text, and a
statement is prepared once per connection and run by ``EXECUTE`` after."""

from __future__ import annotations

import enum
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from engine_service.stores.postgres import literals as postgres_literals
from engine_service.stores.postgres.literals import Renderer

HOSTILE_TEXTS = [
    "",
    "plain",
    "it's",
    "''",
    "back\\slash",
    "\\'; DROP TABLE t; --",
    "E'\\x41'",
    "$$dollar$$ $1 %s %(x)s %% %",
    "line\nbreak\ttab\r",
    "ünïcødé 🙂 中文",
    '{"json": "with \\"quotes\\" and \\\\ backslashes"}',
    "\u2028\ufeff\x7f",
]


@pytest.fixture
async def conn(pg_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    made = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    yield made
    await made.close()


async def _read_back(conn: psycopg.AsyncConnection[Any], literal: str, cast: str) -> Any:
    row = await (await conn.execute(f"SELECT {literal}{cast}", prepare=False)).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("conforming", ["on", "off"])
async def test_text_reads_back_as_it_was_whatever_it_holds(
    conn: psycopg.AsyncConnection[Any], conforming: str
) -> None:
    await conn.execute(f"SET standard_conforming_strings = {conforming}")
    render = Renderer(conn)
    for text in HOSTILE_TEXTS:
        assert await _read_back(conn, render.literal(text), "::text") == text
    assert await _read_back(conn, render.literal(HOSTILE_TEXTS), "::text[]") == HOSTILE_TEXTS


async def test_numbers_times_and_nulls_read_back_as_they_were(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    render = Renderer(conn)
    for number in (0, 7, -7, 2**62, -(2**62)):
        assert await _read_back(conn, "0 - " + render.literal(number), "::bigint") == -number
    for real in (0.0, 1.5, -2.25, 1_700_000_000.123456, 1e-300, -1e300, math.inf, -math.inf):
        assert await _read_back(conn, "0 - " + render.literal(real), "::float8") == -real
    assert math.isnan(await _read_back(conn, render.literal(math.nan), "::float8"))
    assert await _read_back(conn, render.literal([1.25, -3.5]), "::float8[]") == [1.25, -3.5]
    assert await _read_back(conn, render.literal([]), "::bigint[]") == []
    assert await _read_back(conn, render.literal(None), "::text") is None
    assert await _read_back(conn, render.literal(True), "") is True
    assert await _read_back(conn, render.literal(False), "") is False
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone(timedelta(hours=-5)))
    assert await _read_back(conn, render.literal(when), "") == when.astimezone(UTC)


async def test_enum_members_are_written_as_their_values(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    render = Renderer(conn)

    class Kind(enum.StrEnum):
        QUOTED = "it's"

    class Count(enum.IntEnum):
        THREE = 3

    assert await _read_back(conn, render.literal(Kind.QUOTED), "::text") == "it's"
    assert await _read_back(conn, render.literal([Count.THREE]), "::bigint[]") == [3]


async def test_text_the_connections_encoding_cannot_hold_is_refused(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    await conn.execute("SET client_encoding = 'LATIN1'")
    render = Renderer(conn)
    assert await _read_back(conn, render.literal("café's"), "::text") == "café's"
    with pytest.raises(psycopg.DataError, match="encoding"):
        render.literal("中文")


async def test_nul_in_text_is_refused_as_psycopg_refuses_it(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    render = Renderer(conn)
    with pytest.raises(psycopg.DataError, match="NUL"):
        render.literal("a\x00b")
    with pytest.raises(psycopg.DataError, match="NUL"):
        render.statement("SELECT %s::text[]", (["ok", "\x00"],))


async def test_values_of_other_types_and_times_without_a_zone_are_refused(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    render = Renderer(conn)
    with pytest.raises(TypeError, match="timezone"):
        render.literal(datetime(2026, 1, 2))
    for value in (b"bytes", {"a": 1}, 1j, object()):
        with pytest.raises(TypeError, match="no SQL literal"):
            render.literal(value)


async def test_placeholders_are_filled_by_position_or_by_name(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    render = Renderer(conn)
    assert render.statement("SELECT %s, %s, '%%'", ("a", 1)) == "SELECT 'a', 1, '%'"
    named = render.statement("SELECT %(x)s, %(y)s, %(x)s", {"x": "it's", "y": None})
    assert await (await conn.execute(named, prepare=False)).fetchone() == ("it's", None, "it's")
    with pytest.raises(TypeError, match="2 parameters for 1"):
        render.statement("SELECT %s", (1, 2))
    with pytest.raises(TypeError, match="do not match"):
        render.statement("SELECT %(x)s", (1,))
    with pytest.raises(psycopg.ProgrammingError, match="mixed"):
        render.statement("SELECT %s, %(x)s", (1,))
    with pytest.raises(psycopg.ProgrammingError, match="placeholders"):
        render.statement("SELECT '5%'", ())


async def test_a_statement_is_prepared_once_per_connection_and_executed_after(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    query = "SELECT %(n)s::bigint + 1, %(t)s::text"
    render = Renderer.of(conn)
    assert Renderer.of(conn) is render
    assert render.statement(query, {"n": 1, "t": "x"}).startswith("SELECT ")  # not yet
    await render.prepare(conn, [query, query])
    await render.prepare(conn, [query])
    text = render.statement(query, {"n": 41, "t": "it's"})
    assert text.startswith("EXECUTE agentik_1(")
    assert await (await conn.execute(text, prepare=False)).fetchone() == (42, "it's")
    cursor = await conn.execute("SELECT count(*) FROM pg_prepared_statements")
    assert await cursor.fetchone() == (1,)
    # A statement whose parameter's type the server cannot tell is sent in full.
    await render.prepare(conn, ["SELECT %s IS NULL"])
    assert render.statement("SELECT %s IS NULL", ("v",)) == "SELECT 'v' IS NULL"


async def test_past_the_most_prepared_statements_the_rest_are_sent_in_full(
    conn: psycopg.AsyncConnection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(postgres_literals, "MAX_PREPARED", 2)
    render = Renderer(conn)
    queries = [f"SELECT %s::bigint + {i}" for i in range(3)]
    await render.prepare(conn, queries)
    texts = [render.statement(q, (1,)) for q in queries]
    assert [t.startswith("EXECUTE") for t in texts] == [True, True, False]
    for i, text in enumerate(texts):
        assert await (await conn.execute(text, prepare=False)).fetchone() == (1 + i,)
