"""Remote A2A agents as tools in whole runs: a real engine over gRPC, a fake LLM, and a real
a2a-sdk agent in a subprocess (tests/fakes/a2a_sdk_agent.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.protobuf import json_format

from agentik.cli import main
from agentik.config import A2aAgentConfig, A2aSettings, Settings, load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.tool import session_key
from engine_service.tools.a2a.tool import A2aAgentSource, AgentState, context_id_for
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    running_engine,
    text_of,
    user,
)
from tests.fakes.a2a_sdk_agent_process import SdkAgent
from tests.fakes.a2a_sdk_fixtures import SDK_TOKEN as TOKEN
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall

WAIT = 20.0
"""Upper bound for reading a card or waiting on the agent (2 busy cores, a subprocess)."""
T = TypeVar("T")
CONTEXT_ID = re.compile(r"^agentik-[0-9a-f]{32}$")
_LLM_ENV = {"OPENAI_API_KEY": "k", "AGENTIK_LLM_MAX_RETRIES": "0"}


def _settings(llm: FakeOpenAI, *agents: A2aAgentConfig) -> Settings:
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, **_LLM_ENV)
    return dataclasses.replace(settings, a2a=dataclasses.replace(settings.a2a, agents=agents))


def _run(session_id: str, text: str) -> pb.RunRequest:
    return pb.RunRequest(session_id=session_id, create_session=True, messages=[user(text)])


def _call(message: str, call_id: str) -> FakeReply:
    return FakeReply(tool_calls=[FakeToolCall("helper", {"message": message}, id=call_id)])


def _result(events: list[pb.Event]) -> pb.ToolCallResult:
    [result] = [e.tool_call_result for e in events if kind(e) == "tool_call_result"]
    return result


def _progress(events: list[pb.Event]) -> list[dict[str, Any]]:
    return [
        json_format.MessageToDict(e.custom.value)
        for e in events
        if kind(e) == "custom" and e.custom.name == "tool_progress"
    ]


async def _ready(harness: Harness, name: str = "helper") -> A2aAgentSource:
    source = harness.server.a2a[name]
    await source.wait_ready(within=WAIT)
    return source


async def _context_of(harness: Harness, session_id: str, agent_name: str = "helper") -> str:
    """The remote context id our conversation ``session_id`` must use with the agent."""
    # From the store: the gRPC Session's create_time may be a microsecond off (float).
    session = await harness.engine.store.get_session(session_id)
    return context_id_for(agent_name, session_key(session_id, session.owner, session.created_at))


async def _in_thread(function: Callable[[], T]) -> T:
    """Ask the agent's test endpoints (blocking HTTP) without blocking the event loop."""
    async with asyncio.timeout(WAIT):
        return await asyncio.to_thread(function)


async def _poll_cancelled(agent: SdkAgent, before: int, within: float = 10.0) -> list[str]:
    """The agent's cancelled task ids once there are more than ``before``, or as they are
    after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        cancelled = await _in_thread(agent.cancelled)
        if len(cancelled) > before or time.monotonic() > deadline:
            return cancelled
        await asyncio.sleep(0.05)


async def test_the_llm_calls_a_remote_agent_and_answers_with_its_reply(
    llm: FakeOpenAI, agent: SdkAgent
) -> None:
    llm.enqueue(_call("hello", "h1"))
    async with running_engine(_settings(llm, A2aAgentConfig("helper", agent.url))) as harness:
        source = await _ready(harness)
        assert source.describe() == "ready ('sdk-agent', 2 skills, streaming)"
        events = await collect(harness.stub.Run(_run("a2a-hello", "ask the helper")))
        context_id = await _context_of(harness, "a2a-hello")

    assert source.describe() == "stopped"
    assert kinds(events)[-1] == "run_finished"
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    result = _result(events)
    assert result.tool_call_id == "h1" and not result.is_error
    assert result.content == f"sdk-agent heard: hello (message 1 of context {context_id})"
    assert text_of(events) == f"Result: {result.content}"
    assert CONTEXT_ID.match(context_id)
    assert (await _in_thread(agent.contexts))[context_id] == ["hello"]

    offered = {tool["function"]["name"]: tool["function"] for tool in llm.requests[0]["tools"]}
    helper = offered["helper"]
    assert helper["description"].startswith("Ask the remote agent 'sdk-agent' and get its answer.")
    assert "- Echo: Repeats what it is told, remembering earlier messages" in helper["description"]
    assert "- Slow work: Works for up to a minute" in helper["description"]
    assert "'hello there'" in helper["description"]  # the skill's examples
    assert list(helper["parameters"]["properties"]) == ["message"]
    assert helper["parameters"]["properties"]["message"]["type"] == "string"
    assert helper["parameters"]["required"] == ["message"]

    progress = _progress(events)
    assert progress, kinds(events)
    assert progress[0] == {
        "tool_call_id": "h1",
        "progress": 1.0,
        "total": None,
        "message": "thinking about: hello",
        "agent": "helper",
        "state": "working",
    }
    ks = kinds(events)
    first_progress = next(i for i, e in enumerate(events) if kind(e) == "custom")
    assert first_progress < ks.index("tool_call_result")


async def test_one_remote_context_per_conversation(llm: FakeOpenAI, agent: SdkAgent) -> None:
    async with running_engine(_settings(llm, A2aAgentConfig("helper", agent.url))) as harness:
        await _ready(harness)
        # The fake LLM answers from its queue first: one scripted call per run.
        llm.enqueue(_call("first", "c1"))
        first = _result(await collect(harness.stub.Run(_run("a2a-ctx-a", "one"))))
        llm.enqueue(_call("second", "c2"))
        second = _result(await collect(harness.stub.Run(_run("a2a-ctx-a", "two"))))
        llm.enqueue(_call("elsewhere", "c3"))
        other = _result(await collect(harness.stub.Run(_run("a2a-ctx-b", "three"))))
        context_a = await _context_of(harness, "a2a-ctx-a")
        context_b = await _context_of(harness, "a2a-ctx-b")

    assert CONTEXT_ID.match(context_a) and CONTEXT_ID.match(context_b)
    assert context_a != context_b
    assert first.content == f"sdk-agent heard: first (message 1 of context {context_a})"
    assert second.content == f"sdk-agent heard: second (message 2 of context {context_a})"
    assert other.content == f"sdk-agent heard: elsewhere (message 1 of context {context_b})"
    contexts = await _in_thread(agent.contexts)
    assert contexts[context_a] == ["first", "second"]
    assert contexts[context_b] == ["elsewhere"]
    # The same agent and conversation always name the same context; the agent takes part.
    assert context_id_for("helper", "k") == context_id_for("helper", "k")
    assert context_id_for("helper", "k") != context_id_for("other", "k")


async def test_a_session_recreated_under_a_deleted_ones_id_gets_a_new_remote_context(
    llm: FakeOpenAI, agent: SdkAgent
) -> None:
    async with running_engine(_settings(llm, A2aAgentConfig("helper", agent.url))) as harness:
        await _ready(harness)
        llm.enqueue(_call("secret plan", "d1"))
        before = _result(await collect(harness.stub.Run(_run("a2a-reused", "one"))))
        old_context = await _context_of(harness, "a2a-reused")
        await harness.stub.DeleteSession(pb.DeleteSessionRequest(session_id="a2a-reused"))
        llm.enqueue(_call("what did I say?", "d2"))
        after = _result(await collect(harness.stub.Run(_run("a2a-reused", "two"))))
        new_context = await _context_of(harness, "a2a-reused")

    assert old_context != new_context
    assert before.content == f"sdk-agent heard: secret plan (message 1 of context {old_context})"
    assert after.content == (
        f"sdk-agent heard: what did I say? (message 1 of context {new_context})"
    )
    contexts = await _in_thread(agent.contexts)
    assert contexts[old_context] == ["secret plan"]
    assert contexts[new_context] == ["what did I say?"]


async def test_interrupting_the_run_cancels_the_remote_task(
    llm: FakeOpenAI, agent: SdkAgent
) -> None:
    llm.enqueue(_call("do something slow", "slow1"))
    cancelled_before = len(await _in_thread(agent.cancelled))
    async with running_engine(_settings(llm, A2aAgentConfig("helper", agent.url))) as harness:
        await _ready(harness)
        run = harness.stub.Run(_run("a2a-interrupt", "slowly"))
        seen = [await next_event(run)]
        while kind(seen[-1]) != "custom":
            seen.append(await next_event(run))
        started = time.monotonic()
        reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="a2a-interrupt"))
        events = seen + await collect(run)
        ended_after = time.monotonic() - started
        cancelled = await _poll_cancelled(agent, cancelled_before)

    assert reply.interrupted
    assert ended_after < 5.0  # not the agent's 60 s, nor the tool's timeout
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert _progress(seen)[-1]["message"] == "working slowly"
    assert _progress(seen)[-1]["tool_call_id"] == "slow1"
    assert len(cancelled) == cancelled_before + 1
    result = _result(events)
    assert result.tool_call_id == "slow1" and result.is_error, result
    assert "sdk-agent finished slowly" not in str(events)


async def test_a_call_past_its_timeout_is_an_error_and_the_remote_task_is_cancelled(
    llm: FakeOpenAI, agent: SdkAgent
) -> None:
    llm.enqueue(_call("something slow", "t1"))
    config = A2aAgentConfig("helper", agent.url, call_timeout=1.0)
    cancelled_before = len(await _in_thread(agent.cancelled))
    async with running_engine(_settings(llm, config)) as harness:
        await _ready(harness)
        started = time.monotonic()
        events = await collect(harness.stub.Run(_run("a2a-timeout", "slowly")))
        took = time.monotonic() - started
        cancelled = await _in_thread(agent.cancelled)

    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    result = _result(events)
    assert result.is_error
    assert result.content == (
        "error: the agent 'helper' did not finish within 1 s; its task was cancelled"
    )
    assert text_of(events) == f"Result: {result.content}"
    assert 1.0 <= took < 8.0
    # Cancelled before the result came back, not later.
    assert len(cancelled) == cancelled_before + 1


async def test_a_failed_remote_task_is_an_error_result(llm: FakeOpenAI, agent: SdkAgent) -> None:
    llm.enqueue(_call("please fail", "f1"))
    async with running_engine(_settings(llm, A2aAgentConfig("helper", agent.url))) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("a2a-fail", "try")))

    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    result = _result(events)
    assert result.is_error
    assert result.content == "error: the agent 'helper' failed: sdk-agent could not do it"
    assert [p["message"] for p in _progress(events)] == ["thinking about: please fail"]


async def test_a_question_from_the_agent_is_answered_by_the_next_call_on_the_same_task(
    llm: FakeOpenAI, agent: SdkAgent
) -> None:
    async with running_engine(_settings(llm, A2aAgentConfig("helper", agent.url))) as harness:
        await _ready(harness)
        llm.enqueue(_call("ask me something", "q1"))
        asked = await collect(harness.stub.Run(_run("a2a-ask", "start")))
        llm.enqueue(_call("teal", "q2"))
        answered = await collect(harness.stub.Run(_run("a2a-ask", "it is teal")))
        context_id = await _context_of(harness, "a2a-ask")

    question = _result(asked)
    assert not question.is_error
    assert question.content == (
        "The agent 'helper' needs more input before it can finish: Which colour?\n"
        "Call helper again with the answer to go on with the same task."
    )
    answer = _result(answered)
    assert not answer.is_error
    # Only the task waiting for input answers this way: the same remote task went on.
    assert answer.content == "sdk-agent got the answer: teal"
    assert (await _in_thread(agent.contexts))[context_id] == ["ask me something", "teal"]


async def test_an_agent_that_does_not_stream_answers_too(
    llm: FakeOpenAI, plain_agent: SdkAgent
) -> None:
    llm.enqueue(_call("no stream please", "p1"))
    config = A2aAgentConfig("helper", plain_agent.url)
    async with running_engine(_settings(llm, config)) as harness:
        source = await _ready(harness)
        assert source.describe() == "ready ('sdk-agent', 2 skills, no streaming)"
        events = await collect(harness.stub.Run(_run("a2a-plain", "hi")))
        context_id = await _context_of(harness, "a2a-plain")
    result = _result(events)
    assert not result.is_error
    assert result.content == (
        f"sdk-agent heard: no stream please (message 1 of context {context_id})"
    )
    assert text_of(events) == f"Result: {result.content}"


async def test_configured_headers_reach_the_agent(
    llm: FakeOpenAI, guarded_agent: SdkAgent, tmp_path: Path
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        "[[a2a.agents]]\n"
        'name = "helper"\n'
        f'url = "{guarded_agent.url}"\n'
        'headers = { Authorization = "Bearer ${TOK}" }\n',
        encoding="utf-8",
    )
    env = {
        "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": "memory://",
        "OPENAI_BASE_URL": llm.base_url,
        "TOK": TOKEN,
        **_LLM_ENV,
    }
    settings = load_settings(config, env)
    llm.enqueue(_call("with the token", "a1"))
    before = len(await _in_thread(guarded_agent.requests))
    async with running_engine(settings) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("a2a-token", "hi")))
        context_id = await _context_of(harness, "a2a-token")

    result = _result(events)
    assert not result.is_error, result.content
    assert result.content == (
        f"sdk-agent heard: with the token (message 1 of context {context_id})"
    )
    calls = (await _in_thread(guarded_agent.requests))[before:]
    assert calls and all(c == {"authorization": f"Bearer {TOKEN}", "path": "/"} for c in calls)


async def test_without_the_token_the_call_is_an_error_that_hides_the_address(
    llm: FakeOpenAI, guarded_agent: SdkAgent
) -> None:
    llm.enqueue(_call("let me in", "n1"))
    before = len(await _in_thread(guarded_agent.requests))
    config = A2aAgentConfig("helper", guarded_agent.url)
    async with running_engine(_settings(llm, config)) as harness:
        await _ready(harness)  # the card is public
        events = await collect(harness.stub.Run(_run("a2a-no-token", "hi")))

    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    result = _result(events)
    assert result.is_error
    assert result.content == "error: the agent 'helper' answered HTTP 401"
    shown = "\n".join(json_format.MessageToJson(e) for e in events)
    assert guarded_agent.url not in shown and "127.0.0.1" not in shown
    calls = (await _in_thread(guarded_agent.requests))[before:]
    assert calls and all(c["authorization"] is None for c in calls)
    assert ["let me in"] not in (await _in_thread(guarded_agent.contexts)).values()


async def test_an_agent_that_is_down_is_not_offered_and_is_retried(
    llm: FakeOpenAI, unused_port: int
) -> None:
    down = A2aAgentConfig("helper", f"http://127.0.0.1:{unused_port}/")
    async with running_engine(_settings(llm, down)) as harness:
        source = harness.server.a2a["helper"]
        await source.wait_until(lambda s: s.attempts >= 1, within=WAIT)
        assert source.state is AgentState.UNAVAILABLE
        status = {name: (src, st) for name, src, st in harness.engine.tools.describe()}
        assert status["helper"] == ("a2a:helper", "unavailable")
        events = await collect(harness.stub.Run(_run("a2a-down", "hello")))
        # Retried with backoff (0.5 s, then about 1 s): a second attempt comes by itself.
        await source.wait_until(lambda s: s.attempts >= 2, within=WAIT)
        assert source.state is AgentState.UNAVAILABLE
        assert source.reason.startswith(
            f"cannot reach http://127.0.0.1:{unused_port}/.well-known/agent-card.json"
        )
        assert source.describe() == f"unavailable: {source.reason}"

    assert text_of(events) == "Echo: hello"
    offered = [tool["function"]["name"] for tool in llm.requests[0]["tools"]]
    assert offered and "helper" not in offered
    assert source.card is None


def test_agentik_tools_lists_a_ready_agent_and_an_unavailable_one(
    agent: SdkAgent,
    unused_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("AGENTIK_CONFIG", raising=False)
    gone = f"http://127.0.0.1:{unused_port}/"
    monkeypatch.setenv("AGENTIK_A2A_AGENTS", f"helper={agent.url},gone={gone}")
    assert main(["tools"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines]
    assert ["helper", "a2a:helper", "ready", "-"] in rows
    assert ["gone", "a2a:gone", "unavailable", "-"] in rows
    header = lines.index(next(line for line in lines if line.startswith("A2A AGENT")))
    assert lines[header].split() == ["A2A", "AGENT", "CARD", "STATUS"]
    helper = next(line for line in lines[header:] if line.startswith("helper "))
    assert f"{agent.url}/.well-known/agent-card.json" in helper
    assert helper.endswith("ready ('sdk-agent', 2 skills, streaming)")
    down = next(line for line in lines[header:] if line.startswith("gone "))
    assert f"http://127.0.0.1:{unused_port}/.well-known/agent-card.json" in down
    assert "unavailable: cannot reach" in down


async def test_headers_go_to_another_origin_only_through_a_configured_endpoint(
    llm: FakeOpenAI, guarded_agent: SdkAgent
) -> None:
    # The card is read from "localhost" but names its endpoint on "127.0.0.1": another origin.
    port = guarded_agent.url.rsplit(":", 1)[1]
    card_url = f"http://localhost:{port}/"
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    refused = A2aAgentConfig("helper", card_url, headers=bearer)
    endpoint = A2aAgentConfig("helper", card_url, headers=bearer, endpoint=guarded_agent.url)
    before = len(await _in_thread(guarded_agent.requests))
    async with running_engine(_settings(llm, refused)) as harness:
        source = harness.server.a2a["helper"]
        await source.wait_until(lambda s: s.attempts >= 1, within=WAIT)
        assert source.state is AgentState.UNAVAILABLE
        assert "names only endpoints on another origin" in source.reason
        assert "set 'endpoint'" in source.reason
    assert len(await _in_thread(guarded_agent.requests)) == before  # no call got the token

    llm.enqueue(_call("through the endpoint", "e1"))
    async with running_engine(_settings(llm, endpoint)) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("a2a-endpoint", "hi")))
    result = _result(events)
    assert not result.is_error, result.content
    assert result.content.startswith("sdk-agent heard: through the endpoint (message 1 of")
    calls = (await _in_thread(guarded_agent.requests))[before:]
    assert calls and all(c["authorization"] == f"Bearer {TOKEN}" for c in calls)


async def test_an_agent_gone_after_its_card_was_read_is_an_error_without_its_address(
    llm: FakeOpenAI,
) -> None:
    with SdkAgent() as leaving:
        url = leaving.url
        config = A2aAgentConfig("helper", url)
        async with running_engine(_settings(llm, config)) as harness:
            await _ready(harness)
            leaving.stop()
            llm.enqueue(_call("are you there?", "g1"))
            events = await collect(harness.stub.Run(_run("a2a-gone", "hi")))

    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    result = _result(events)
    assert result.is_error
    assert result.content == "error: the agent 'helper' is unreachable"
    shown = "\n".join(json_format.MessageToJson(e) for e in events)
    assert url not in shown and "127.0.0.1" not in shown


async def test_a_call_to_an_agent_that_does_not_stream_past_its_timeout_cancels_the_task(
    llm: FakeOpenAI, plain_agent: SdkAgent
) -> None:
    # A card that says "no streaming": the message is sent to return at once and the task
    # polled, so its id is known and a timeout can cancel it.
    llm.enqueue(_call("something slow", "pt1"))
    config = A2aAgentConfig("helper", plain_agent.url, call_timeout=1.0)
    cancelled_before = len(await _in_thread(plain_agent.cancelled))
    async with running_engine(_settings(llm, config)) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("a2a-plain-timeout", "slowly")))
        cancelled = await _poll_cancelled(plain_agent, cancelled_before, within=5.0)

    result = _result(events)
    assert result.is_error
    assert result.content == (
        "error: the agent 'helper' did not finish within 1 s; its task was cancelled"
    )
    assert len(cancelled) == cancelled_before + 1, "the remote task was not cancelled"


async def test_the_offline_model_calls_a_remote_agent_named_in_the_message(
    agent: SdkAgent,
) -> None:
    settings = dataclasses.replace(
        engine_settings(), a2a=A2aSettings(agents=(A2aAgentConfig("helper", agent.url),))
    )
    async with running_engine(settings) as harness:
        assert harness.engine.model.name == "offline"
        await _ready(harness)
        named = await collect(harness.stub.Run(_run("offline-named", "tell helper about tea")))
        used = await collect(
            harness.stub.Run(_run("offline-use", 'use helper {"message": "coffee"}'))
        )

    assert _result(named).content.startswith("sdk-agent heard: tell helper about tea")
    assert _result(used).content.startswith("sdk-agent heard: coffee")
    assert text_of(used).startswith("helper returned: sdk-agent heard: coffee")
