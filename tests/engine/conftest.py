from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.engine.harness import Harness, engine_settings, running_engine
from tests.fakes.fake_openai import FakeOpenAI
from tests.postgres_server import pg_database, pg_url

__all__ = ["harness", "llm", "pg_database", "pg_url"]


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
