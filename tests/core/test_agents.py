"""Several agents on one engine (issue 23): each answers with its own model, prompt and
tools; a conversation keeps the agent it was created with; unknown agents are refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agentik.config import load_settings
from engine_service.build import build_engine
from engine_service.core import events as ev
from engine_service.core.agents import AgentNotFound
from engine_service.core.caller import Caller
from engine_service.core.engine import Engine
from engine_service.core.errors import InvalidInput, Overloaded
from engine_service.core.models import Message, Role, RunInput, TextPart
from tests.fakes.fake_openai import FakeOpenAI

ALICE = Caller("alice")

TWO_AGENTS = """
[llm]
base_url = "{url}"
api_key = "k"
max_retries = 0
model = "base-model"
system_prompt = "You are the default."

[agent]
name = "support"

[[agents]]
name = "support"
description = "Answers customers"
model = "small-model"
system_prompt = "You support customers."
tools = ["calculate"]

[[agents]]
name = "researcher"
description = "Finds things out"
model = "big-model"
system_prompt_file = "researcher.md"
tools = ["current_*"]
max_tool_rounds = 2
"""


def _write(tmp_path: Path, text: str, **values: str) -> Path:
    path = tmp_path / "agentik.toml"
    path.write_text(text.format(**values) if values else text)
    return path


@pytest.fixture
async def engine(llm: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Engine]:
    (tmp_path / "researcher.md").write_text("You research carefully.")
    path = _write(tmp_path, TWO_AGENTS, url=llm.base_url)
    settings = load_settings(path, {"AGENTIK_STORE": "memory://"})
    built = build_engine(settings)
    await built.start()
    try:
        yield built
    finally:
        await built.shutdown(1.0)


def _user(text: str) -> Message:
    return Message(id="", role=Role.USER, content=[TextPart(text)])


async def _run(engine: Engine, run_input: RunInput) -> list[ev.Event]:
    handle = await engine.start_run(ALICE, run_input)
    events = []
    async with asyncio.timeout(10):
        async for event in engine.run_events(handle):
            events.append(event)
    return events


def _offered(request: dict[str, Any]) -> list[str]:
    return sorted(tool["function"]["name"] for tool in request.get("tools", []))


async def test_two_agents_answer_with_their_own_model_prompt_and_tools(
    engine: Engine, llm: FakeOpenAI
) -> None:
    support = await engine.create_session(ALICE, agent="support")
    researcher = await engine.create_session(ALICE, agent="researcher")
    assert (support.agent, researcher.agent) == ("support", "researcher")
    await _run(engine, RunInput(session_id=support.id, messages=[_user("hi")]))
    await _run(engine, RunInput(session_id=researcher.id, messages=[_user("hello")]))
    first, second = llm.requests
    assert first["model"] == "small-model"
    assert first["messages"][0] == {"role": "system", "content": "You support customers."}
    assert _offered(first) == ["calculate"]
    assert second["model"] == "big-model"
    assert second["messages"][0]["content"] == "You research carefully."
    assert _offered(second) == ["current_time"]  # not the other agent's calculate


async def test_a_run_that_creates_its_session_names_the_agent(
    engine: Engine, llm: FakeOpenAI
) -> None:
    await _run(
        engine,
        RunInput(
            session_id="s-new", messages=[_user("hi")], create_session=True, agent="researcher"
        ),
    )
    assert (await engine.get_session(ALICE, "s-new")).agent == "researcher"
    assert llm.requests[-1]["model"] == "big-model"
    # Without a name: the default agent ([agent] name).
    await _run(engine, RunInput(session_id="s-def", messages=[_user("hi")], create_session=True))
    assert (await engine.get_session(ALICE, "s-def")).agent == "support"
    assert llm.requests[-1]["model"] == "small-model"


async def test_an_unknown_agent_is_refused_and_nothing_is_made(engine: Engine) -> None:
    with pytest.raises(AgentNotFound, match=r"'nobody'.*support, researcher") as caught:
        await engine.create_session(ALICE, session_id="s1", agent="nobody")
    assert caught.value.code == "agent_not_found"
    with pytest.raises(AgentNotFound):
        await engine.start_run(
            ALICE,
            RunInput(session_id="s2", messages=[_user("x")], create_session=True, agent="nobody"),
        )
    assert [s.id for s in (await engine.list_sessions(ALICE, 0, 10))[0]] == []


async def test_a_conversation_keeps_its_agent(engine: Engine, llm: FakeOpenAI) -> None:
    session = await engine.create_session(ALICE, agent="researcher")
    with pytest.raises(InvalidInput, match="belongs to agent 'researcher', not 'support'"):
        await engine.start_run(
            ALICE, RunInput(session_id=session.id, messages=[_user("x")], agent="support")
        )
    # Naming its own agent, or none, runs it as its agent.
    await _run(engine, RunInput(session_id=session.id, messages=[_user("a")], agent="researcher"))
    await _run(engine, RunInput(session_id=session.id, messages=[_user("b")]))
    assert [r["model"] for r in llm.requests] == ["big-model", "big-model"]


async def test_without_agents_the_one_agent_is_the_top_level_settings(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    settings = load_settings(
        None,
        {
            "AGENTIK_STORE": "memory://",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "k",
            "AGENTIK_SYSTEM_PROMPT": "Top level.",
        },
    )
    engine = build_engine(settings)
    assert [a.name for a in engine.agents] == ["agentik"]
    profile = engine.agents.get("")
    assert profile.model is engine.model
    assert profile.limits.system_prompt == "Top level."
    assert sorted(profile.tools.names()) == sorted(engine.tools.names())
    await engine.start()
    try:
        session = await engine.create_session(ALICE)
        assert session.agent == "agentik"
        await _run(engine, RunInput(session_id=session.id, messages=[_user("hi")]))
        assert llm.requests[0]["messages"][0]["content"] == "Top level."
    finally:
        await engine.shutdown(1.0)


async def test_an_agent_with_its_own_endpoint_sends_its_key_and_headers(tmp_path: Path) -> None:
    with FakeOpenAI() as default, FakeOpenAI(api_key="agent-key") as own:
        path = _write(
            tmp_path,
            f"""
[llm]
base_url = "{default.base_url}"
api_key = "default-key"
max_retries = 0

[[agents]]
name = "elsewhere"
base_url = "{own.base_url}"
api_key = "${{AGENT_KEY}}"
headers = {{ X-Team = "research" }}
model = "remote-model"
""",
        )
        settings = load_settings(path, {"AGENTIK_STORE": "memory://", "AGENT_KEY": "agent-key"})
        engine = build_engine(settings)
        await engine.start()
        try:
            session = await engine.create_session(ALICE, agent="elsewhere")
            events = await _run(engine, RunInput(session_id=session.id, messages=[_user("hi")]))
            assert isinstance(events[-1].body, ev.RunFinished), events[-1]
            assert own.requests[0]["model"] == "remote-model"
            assert default.requests == []
        finally:
            await engine.shutdown(1.0)


async def test_the_run_log_names_the_agent(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    session = await engine.create_session(ALICE, agent="researcher")
    with caplog.at_level(logging.INFO, logger="agentik.runs"):
        await _run(engine, RunInput(session_id=session.id, messages=[_user("hi")]))
    lines = [r.getMessage() for r in caplog.records if r.name == "agentik.runs"]
    assert any(line.startswith("run started") and "agent=researcher" in line for line in lines)
    assert any(line.startswith("run finished") and "agent=researcher" in line for line in lines)


async def test_an_agents_max_runs_bounds_its_runs_in_flight(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = _write(
        tmp_path,
        f'[llm]\nbase_url = "{llm.base_url}"\napi_key = "k"\nmax_retries = 0\n'
        '[[agents]]\nname = "busy"\nmax_runs = 1\n',
    )
    engine = build_engine(load_settings(path, {"AGENTIK_STORE": "memory://"}))
    await engine.start()
    try:
        first = await engine.create_session(ALICE, agent="busy")
        second = await engine.create_session(ALICE, agent="busy")
        handle = await engine.start_run(
            ALICE, RunInput(session_id=first.id, messages=[_user("[[hang]] wait")])
        )
        with pytest.raises(Overloaded, match="agent 'busy' is running its maximum of 1 runs"):
            await engine.start_run(ALICE, RunInput(session_id=second.id, messages=[_user("x")]))
        # Another agent is not bound by it.
        other = await engine.create_session(ALICE)
        await _run(engine, RunInput(session_id=other.id, messages=[_user("free")]))
        engine.stop_local(first.id)
        async for _ in engine.run_events(handle):
            pass
        await _run(engine, RunInput(session_id=second.id, messages=[_user("now")]))
    finally:
        await engine.shutdown(1.0)


async def test_a_run_resumed_after_its_engine_died_goes_on_as_its_own_agent(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A restarted engine resumes a cut run (``core.resume``) with the agent of its
    conversation: that agent's model and prompt, not the default agent's."""
    (tmp_path / "researcher.md").write_text("You research carefully.")
    path = _write(tmp_path, TWO_AGENTS, url=llm.base_url)
    settings = load_settings(path, {"AGENTIK_STORE": f"sqlite:///{tmp_path / 'a.db'}"})
    first = build_engine(settings)
    await first.start()
    try:  # what an engine that died mid-answer leaves: a running run, its input stored
        session = await first.create_session(ALICE, agent="researcher")
        store = first.store
        begun = await store.begin_run(
            session.id, "r1", datetime.now(UTC), create=False, reserve=64, owner="alice"
        )
        asked = Message(id="u1", role=Role.USER, content=[TextPart("dig")], run_id="r1")
        await store.append_messages(session.id, [asked])
        seq = begun.session.last_seq
        bodies: list[ev.EventBody] = [ev.RunStarted(), ev.MessageStored(asked)]
        events = [ev.Event(seq + 1 + i, 0.0, session.id, "r1", b) for i, b in enumerate(bodies)]
        await store.append_events(session.id, events)
    finally:
        await first.store.close()  # no shutdown: the run is left running, as by kill -9

    again = build_engine(settings)
    await again.start()
    try:
        async with asyncio.timeout(10):
            status = "running"
            while status == "running":
                await asyncio.sleep(0.02)
                status = (await again.store.get_run(session.id, "r1")).status.value
    finally:
        await again.shutdown(1.0)
    (request,) = llm.requests
    assert request["model"] == "big-model"
    assert request["messages"][0]["content"] == "You research carefully."
