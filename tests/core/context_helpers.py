"""Fixtures for the context budget tests: an engine on each store, talking to the fake
OpenAI server with a context window."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.context import ContextLimits
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, Role, RunInput, TextPart, ToolCall
from engine_service.core.registry import ToolRegistry
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.stores import MemorySessionStore, SessionStore, SqliteSessionStore
from engine_service.stores.postgres import PostgresSessionStore
from tests.fakes.fake_openai import FakeOpenAI

__all__ = ["Chat", "any_store", "fake", "open_chat", "user"]


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def user(text: str, message_id: str = "") -> Message:
    return Message(id=message_id, role=Role.USER, content=[TextPart(text)])


def tool_call(call_id: str, name: str = "lookup") -> Message:
    return Message(
        id=f"a-{call_id}", role=Role.ASSISTANT, tool_calls=[ToolCall(call_id, name, "{}")]
    )


def tool_result(call_id: str, text: str) -> Message:
    return Message(
        id=f"r-{call_id}", role=Role.TOOL, content=[TextPart(text)], tool_call_id=call_id
    )


@dataclass
class Chat:
    """An engine on ``store`` whose model is the fake at ``limits``."""

    engine: Engine
    store: SessionStore

    async def turn(
        self, session_id: str, *messages: Message, snapshot: bool = False
    ) -> list[ev.EventBody]:
        """One run's event bodies, to its end (``snapshot``: ask for MESSAGES_SNAPSHOT)."""
        run_input = RunInput(
            session_id=session_id,
            create_session=True,
            messages=list(messages),
            messages_snapshot=snapshot,
        )
        handle = await self.engine.start_run(ANONYMOUS, run_input)
        return [event.body async for event in self.engine.run_events(handle)]


async def open_chat(
    fake: FakeOpenAI, store: SessionStore, limits: ContextLimits, system_prompt: str = ""
) -> Chat:
    model = OpenAIChatModel(base_url=fake.base_url, api_key="k", model="fake-model", max_retries=0)
    turn = RunLimits(system_prompt=system_prompt, context=limits)
    engine = Engine(store, model, ToolRegistry(), EngineLimits(run=turn))
    await engine.start()
    return Chat(engine, store)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    made: SessionStore
    if request.param == "memory":
        made = MemorySessionStore()
    elif request.param == "sqlite":
        made = SqliteSessionStore(tmp_path / "sessions.db")
    else:
        made = PostgresSessionStore(request.getfixturevalue("pg_url"))
    yield made
    await made.close()
