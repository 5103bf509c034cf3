"""Local agents as tools of other agents (issue 23): the sub-run in its own child
conversation, its progress, isolation, the depth limit, and a stop that propagates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agentik.config import ConfigError, load_settings
from engine_service.build import build_engine
from engine_service.core import events as ev
from engine_service.core.caller import Caller
from engine_service.core.engine import Engine
from engine_service.core.errors import InputRequired, InvalidInput, SessionNotFound
from engine_service.core.models import (
    InterruptKind,
    Message,
    ResumeEntry,
    ResumeStatus,
    Role,
    RunInput,
    RunStatus,
    TextPart,
)
from engine_service.tools.agents import TOOL_PROGRESS
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

ALICE = Caller("alice")

CONFIG = """
[llm]
base_url = "{url}"
api_key = "k"
max_retries = 0

[agent]
max_depth = {depth}

[[agents]]
name = "lead"
model = "lead-model"
tools = ["agent:researcher", "agent:lead"]

[[agents]]
name = "researcher"
description = "Finds things out"
model = "research-model"
tools = ["current_time"]
"""


@pytest.fixture
def llm() -> Any:
    with FakeOpenAI() as fake:
        yield fake


async def _engine(llm: FakeOpenAI, tmp_path: Path, depth: int = 3) -> Engine:
    path = tmp_path / "agentik.toml"
    path.write_text(CONFIG.format(url=llm.base_url, depth=depth))
    engine = build_engine(load_settings(path, {"AGENTIK_STORE": "memory://"}))
    await engine.start()
    return engine


@pytest.fixture
async def engine(llm: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Engine]:
    built = await _engine(llm, tmp_path)
    try:
        yield built
    finally:
        await built.shutdown(1.0)


def _user(text: str) -> Message:
    return Message(id="", role=Role.USER, content=[TextPart(text)])


async def _events(engine: Engine, session_id: str, text: str) -> list[ev.Event]:
    handle = await engine.start_run(
        ALICE,
        RunInput(session_id=session_id, messages=[_user(text)], create_session=True, agent="lead"),
    )
    async with asyncio.timeout(20):
        return [event async for event in engine.run_events(handle)]


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def _offered(request: dict[str, Any]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in request.get("tools", []))


async def test_an_agent_delegates_to_another_in_a_child_conversation(
    engine: Engine, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "find x"})]))
    events = await _events(engine, "lead-1", "please research x")
    assert isinstance(events[-1].body, ev.RunFinished)
    lead_first, research, lead_second = llm.requests
    assert (lead_first["model"], _offered(lead_first)) == (
        "lead-model",
        ["agent__lead", "agent__researcher"],
    )
    # The sub-agent runs as itself: its model, its tools, and no agents of its own.
    assert (research["model"], _offered(research)) == ("research-model", ["current_time"])
    assert research["messages"][-1] == {"role": "user", "content": "find x"}
    [result] = [e.body for e in events if isinstance(e.body, ev.ToolCallResult)]
    answer = json.loads(result.content)
    assert answer["agent"] == "researcher" and answer["answer"] == "Echo: find x"
    child = await engine.get_session(ALICE, answer["conversation_id"])
    assert (child.agent, child.owner) == ("researcher", "alice")
    [child_run] = (await engine.list_runs(ALICE, child.id, 0, 10))[0]
    assert child_run.parent_run_id == events[0].run_id
    progress = [e.body for e in events if isinstance(e.body, ev.Custom)]
    assert progress and all(p.name == TOOL_PROGRESS for p in progress)
    assert progress[-1].value["message"] == "Echo: find x"
    assert lead_second["messages"][-1]["role"] == "tool"


async def test_delegation_deeper_than_max_depth_ends_with_a_clear_error(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    engine = await _engine(llm, tmp_path, depth=2)
    try:
        again = FakeReply(tool_calls=[FakeToolCall("agent__lead", {"message": "go on"})])
        llm.enqueue(again, FakeReply(tool_calls=[FakeToolCall("agent__lead", {"message": "on"})]))
        llm.enqueue(FakeReply(tool_calls=[FakeToolCall("agent__lead", {"message": "more"})]))
        events = await _events(engine, "loop", "start")
        assert isinstance(events[-1].body, ev.RunFinished)
        refused = llm.requests[3]["messages"][-1]
        assert refused["role"] == "tool"
        assert "delegation is too deep: lead -> lead -> lead" in refused["content"]
        assert "max_depth" in refused["content"]
    finally:
        await engine.shutdown(1.0)


async def test_stopping_the_parent_stops_the_sub_run(engine: Engine, llm: FakeOpenAI) -> None:
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "slow"})]),
        FakeReply(text="thinking about it", hang_after=1),
    )
    handle = await engine.start_run(
        ALICE, RunInput(session_id="p", messages=[_user("go")], create_session=True, agent="lead")
    )
    async with asyncio.timeout(20):
        await _until(lambda: len(llm.requests) >= 2)  # the sub-agent's LLM call: it hangs
        sessions = (await engine.list_sessions(ALICE, 0, 10))[0]
        child = next(s for s in sessions if s.agent == "researcher")
        stopped, _ = await engine.stop_run(ALICE, "p")
        assert stopped
        ended = [e.body async for e in engine.run_events(handle)][-1]
        assert isinstance(ended, ev.RunFinished) and ended.outcome is ev.Outcome.CANCELLED
        async for _ in engine.subscribe(ALICE, child.id, 0, until_idle=True):
            pass  # to the end of the sub-run
    [run] = (await engine.list_runs(ALICE, child.id, 0, 10))[0]
    assert run.status is RunStatus.INTERRUPTED


def test_an_agent_tool_naming_no_agent_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text('[[agents]]\nname = "a"\ntools = ["agent:nobody"]\n')
    with pytest.raises(ConfigError, match=r"tools of agent 'a': 'agent:nobody' names no agent"):
        build_engine(load_settings(path, {}))


async def test_the_child_conversation_is_its_principals_alone(
    engine: Engine, llm: FakeOpenAI
) -> None:
    llm.enqueue(FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "x"})]))
    events = await _events(engine, "mine", "research")
    [result] = [e.body for e in events if isinstance(e.body, ev.ToolCallResult)]
    child_id = json.loads(result.content)["conversation_id"]
    assert (await engine.get_session(ALICE, child_id)).owner == "alice"
    with pytest.raises(SessionNotFound):
        await engine.get_session(Caller("bob"), child_id)
    assert (await engine.list_sessions(Caller("bob"), 0, 10))[0] == []


ASKING = """
[llm]
base_url = "{url}"
api_key = "k"
max_retries = 0

[agent]
max_depth = {depth}

[[agents]]
name = "lead"
model = "lead-model"
tools = ["agent:researcher", "agent:lead"]

[[agents]]
name = "researcher"
model = "research-model"
tools = ["calculate", "agent:researcher"]
approval = ["calculate"]
ask_user = true
"""


@pytest.fixture
async def asking(llm: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Engine]:
    """Agents whose sub-agent needs a person: it asks before every ``calculate``."""
    path = tmp_path / "agentik.toml"
    path.write_text(ASKING.format(url=llm.base_url, depth=3))
    built = build_engine(load_settings(path, {"AGENTIK_STORE": "memory://"}))
    await built.start()
    try:
        yield built
    finally:
        await built.shutdown(1.0)


def _delegate_calculate(llm: FakeOpenAI, expression: str = "6*7") -> None:
    """The lead delegates; the researcher calls ``calculate`` (which waits for a person)."""
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "compute"})]),
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": expression})]),
    )


async def _follow_run(engine: Engine, run_input: RunInput) -> list[ev.Event]:
    handle = await engine.start_run(ALICE, run_input)
    async with asyncio.timeout(20):
        return [event async for event in engine.run_events(handle)]


def _resume(session_id: str, *entries: ResumeEntry) -> RunInput:
    return RunInput(session_id=session_id, resume=list(entries), agent="lead")


async def test_an_approval_inside_the_sub_agent_is_asked_and_answered_on_the_parent(
    asking: Engine, llm: FakeOpenAI
) -> None:
    _delegate_calculate(llm)
    events = await _events(asking, "boss", "compute 6*7")
    ended = events[-1].body
    assert isinstance(ended, ev.RunFinished) and ended.outcome is ev.Outcome.INTERRUPT
    [asked] = ended.interrupts
    assert asked.kind is InterruptKind.APPROVAL
    assert asked.tool_call.name == "agent__researcher"  # the parent's call waits for it
    assert isinstance(asked.payload, dict)
    assert (asked.payload["tool"], asked.payload["arguments"]) == (
        "calculate",
        {"expression": "6*7"},
    )
    where = asked.payload["delegation"]
    assert isinstance(where, dict) and where["agent"] == "researcher"
    assert "Agent 'researcher' asks: Approve calling calculate" in asked.message
    child_id = str(where["conversationId"])
    child = await asking.get_session(ALICE, child_id)
    assert [i.id for i in child.interrupts] == [where["interruptId"]]
    boss = await asking.get_session(ALICE, "boss")
    assert [i.id for i in boss.interrupts] == [asked.id]
    before = len(llm.requests)

    approved = ResumeEntry(asked.id, ResumeStatus.RESOLVED, {"approved": True})
    events = await _follow_run(asking, _resume("boss", approved))
    ended = events[-1].body
    assert isinstance(ended, ev.RunFinished) and ended.outcome is ev.Outcome.SUCCESS
    research, lead = llm.requests[before:]
    assert research["model"] == "research-model"
    calculated = '{"expression": "6*7", "result": 42}'
    assert research["messages"][-1]["content"] == calculated  # it ran, once approved
    assert lead["model"] == "lead-model"
    [result] = [e.body for e in events if isinstance(e.body, ev.ToolCallResult)]
    answer = json.loads(result.content)
    assert (answer["conversation_id"], answer["answer"]) == (child_id, f"Result: {calculated}")
    assert "status" not in answer
    assert (await asking.get_session(ALICE, child_id)).interrupts == []
    assert (await asking.get_session(ALICE, "boss")).interrupts == []
    child_runs = (await asking.list_runs(ALICE, child_id, 0, 10))[0]
    assert [r.status for r in child_runs] == [RunStatus.SUCCEEDED, RunStatus.INPUT_REQUIRED]


async def test_a_declined_or_unreadable_answer_never_approves_the_sub_agents_call(
    asking: Engine, llm: FakeOpenAI
) -> None:
    _delegate_calculate(llm)
    events = await _events(asking, "boss", "compute")
    ended = events[-1].body
    assert isinstance(ended, ev.RunFinished)
    [asked] = ended.interrupts
    child_id = str(asked.payload["delegation"]["conversationId"])
    for payload in (None, {}, {"aproved": True}, {"approved": "yes"}, {"tool": "current_time"}):
        entry = ResumeEntry(asked.id, ResumeStatus.RESOLVED, payload)
        with pytest.raises(InvalidInput):
            await asking.start_run(ALICE, _resume("boss", entry))
    with pytest.raises(InputRequired):  # no answer at all
        await asking.start_run(ALICE, RunInput(session_id="boss", messages=[_user("and?")]))
    # Still asked, on both sides.
    assert [i.id for i in (await asking.get_session(ALICE, "boss")).interrupts] == [asked.id]
    assert len((await asking.get_session(ALICE, child_id)).interrupts) == 1
    before = len(llm.requests)
    no = ResumeEntry(asked.id, ResumeStatus.RESOLVED, {"approved": False, "reason": "too costly"})
    events = await _follow_run(asking, _resume("boss", no))
    assert isinstance(events[-1].body, ev.RunFinished)
    research = llm.requests[before]
    told = research["messages"][-1]["content"]
    assert "declined" in told and "too costly" in told and "not run" in told


async def test_a_question_two_agents_deep_reaches_the_top_and_the_answer_goes_down(
    asking: Engine, llm: FakeOpenAI
) -> None:
    """lead -> researcher -> researcher, which asks the user: the question surfaces on the
    lead's run, and the answer reaches the innermost run through the middle one."""
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "outer"})]),
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "inner"})]),
        FakeReply(tool_calls=[FakeToolCall("ask_user", {"question": "Which colour?"})]),
    )
    events = await _events(asking, "top", "start")
    ended = events[-1].body
    assert isinstance(ended, ev.RunFinished) and ended.outcome is ev.Outcome.INTERRUPT
    [asked] = ended.interrupts
    assert asked.kind is InterruptKind.QUESTION
    assert asked.message == "Agent 'researcher' asks: Agent 'researcher' asks: Which colour?"
    assert isinstance(asked.payload, dict) and asked.payload["question"] == "Which colour?"
    before = len(llm.requests)
    answer = ResumeEntry(asked.id, ResumeStatus.RESOLVED, {"answer": "blue"})
    events = await _follow_run(asking, _resume("top", answer))
    ended = events[-1].body
    assert isinstance(ended, ev.RunFinished) and ended.outcome is ev.Outcome.SUCCESS
    inner, middle, top = llm.requests[before:]
    assert inner["messages"][-1]["content"] == "blue"
    assert [m["model"] for m in (inner, middle, top)] == [
        "research-model",
        "research-model",
        "lead-model",
    ]
    [result] = [e.body for e in events if isinstance(e.body, ev.ToolCallResult)]
    assert json.loads(result.content)["answer"].startswith("Result: ")
    sessions = (await asking.list_sessions(ALICE, 0, 10))[0]
    assert all(s.interrupts == [] for s in sessions) and len(sessions) == 3


async def test_stopping_a_parent_that_waits_for_its_sub_agents_question_stops_both(
    asking: Engine, llm: FakeOpenAI
) -> None:
    _delegate_calculate(llm)
    events = await _events(asking, "boss", "compute")
    ended = events[-1].body
    assert isinstance(ended, ev.RunFinished)
    [asked] = ended.interrupts
    child_id = str(asked.payload["delegation"]["conversationId"])
    assert (await asking.stop_run(ALICE, "boss"))[0]
    assert (await asking.get_session(ALICE, "boss")).interrupts == []
    assert (await asking.get_session(ALICE, child_id)).interrupts == []


async def test_an_expired_sub_agent_request_is_a_no_even_if_approved(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(ASKING.format(url=llm.base_url, depth=3))
    settings = load_settings(
        path, {"AGENTIK_STORE": "memory://", "AGENTIK_INTERRUPT_EXPIRY": "0.2"}
    )
    engine = build_engine(settings)
    await engine.start()
    try:
        _delegate_calculate(llm)
        events = await _events(engine, "late", "compute")
        ended = events[-1].body
        assert isinstance(ended, ev.RunFinished)
        [asked] = ended.interrupts
        await asyncio.sleep(0.4)
        before = len(llm.requests)
        yes = ResumeEntry(asked.id, ResumeStatus.RESOLVED, {"approved": True})
        events = await _follow_run(engine, _resume("late", yes))
        assert isinstance(events[-1].body, ev.RunFinished)
        told = llm.requests[before]["messages"][-1]["content"]
        assert "expired" in told and "not run" in told  # the researcher's call never ran
    finally:
        await engine.shutdown(1.0)


async def test_the_depth_limit_holds_in_a_sub_run_resumed_with_an_answer(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """lead -> researcher -> researcher asks; once answered, the innermost run delegates
    once more: refused, as deeper than ``max_depth`` (2), the resume kept its chain."""
    path = tmp_path / "agentik.toml"
    path.write_text(ASKING.format(url=llm.base_url, depth=2))
    engine = build_engine(load_settings(path, {"AGENTIK_STORE": "memory://"}))
    await engine.start()
    try:
        llm.enqueue(
            FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "outer"})]),
            FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "inner"})]),
            FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "1+1"}, id="c-1")]),
        )
        events = await _events(engine, "deep", "start")
        ended = events[-1].body
        assert isinstance(ended, ev.RunFinished) and ended.outcome is ev.Outcome.INTERRUPT
        [asked] = ended.interrupts
        again = FakeToolCall("agent__researcher", {"message": "on"}, id="c-2")
        llm.enqueue(FakeReply(tool_calls=[again]))
        before = len(llm.requests)
        yes = ResumeEntry(asked.id, ResumeStatus.RESOLVED, {"approved": True})
        events = await _follow_run(engine, _resume("deep", yes))
        assert isinstance(events[-1].body, ev.RunFinished)
        refused = llm.requests[before + 1]["messages"][-1]
        assert (refused["role"], refused["tool_call_id"]) == ("tool", "c-2")
        assert (
            "delegation is too deep: researcher -> researcher -> researcher" in (refused["content"])
        )
    finally:
        await engine.shutdown(1.0)
