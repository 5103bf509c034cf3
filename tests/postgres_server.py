"""The PostgreSQL server the PostgreSQL store tests run against.

``AGENTIK_TEST_POSTGRES_URL`` names the server (default
``postgresql://postgres@127.0.0.1:5432/test``). Each test session makes its own database,
``agentik_test_<random>``, dropped at the end; each test gets a fresh schema in it. When
the server is unreachable the tests skip, or fail where ``AGENTIK_REQUIRE_POSTGRES`` is set
(CI), so they can never be skipped silently there.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get("AGENTIK_TEST_POSTGRES_URL") or DEFAULT_URL


def with_database(url: str, database: str) -> str:
    """``url`` naming another database on the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + database))


def with_schema(url: str, schema: str) -> str:
    """``url`` whose connections see (and create in) ``schema`` first."""
    option = quote(f"-csearch_path={schema}", safe="")
    parts = urlsplit(url)
    query = f"{parts.query}&options={option}" if parts.query else f"options={option}"
    return urlunsplit(parts._replace(query=query))


def unavailable(reason: str) -> None:
    if os.environ.get("AGENTIK_REQUIRE_POSTGRES"):
        pytest.fail(f"PostgreSQL tests are required here but cannot run: {reason}")
    pytest.skip(f"PostgreSQL tests skipped: {reason}")


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """The URL of a fresh database for this test session, dropped at the end."""
    admin_url = server_url()
    try:
        admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        from engine_service.stores import redacted_url

        unavailable(
            f"no PostgreSQL server at {redacted_url(admin_url)}"
            f" (set AGENTIK_TEST_POSTGRES_URL to use another): {exc}"
        )
        raise  # unreachable: skip and fail raise
    name = f"agentik_test_{secrets.token_hex(6)}"
    with admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_database(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=3) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """The URL of a fresh, empty schema in the session's database."""
    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(pg_database, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return with_schema(pg_database, schema)
