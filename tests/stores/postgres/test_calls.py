"""The PostgreSQL store when its connections fail: what is retried, what is not, and when
it gives up.

A TCP proxy in front of the real server cuts connections at exact points: as ``COMMIT`` is
sent (the transaction aborts), and after the server committed but before the client heard
(the write is stored). Either way the write is stored exactly once. A database that goes
away, or never answers, fails a call after ``retry_seconds`` with its cause in plain words.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest

from engine_service.core.errors import StorageUnavailable
from engine_service.stores.postgres import PostgresSessionStore
from tests.stores.pg_proxy import PostgresProxy, postgres_proxy

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.fixture
async def proxy(pg_url: str) -> AsyncIterator[PostgresProxy]:
    async with postgres_proxy(pg_url) as running:
        yield running


def _refusing_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _titles(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT title FROM sessions ORDER BY id").fetchall()]


@pytest.mark.parametrize("where", ["before", "after"])
async def test_a_write_cut_off_at_its_commit_is_stored_exactly_once(
    proxy: PostgresProxy, pg_url: str, where: str
) -> None:
    store = PostgresSessionStore(proxy.url, retry_seconds=5)
    try:
        await store.open()
        proxy.cut_at_commit(where)  # type: ignore[arg-type]
        made = await store.create_session("s1", "once", NOW)
        assert proxy.cuts == 1
        assert made.title == "once"
        # Not run twice: a second INSERT would have been AlreadyExists.
        assert (await store.get_session("s1")).title == "once"
    finally:
        await store.close()
    assert _titles(pg_url) == ["once"]


async def test_a_call_gives_up_after_the_retry_time_when_the_server_refuses_connections() -> None:
    store = PostgresSessionStore(
        f"postgresql://agent:pw@127.0.0.1:{_refusing_port()}/x", timeout=2, retry_seconds=1.0
    )
    started = time.monotonic()
    try:
        with pytest.raises(StorageUnavailable) as caught:
            await store.get_session("s1")
    finally:
        await store.close()
    elapsed = time.monotonic() - started
    assert caught.value.message == "storage unavailable: the database is unreachable"
    assert 1.0 <= elapsed < 4.0, elapsed


async def test_without_retries_a_refused_connection_fails_at_once() -> None:
    store = PostgresSessionStore(
        f"postgresql://agent:pw@127.0.0.1:{_refusing_port()}/x", timeout=2, retry_seconds=0
    )
    started = time.monotonic()
    try:
        with pytest.raises(StorageUnavailable, match="the database is unreachable"):
            await store.get_session("s1")
    finally:
        await store.close()
    assert time.monotonic() - started < 1.0


async def test_a_call_gives_up_after_the_retry_time_when_the_server_goes_away(
    proxy: PostgresProxy,
) -> None:
    store = PostgresSessionStore(proxy.url, timeout=10, retry_seconds=1.0)
    try:
        await store.create_session("s1", "", NOW)
        await proxy.go_away()
        started = time.monotonic()
        with pytest.raises(StorageUnavailable) as caught:
            await store.rename_session("s1", "gone", NOW)
        elapsed = time.monotonic() - started
    finally:
        await store.close()
    assert caught.value.message == "storage unavailable: the database is unreachable"
    assert 1.0 <= elapsed < 4.0, elapsed  # bounded by the retry time, not the pool's 10 s
