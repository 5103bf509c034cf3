"""A later run of a conversation reads what it starts from in its begin (``begin_run``
with an opening: ``RunBegun.context``), or, when its begin cannot take its input (the
conversation has state), in one store call after it (``SessionStore.run_context``: the
checkpoint, the messages after it and which of the client's message ids are known), not
two: with SQLite every call is an operation of the writer thread, and under load each
waits for its next group commit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.chat import ChatDelta, ChatModel, ChatRequest, TextDelta
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.models import JSON, UNSET, Message, Role, RunInput, TextPart
from engine_service.core.registry import ToolRegistry
from engine_service.stores import SqliteSessionStore

R = TypeVar("R")
WAIT = 10.0


class Counted(ChatModel):
    """Answers "ok"; notes how many store operations had been asked when it was asked,
    and what it was sent."""

    name = "counted"

    def __init__(self, operations: list[str]) -> None:
        self.operations = operations
        self.asked_after: list[int] = []
        self.sent: list[list[str]] = []

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        self.asked_after.append(len(self.operations))
        self.sent.append([m.id for m in request.messages])
        yield TextDelta("ok")


async def _run(engine: Engine, messages: list[Message], state: JSON = UNSET) -> list[ev.Event]:
    handle = await engine.start_run(
        ANONYMOUS,
        RunInput(session_id="s", create_session=True, messages=messages, state=state),
    )
    async with asyncio.timeout(WAIT):
        return [event async for event in engine.run_events(handle)]


def _user(message_id: str) -> Message:
    return Message(id=message_id, role=Role.USER, content=[TextPart(message_id)])


@pytest.mark.parametrize("state", [False, True])
async def test_a_later_run_reads_its_history_in_one_store_operation(
    tmp_path: Path, state: bool
) -> None:
    store = SqliteSessionStore(tmp_path / "s.db")
    operations: list[str] = []
    submit = store._writer.submit

    async def noted(run: Callable[[], R], **lane: Any) -> R:
        operations.append(getattr(getattr(run, "func", run), "__name__", "?"))
        return await submit(run, **lane)

    store._writer.submit = noted  # type: ignore[method-assign]
    model = Counted(operations)
    engine = Engine(store, model, ToolRegistry(), EngineLimits(resume_runs=False))
    await engine.start()
    try:
        await _run(engine, [_user("u1")], {"count": 1} if state else UNSET)
        operations.clear()
        # An AG-UI client sends the whole history again, with the new message.
        events = await _run(engine, [_user("u1"), _user("u2")])
        assert isinstance(events[-1].body, ev.RunFinished), events[-1]
        # Before the LLM was asked: the run's begin, which read what it starts from and
        # stored its new message; with state in the conversation, the begin, then one
        # read (the code before read the context and the known ids in two operations,
        # after the begin, and stored the input after them).
        before_llm = operations[: model.asked_after[-1]]
        assert before_llm == (["begin_run", "run_context"] if state else ["begin_run"]), operations
        assert "context_messages" not in operations and "known_message_ids" not in operations
        # The known message was not stored again; the new one was, and the LLM got both.
        stored = [m.id for m in await store.all_messages("s") if m.role is Role.USER]
        assert stored == ["u1", "u2"]
        assert [i for i in model.sent[-1] if i in ("u1", "u2")] == ["u1", "u2"]
    finally:
        await engine.shutdown(WAIT)
        await store.close()
