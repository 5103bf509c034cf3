from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from engine_service.stores import MemorySessionStore
from engine_service.stores.postgres import PostgresSessionStore
from tests.engine.harness import Harness, StoreFor, engine_settings, running_engine
from tests.fakes.fake_openai import FakeOpenAI
from tests.postgres_server import pg_database, pg_url

__all__ = ["harness", "llm", "pg_database", "pg_url", "store_for"]


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
async def harness(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_TOOL_TIMEOUT="2",
    )
    async with running_engine(settings) as running:
        yield running


@pytest.fixture(params=["memory", "postgres"])
def store_for(request: pytest.FixtureRequest) -> StoreFor:
    """Makes the store of each replica: one shared object, or one PostgreSQL pool each."""
    if request.param == "memory":
        shared = MemorySessionStore(shared=True)
        return lambda: shared
    url: str = request.getfixturevalue("pg_url")
    return lambda: PostgresSessionStore(url)
