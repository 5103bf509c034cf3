"""Several agents over gRPC (issue 23): CreateSession/Run name an agent, sessions show it,
ListAgents and GetAgent describe the agents without endpoints or secrets, and an unknown
agent is INVALID_ARGUMENT ``agent_not_found``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from agentik.config import load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.delegating import delegating_settings
from tests.engine.auth_helpers import rpc_error, trailers
from tests.engine.harness import Harness, collect, kinds, running_engine, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

CONFIG = """
[llm]
base_url = "{url}"
api_key = "top-secret-key"
max_retries = 0
system_prompt = "You are the default."

[[agents]]
name = "support"
description = "Answers customers"
model = "small-model"
system_prompt = "You support customers."
tools = ["calculate"]

[[agents]]
name = "researcher"
model = "big-model"
base_url = "{url}"
api_key = "researcher-secret"
system_prompt = "You research."
tools = ["current_time"]
"""


@pytest.fixture
async def engine(llm: FakeOpenAI, tmp_path: Path) -> AsyncIterator[Harness]:
    path = tmp_path / "agentik.toml"
    path.write_text(CONFIG.format(url=llm.base_url))
    settings = load_settings(
        path, {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://"}
    )
    async with running_engine(settings) as running:
        yield running


async def test_each_agent_answers_with_its_own_model_prompt_and_tools(
    engine: Harness, llm: FakeOpenAI
) -> None:
    support = await engine.stub.CreateSession(pb.CreateSessionRequest(agent="support"))
    assert support.agent == "support"
    events = await collect(
        engine.stub.Run(pb.RunRequest(session_id=support.id, messages=[user("hi")]))
    )
    assert kinds(events)[-1] == "run_finished"
    events = await collect(
        engine.stub.Run(
            pb.RunRequest(
                session_id="r1", messages=[user("hi")], create_session=True, agent="researcher"
            )
        )
    )
    assert kinds(events)[-1] == "run_finished"
    first, second = llm.requests
    assert (first["model"], first["messages"][0]["content"]) == (
        "small-model",
        "You support customers.",
    )
    assert [t["function"]["name"] for t in first["tools"]] == ["calculate"]
    assert (second["model"], second["messages"][0]["content"]) == ("big-model", "You research.")
    assert [t["function"]["name"] for t in second["tools"]] == ["current_time"]
    got = await engine.stub.GetSession(pb.GetSessionRequest(session_id="r1"))
    assert got.agent == "researcher"
    listed = await engine.stub.ListSessions(pb.ListSessionsRequest())
    assert sorted(s.agent for s in listed.sessions) == ["researcher", "support"]


async def test_a_session_without_an_agent_is_the_default_agents(engine: Harness) -> None:
    made = await engine.stub.CreateSession(pb.CreateSessionRequest())
    assert made.agent == "agentik"  # [agent] name's default: the top-level settings


async def test_an_unknown_agent_is_invalid_argument_agent_not_found(engine: Harness) -> None:
    for call in (
        engine.stub.CreateSession(pb.CreateSessionRequest(agent="nobody")),
        engine.stub.GetAgent(pb.GetAgentRequest(name="nobody")),
    ):
        error = await rpc_error(call)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert trailers(error)["agentik-error"] == "agent_not_found"
        assert "'nobody'" in (error.details() or "")
    run = engine.stub.Run(
        pb.RunRequest(session_id="x", messages=[user("hi")], create_session=True, agent="nobody")
    )
    error = await rpc_error(run.read())
    assert trailers(error)["agentik-error"] == "agent_not_found"
    missing = await rpc_error(engine.stub.GetAgent(pb.GetAgentRequest()))
    assert missing.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_another_agent_for_an_existing_session_is_refused(engine: Harness) -> None:
    made = await engine.stub.CreateSession(pb.CreateSessionRequest(agent="support"))
    run = engine.stub.Run(
        pb.RunRequest(session_id=made.id, messages=[user("hi")], agent="researcher")
    )
    error = await rpc_error(run.read())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "belongs to agent 'support'" in (error.details() or "")
    again = await engine.stub.GetSession(pb.GetSessionRequest(session_id=made.id))
    assert (again.agent, again.active_run_id) == ("support", "")


async def test_list_and_get_agents_name_models_and_tools_but_no_secrets(
    engine: Harness, llm: FakeOpenAI
) -> None:
    listed = await engine.stub.ListAgents(pb.ListAgentsRequest())
    assert [(a.name, a.is_default) for a in listed.agents] == [
        ("agentik", True),
        ("support", False),
        ("researcher", False),
    ]
    support = await engine.stub.GetAgent(pb.GetAgentRequest(name="support"))
    assert (support.description, support.model, list(support.tools)) == (
        "Answers customers",
        "openai:small-model",
        ["calculate"],
    )
    assert "calculate" in listed.agents[0].tools and "current_time" in listed.agents[0].tools
    text = str(listed)
    for secret in ("top-secret-key", "researcher-secret", llm.base_url, "127.0.0.1"):
        assert secret not in text


async def test_sessions_and_run_chains_are_listed_by_agent(engine: Harness) -> None:
    """``ListSessions.agent``, ``ListRuns.agent`` and ``ListRunChains.agent`` (an A2A
    agent's own tasks): only that agent's conversations; the default agent's include
    those made without a name."""
    made = {}
    for agent in ("support", "researcher", ""):
        session = await engine.stub.CreateSession(pb.CreateSessionRequest(agent=agent))
        events = await collect(
            engine.stub.Run(pb.RunRequest(session_id=session.id, messages=[user("hi")]))
        )
        assert kinds(events)[-1] == "run_finished"
        made[agent or "agentik"] = session.id
    for agent, session_id in made.items():
        sessions = await engine.stub.ListSessions(pb.ListSessionsRequest(agent=agent))
        assert ([s.id for s in sessions.sessions], sessions.total) == ([session_id], 1)
        chains = await engine.stub.ListRunChains(pb.ListRunChainsRequest(agent=agent))
        assert [c.runs[0].session_id for c in chains.chains] == [session_id]
        assert chains.total == 1
        runs = await engine.stub.ListRuns(pb.ListRunsRequest(agent=agent))
        assert ([r.session_id for r in runs.runs], runs.total) == ([session_id], 1)
        other = await engine.stub.ListRunChains(
            pb.ListRunChainsRequest(agent=agent, session_id=made["support"])
        )
        assert len(other.chains) == (1 if agent == "support" else 0)
    everything = await engine.stub.ListRunChains(pb.ListRunChainsRequest())
    assert everything.total == 3
    assert (await engine.stub.ListRuns(pb.ListRunsRequest())).total == 3
    for call in (
        engine.stub.ListSessions(pb.ListSessionsRequest(agent="nobody")),
        engine.stub.ListRuns(pb.ListRunsRequest(agent="nobody")),
        engine.stub.ListRunChains(pb.ListRunChainsRequest(agent="nobody")),
    ):
        error = await rpc_error(call)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert trailers(error)["agentik-error"] == "agent_not_found"


async def test_a_sub_agents_approval_is_answered_over_grpc_on_the_parents_run(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """``lead`` delegates to ``researcher``, whose ``calculate`` waits for a person: the
    lead's Run stream ends asking for it (the researcher's question, with where it comes
    from), a Run with a resume entry on the lead's conversation answers it, and the
    researcher's call runs then, once; an entry without a yes is refused, never run."""
    settings = delegating_settings(tmp_path, llm.base_url)
    llm.enqueue(
        FakeReply(tool_calls=[FakeToolCall("agent__researcher", {"message": "compute"})]),
        FakeReply(tool_calls=[FakeToolCall("calculate", {"expression": "6*7"})]),
    )
    async with running_engine(settings) as engine:
        asked = await collect(
            engine.stub.Run(
                pb.RunRequest(
                    session_id="lead-1",
                    messages=[user("compute 6*7")],
                    create_session=True,
                    agent="lead",
                )
            )
        )
        ended = asked[-1].run_finished
        assert ended.outcome == pb.OUTCOME_TYPE_INTERRUPT
        [interrupt] = ended.interrupts
        assert interrupt.kind == pb.INTERRUPT_KIND_APPROVAL
        assert interrupt.tool_call.name == "agent__researcher"
        payload = json_format.MessageToDict(interrupt.payload)
        assert (payload["tool"], payload["arguments"]) == ("calculate", {"expression": "6*7"})
        assert payload["delegation"]["agent"] == "researcher"
        assert "approved" in json_format.MessageToDict(interrupt.response_schema)["properties"]
        session = await engine.stub.GetSession(pb.GetSessionRequest(session_id="lead-1"))
        assert [i.id for i in session.pending_interrupts] == [interrupt.id]

        empty = pb.ResumeEntry(interrupt_id=interrupt.id, status=pb.RESUME_STATUS_RESOLVED)
        refused = await rpc_error(
            engine.stub.Run(pb.RunRequest(session_id="lead-1", resume=[empty])).read()
        )
        assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "resume[0].payload is missing" in (refused.details() or "")

        yes = pb.ResumeEntry(
            interrupt_id=interrupt.id,
            status=pb.RESUME_STATUS_RESOLVED,
            payload=struct_pb2.Value(bool_value=True),
        )
        done = await collect(engine.stub.Run(pb.RunRequest(session_id="lead-1", resume=[yes])))
        assert done[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        [result] = [e.tool_call_result for e in done if e.HasField("tool_call_result")]
        answer = json.loads(result.content)
        assert '"result": 42' in answer["answer"]
        child = await engine.stub.ListMessages(
            pb.ListMessagesRequest(session_id=payload["delegation"]["conversationId"])
        )
        ran = [m for m in child.messages if m.role == pb.ROLE_TOOL]
        assert len(ran) == 1 and '"result": 42' in ran[0].content[0].text.text
