"""``core.takeover``: a run its engine left RUNNING goes on as its cut round would have.

A memory store holds what a dead engine left: the run's input and one LLM round whose calls
never started (a plain tool, one listed for approval, ``ask_user``, and the client's tool).
A new engine on it resumes the run at its start: the plain call runs; the approval and the
question are asked again (never run, never answered without the person); the client's call
stays pending; the LLM is not asked on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from engine_service.build import build_model
from engine_service.core import events as ev
from engine_service.core.caller import ANONYMOUS
from engine_service.core.deliveries import Delivery
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.hitl import AskUserTool
from engine_service.core.kept_input import keep
from engine_service.core.limits import RunLimits
from engine_service.core.models import (
    ClientTool,
    InterruptKind,
    Message,
    Role,
    RunInput,
    RunRecord,
    RunStatus,
    Session,
    TextPart,
    ToolCall,
)
from engine_service.core.recovery import RunClosed
from engine_service.core.registry import ToolRegistry
from engine_service.core.store import Lease
from engine_service.core.takeover import TakeOver
from engine_service.stores.memory import MemorySessionStore
from engine_service.tools.builtin import builtin_tools
from tests.engine.harness import engine_settings
from tests.fakes.fake_openai import FakeOpenAI

NOW = datetime(2026, 12, 5, tzinfo=UTC)
WAIT = 8.0


async def _left_running(store: MemorySessionStore, calls: list[ToolCall]) -> None:
    """Run "r" of session "s" as a dead engine left it: its input and a round asking for
    ``calls``, none of them started; the client offered the tool ``frontend``."""
    tools = [ClientTool("frontend", "the page's tool", {"type": "object"})]
    kept = keep(RunInput("s", "r", tools=tools), 100_000)
    begun = await store.begin_run("s", "r", NOW, create=True, reserve=64, kept=kept)
    said = Message(id="u", role=Role.USER, content=[TextPart("go")], run_id="r")
    asked = Message(id="m1", role=Role.ASSISTANT, tool_calls=calls, run_id="r")
    await store.append_messages("s", [said, asked])
    bodies: list[ev.EventBody] = [ev.RunStarted(), ev.MessageStored(said), ev.MessageStored(asked)]
    first = begun.session.last_seq + 1
    await store.append_events(
        "s", [ev.Event(first + i, time.time(), "s", "r", b) for i, b in enumerate(bodies)]
    )


async def _resumed(llm: FakeOpenAI, store: MemorySessionStore) -> list[ev.Event]:
    """Start an engine on ``store``: it resumes the run left running; the run's events
    after the resume, to its end."""
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test-key")
    tools = ToolRegistry([*builtin_tools(), AskUserTool()])
    limits = EngineLimits(run=RunLimits(approval=("calculate",)))
    engine = Engine(store, build_model(settings), tools, limits)
    await engine.start()
    try:
        async with asyncio.timeout(WAIT):
            return [e async for e in engine.subscribe(ANONYMOUS, "s", 3, until_idle=True)]
    finally:
        await engine.shutdown(0)


@pytest.mark.parametrize("gated", [True, False], ids=["with gated calls", "without"])
async def test_a_resumed_round_runs_its_plain_calls_and_asks_for_the_rest_as_it_would_have(
    llm: FakeOpenAI, gated: bool
) -> None:
    calls = [ToolCall("t1", "current_time", "{}"), ToolCall("f1", "frontend", "{}")]
    if gated:
        calls += [
            ToolCall("g1", "calculate", '{"expression": "6*7"}'),
            ToolCall("q1", "ask_user", '{"question": "Which file?"}'),
        ]
    store = MemorySessionStore()
    await _left_running(store, calls)

    events = await _resumed(llm, store)

    assert llm.requests == []  # the LLM is not asked on without the answers
    final = events[-1].body
    assert isinstance(final, ev.RunFinished) and final.pending_tool_call_ids == ["f1"]
    results = [m for m in await store.all_messages("s") if m.role is Role.TOOL]
    assert [m.tool_call_id for m in results] == ["t1"]  # the plain call ran; no other
    run = await store.get_run("s", "r")
    session = await store.get_session("s")
    if not gated:
        assert final.outcome is ev.Outcome.SUCCESS and run.status is RunStatus.SUCCEEDED
        assert session.interrupts == []
        return
    assert final.outcome is ev.Outcome.INTERRUPT and run.status is RunStatus.INPUT_REQUIRED
    asked = {i.tool_call.id: i for i in session.interrupts}
    assert [i.id for i in final.interrupts] == [i.id for i in session.interrupts]
    assert sorted(asked) == ["g1", "q1"]
    assert asked["g1"].kind is InterruptKind.APPROVAL
    assert isinstance(asked["g1"].payload, dict) and "inDoubt" not in asked["g1"].payload
    assert asked["q1"].kind is InterruptKind.QUESTION and asked["q1"].message == "Which file?"


class _UndecodableInput(MemorySessionStore):
    """A shared memory store whose reads of a run's kept input, once ``broken``, fail as
    a row the store cannot decode would: not with an ``AgentikError``."""

    def __init__(self) -> None:
        super().__init__(shared=True)
        self.broken = False

    async def kept_input(self, session_id: str, run_id: str) -> str:
        if self.broken:
            raise ValueError("a row the store cannot decode")
        return await super().kept_input(session_id, run_id)


def _take_over(store: MemorySessionStore, made: list[RunClosed], replica: str = "B") -> TakeOver:
    """A take-over by ``replica`` that closes the runs it gets (``resume_runs`` off); each
    close whose webhook rows were made is noted in ``made``."""

    async def deliveries(
        webhook: str, key: str, run: RunRecord, closed: RunClosed
    ) -> Sequence[Delivery]:
        made.append(closed)
        return ()

    return TakeOver(
        store,
        EngineLimits(resume_runs=False),
        is_engine_tool=lambda name: False,
        launch=lambda resumed: None,
        deliveries=deliveries,
        stored=lambda: None,
        tools_settled=lambda: None,
        event_limit=lambda: 1_000_000,
        replica=replica,
    )


async def test_a_close_whose_webhook_cannot_be_read_still_closes_the_run() -> None:
    """The read for a closed run's webhook (what it kept of its request) fails with an
    error that is not the store's own (a row it cannot decode): the close fails, and its
    last resort closes the run without the webhook (lost, logged), not left RUNNING."""
    store = _UndecodableInput()
    lease = Lease("B", datetime.now(UTC) + timedelta(seconds=30))
    await store.begin_run("s", "r", datetime.now(UTC), create=True, lease=lease)
    made: list[RunClosed] = []
    store.broken = True

    await _take_over(store, made)(await store.get_run("s", "r"))

    assert (await store.get_run("s", "r")).status is RunStatus.INTERRUPTED
    assert made == []  # its webhook is lost, not the close


class _UndecodableSession(MemorySessionStore):
    """A memory store whose reads of session "bad", once ``broken``, fail as a row the
    store cannot decode would: not with an ``AgentikError``."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    async def get_session(self, session_id: str) -> Session:
        if self.broken and session_id == "bad":
            raise ValueError("a row the store cannot decode")
        return await super().get_session(session_id)


async def test_a_left_behind_run_that_cannot_be_closed_does_not_keep_the_engine_from_starting() -> (
    None
):
    """A single engine starting again closes the runs its last life left RUNNING; one of
    them cannot be closed at all (its conversation's row cannot be read): it is logged and
    left for the next start, the engine starts, and the other run is closed."""
    store = _UndecodableSession()
    for session_id in ("bad", "good"):
        await store.begin_run(session_id, f"r-{session_id}", NOW, create=True)
    store.broken = True
    settings = engine_settings(OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="k")
    engine = Engine(store, build_model(settings), ToolRegistry([]), EngineLimits(resume_runs=False))
    await engine.start()
    try:
        assert (await store.get_run("good", "r-good")).status is RunStatus.INTERRUPTED
        assert (await store.get_run("bad", "r-bad")).status is RunStatus.RUNNING
    finally:
        await engine.shutdown(0)
