"""Review of remote A2A agents as tools: a hostile remote agent and a clumsy caller.

A real engine over gRPC, the fake LLM scripting the tool calls, and either a hostile agent
(tests/fakes/hostile_a2a.py: a valid card, then misbehaviour chosen by the message's first
word) or the a2a-sdk agent (tests/fakes/a2a_sdk_agent.py). Every error path checks that our
run's stream never names the agent's address (tool results and events reach clients), and
that the next ordinary call in the same conversation still works.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.protobuf import json_format

from agentik.config import A2aAgentConfig, Settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.tool import session_key
from engine_service.tools.a2a.tool import (
    MAX_PROGRESS_CHARS,
    MAX_RESULT_CHARS,
    PROGRESS_EVERY,
    A2aAgentSource,
    AgentState,
    context_id_for,
)
from tests.engine.auth_helpers import TOKENS_ENV, as_
from tests.engine.harness import (
    Harness,
    collect,
    engine_settings,
    kind,
    kinds,
    next_event,
    running_engine,
    text_of,
)
from tests.engine.harness import user as user_message
from tests.fakes.a2a_sdk_agent_process import SdkAgent
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.fakes.hostile_a2a import HostileAgent

WAIT = 15.0
"""Upper bound of every wait here (2 busy cores)."""
NAME = "hostile"
SECRET = "Bearer review-Tk-7Qm2Xv"
_LLM_ENV = {"OPENAI_API_KEY": "k", "AGENTIK_LLM_MAX_RETRIES": "0"}


# -- fixtures and helpers ---------------------------------------------------------------


@pytest.fixture
def hostile() -> Iterator[HostileAgent]:
    with HostileAgent() as agent:
        yield agent


@pytest.fixture
def elsewhere() -> Iterator[HostileAgent]:
    """A second server (another origin: its own port) that must never be called."""
    with HostileAgent() as agent:
        yield agent


def _settings(llm: FakeOpenAI, *agents: A2aAgentConfig, **env: str) -> Settings:
    settings = engine_settings(OPENAI_BASE_URL=llm.base_url, **_LLM_ENV, **env)
    return dataclasses.replace(settings, a2a=dataclasses.replace(settings.a2a, agents=agents))


def _agent(server: HostileAgent, **options: Any) -> A2aAgentConfig:
    return A2aAgentConfig(NAME, server.url, **options)


def _run(session_id: str, text: str = "go") -> pb.RunRequest:
    return pb.RunRequest(session_id=session_id, create_session=True, messages=[user_message(text)])


def _call(message: str, call_id: str) -> FakeReply:
    return FakeReply(tool_calls=[FakeToolCall(NAME, {"message": message}, id=call_id)])


def _results(events: list[pb.Event]) -> list[pb.ToolCallResult]:
    return [e.tool_call_result for e in events if kind(e) == "tool_call_result"]


def _result(events: list[pb.Event]) -> pb.ToolCallResult:
    [result] = _results(events)
    return result


def _progress(events: list[pb.Event]) -> list[dict[str, Any]]:
    return [
        json_format.MessageToDict(e.custom.value)
        for e in events
        if kind(e) == "custom" and e.custom.name == "tool_progress"
    ]


def _assert_hidden(events: list[pb.Event], *servers: HostileAgent | SdkAgent | int) -> None:
    """No event names a server's URL, host or port."""
    shown = "\n".join(json_format.MessageToJson(e) for e in events)
    assert "127.0.0.1" not in shown and "localhost" not in shown
    for server in servers:
        port = server if isinstance(server, int) else int(server.url.rsplit(":", 1)[1])
        assert f":{port}" not in shown and f"{port}/" not in shown, shown[:2000]


def _finished(events: list[pb.Event]) -> None:
    assert kinds(events)[-1] == "run_finished", kinds(events)
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS, events[-1]


async def _ready(harness: Harness) -> A2aAgentSource:
    source = harness.server.a2a[NAME]
    await source.wait_ready(within=WAIT)
    return source


async def _settled(harness: Harness) -> A2aAgentSource:
    source = harness.server.a2a[NAME]
    await source.wait_until(lambda s: s.attempts >= 1, within=WAIT)
    return source


async def _context_of(harness: Harness, session_id: str, agent: str = NAME) -> str:
    session = await harness.engine.store.get_session(session_id)
    return context_id_for(agent, session_key(session_id, session.owner, session.created_at))


async def _until(predicate: Callable[[], bool], within: float = WAIT) -> bool:
    """Whether ``predicate`` holds within ``within`` seconds (polled)."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def _still_works(
    harness: Harness, llm: FakeOpenAI, server: HostileAgent, session_id: str
) -> None:
    """An ordinary call in the same conversation answers normally."""
    llm.enqueue(_call("hello again", f"again-{session_id}"))
    events = await collect(harness.stub.Run(_run(session_id, "and now?")))
    _finished(events)
    context_id = await _context_of(harness, session_id)
    result = _result(events)
    assert not result.is_error, result.content
    assert result.content == f"hostile heard: hello again in {context_id}"
    assert server.calls()[-1].context_id == context_id


# -- a remote that never answers, or never stops -----------------------------------------


async def test_a_stream_that_never_sends_an_event_ends_at_the_call_timeout(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("hang", "h1"))
    async with running_engine(_settings(llm, _agent(hostile, call_timeout=1.0))) as harness:
        await _ready(harness)
        started = time.monotonic()
        events = await collect(harness.stub.Run(_run("rev-hang")))
        took = time.monotonic() - started
        # The abandoned stream is closed by us, not left open.
        assert await _until(lambda: hostile.gone >= 1), "the hanging stream was never closed"
        await _still_works(harness, llm, hostile, "rev-hang")

    _finished(events)
    result = _result(events)
    assert result.is_error
    assert result.content == (
        "error: the agent 'hostile' did not finish within 1 s; its task could not be cancelled"
    )
    assert 1.0 <= took < 1.0 + 2.0 + 3.0  # the timeout, the wait to learn the task id, slack
    assert hostile.cancelled() == []
    _assert_hidden(events, hostile)


async def test_a_task_that_hangs_is_cancelled_at_the_call_timeout(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("hang-task", "ht1"))
    async with running_engine(_settings(llm, _agent(hostile, call_timeout=1.0))) as harness:
        await _ready(harness)
        started = time.monotonic()
        events = await collect(harness.stub.Run(_run("rev-hang-task")))
        took = time.monotonic() - started
        await _still_works(harness, llm, hostile, "rev-hang-task")

    _finished(events)
    result = _result(events)
    assert result.content == (
        "error: the agent 'hostile' did not finish within 1 s; its task was cancelled"
    )
    assert 1.0 <= took < 5.0
    assert hostile.cancelled() == ["hostile-task-1"]
    _assert_hidden(events, hostile)


async def test_a_flood_of_status_updates_is_throttled_and_clipped(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("flood 3000 5000", "f1"))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        started = time.monotonic()
        events = await collect(harness.stub.Run(_run("rev-flood")))
        took = time.monotonic() - started
        await _still_works(harness, llm, hostile, "rev-flood")

    _finished(events)
    assert _result(events).content == "flood done"
    progress = _progress(events)
    assert 1 <= len(progress) <= took / PROGRESS_EVERY + 2, (len(progress), took)
    assert len(events) < 100 + len(progress)
    assert all(len(p["message"]) <= MAX_PROGRESS_CHARS for p in progress)
    assert progress[0]["message"] == "f" * (MAX_PROGRESS_CHARS - 1) + "…"
    assert [p["progress"] for p in progress] == list(range(1, len(progress) + 1))


async def test_interrupting_during_a_flood_ends_the_stream_at_once_and_cancels_the_task(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("flood-forever", "ff1"))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        run = harness.stub.Run(_run("rev-flood-forever"))
        seen = [await next_event(run)]
        while kind(seen[-1]) != "custom":
            seen.append(await next_event(run))
        started = time.monotonic()
        reply = await harness.stub.Interrupt(pb.InterruptRequest(session_id="rev-flood-forever"))
        events = seen + await collect(run)
        ended_after = time.monotonic() - started
        assert await _until(lambda: hostile.cancelled() == ["hostile-task-1"]), hostile.calls()
        assert await _until(lambda: hostile.gone >= 1), "the flood's stream was never closed"
        await _still_works(harness, llm, hostile, "rev-flood-forever")

    assert reply.interrupted
    assert ended_after < 2.0
    assert events[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    result = _result(events)
    assert result.tool_call_id == "ff1" and result.is_error
    after_result = kinds(events)[kinds(events).index("tool_call_result") :]
    assert "custom" not in after_result
    assert len(_progress(events)) <= ended_after / PROGRESS_EVERY + 30
    _assert_hidden(events, hostile)


async def test_a_remote_that_ignores_the_cancel_and_keeps_talking_is_left_behind(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("chatter", "ch1"))
    async with running_engine(_settings(llm, _agent(hostile, call_timeout=1.0))) as harness:
        await _ready(harness)
        started = time.monotonic()
        events = await collect(harness.stub.Run(_run("rev-chatter")))
        took = time.monotonic() - started
        assert await _until(lambda: hostile.gone >= 1), "the chatty stream was never closed"
        await _still_works(harness, llm, hostile, "rev-chatter")

    _finished(events)
    result = _result(events)
    assert result.content == (
        "error: the agent 'hostile' did not finish within 1 s; its task was cancelled"
    )
    assert took < 5.0
    assert hostile.cancelled() == ["hostile-task-1"]
    ks = kinds(events)
    assert "custom" not in ks[ks.index("tool_call_result") :], "progress after the result"
    assert 1 <= len(_progress(events)) <= 1.0 / PROGRESS_EVERY + 3


# -- answers too big ---------------------------------------------------------------------


async def test_a_gigantic_artifact_is_clipped_with_a_note(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("big 1000000", "b1"))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-big")))
        await _still_works(harness, llm, hostile, "rev-big")

    _finished(events)
    result = _result(events)
    assert not result.is_error
    assert result.content == (
        "a" * MAX_RESULT_CHARS + "\n(truncated: the answer had 1,000,000 characters)"
    )


async def test_an_answer_over_max_response_bytes_stops_the_read_and_cancels_the_task(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    # One event of 10 MB against a 64 KiB limit: the read stops at the limit (the agent sees
    # the engine leave mid-answer), the LLM reads why, and the remote task is cancelled.
    llm.enqueue(_call("big 10000000", "b1"))
    agent = _agent(hostile, max_response_bytes=64 * 1024)
    async with running_engine(_settings(llm, agent)) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-too-big")))
        assert await _until(lambda: hostile.gone >= 1), "the answer was read to its end"
        await _still_works(harness, llm, hostile, "rev-too-big")

    _finished(events)
    result = _result(events)
    assert result.is_error
    assert result.content == (
        "error: the agent 'hostile' sent an answer over 65,536 bytes "
        "([[a2a.agents]] max_response_bytes); its task was cancelled"
    )
    assert hostile.cancelled() == ["hostile-task-1"]
    _assert_hidden(events, hostile)


async def test_max_response_bytes_bounds_each_event_of_a_stream_not_the_whole_stream(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    # Twenty events of 50,000 characters: 1 MB in all, each under the 64 KiB limit.
    llm.enqueue(_call("big-chunks 20 50000", "bc1"))
    agent = _agent(hostile, max_response_bytes=64 * 1024)
    async with running_engine(_settings(llm, agent)) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-many-events")))

    _finished(events)
    result = _result(events)
    assert not result.is_error
    assert result.content.endswith("(truncated: the answer had 1,000,000 characters)")


async def test_a_gigantic_artifact_streamed_in_chunks_is_clipped_with_a_true_note(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    # Chunks past the limit are not kept, but the note counts them: the answer's length.
    llm.enqueue(_call("big-chunks 20 50000", "bc1"))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-big-chunks")))

    _finished(events)
    result = _result(events)
    assert not result.is_error
    assert result.content.startswith("b" * MAX_RESULT_CHARS + "\n(truncated: ")
    assert len(result.content) < MAX_RESULT_CHARS + 100
    assert result.content.endswith("(truncated: the answer had 1,000,000 characters)")


async def test_a_gigantic_error_message_from_the_agent_is_clipped(
    llm: FakeOpenAI, hostile: HostileAgent, caplog: pytest.LogCaptureFixture
) -> None:
    # A 300,000-character error message from a hostile agent is cut like progress (2,000).
    caplog.set_level(logging.ERROR, logger="engine_service.tools.a2a")
    llm.enqueue(_call("rpc-error 300000", "e1"))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-huge-error")))

    _finished(events)
    result = _result(events)
    assert result.is_error
    content = result.content
    assert content.startswith("error: the agent 'hostile' refused the call: eeee")
    size = len(content)
    assert size <= 2_100, f"a tool result of {size:,} characters"
    assert content.endswith("e…")


# -- garbage answers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("bad-json", "error: the agent 'hostile' sent an answer that could not be read"),
        ("http 500", "error: the agent 'hostile' answered HTTP 500"),
        ("redirect", "error: the agent 'hostile' answered HTTP 302"),
        ("html", "error: the agent 'hostile' sent an answer that could not be read"),
        ("rpc-error 20", f"error: the agent 'hostile' refused the call: {'e' * 20}"),
    ],
)
async def test_a_garbage_answer_is_an_error_result_without_the_address(
    llm: FakeOpenAI,
    hostile: HostileAgent,
    elsewhere: HostileAgent,
    message: str,
    expected: str,
) -> None:
    hostile.redirect_to = elsewhere.url
    config = _agent(hostile, headers={"Authorization": SECRET})
    llm.enqueue(_call(message, "g1"))
    async with running_engine(_settings(llm, config)) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-garbage")))
        await _still_works(harness, llm, hostile, "rev-garbage")

    _finished(events)
    result = _result(events)
    assert result.is_error
    assert result.content == expected
    assert text_of(events) == f"Result: {expected}"
    _assert_hidden(events, hostile, elsewhere)
    assert elsewhere.seen() == []  # the redirect was not followed (with the credentials)
    assert all(c.authorization == SECRET for c in hostile.calls())


async def test_a_task_cut_by_a_garbage_event_is_cancelled_by_the_next_call(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("bad-json-task", "cut1"))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-cut")))
        assert hostile.cancelled() == []
        await _still_works(harness, llm, hostile, "rev-cut")

    _finished(events)
    result = _result(events)
    assert result.is_error and result.content.startswith("error: the agent 'hostile' ")
    _assert_hidden(events, hostile)
    assert hostile.cancelled() == ["hostile-task-1"]
    calls = [(c.rpc, c.task_id or c.text) for c in hostile.calls()]
    assert calls == [
        ("SendStreamingMessage", "bad-json-task"),
        ("CancelTask", "hostile-task-1"),
        ("SendStreamingMessage", "hello again"),
    ]


# -- the card ----------------------------------------------------------------------------


@pytest.mark.parametrize("card", ["huge", "endless"])
async def test_a_card_larger_than_1_mb_leaves_the_agent_unavailable(
    llm: FakeOpenAI, card: str
) -> None:
    with HostileAgent(card=card) as server:
        async with running_engine(_settings(llm, _agent(server))) as harness:
            source = await _settled(harness)
            assert source.state is AgentState.UNAVAILABLE
            assert "is larger than 1,048,576 bytes" in source.reason
            events = await collect(harness.stub.Run(_run("rev-card-huge", "hi")))
    _finished(events)
    assert text_of(events) == "Echo: hi"
    offered = [tool["function"]["name"] for tool in llm.requests[0]["tools"]]
    assert NAME not in offered
    assert server.calls() == []


async def test_a_card_over_max_response_bytes_leaves_the_agent_unavailable_naming_it(
    llm: FakeOpenAI,
) -> None:
    with HostileAgent(card="huge") as server:
        agent = _agent(server, max_response_bytes=64 * 1024)
        async with running_engine(_settings(llm, agent)) as harness:
            source = await _settled(harness)
            assert source.state is AgentState.UNAVAILABLE
            assert source.reason == (
                f"the card at {agent.target} is larger than 65,536 bytes "
                "([[a2a.agents]] max_response_bytes)"
            )
    assert server.calls() == []


async def test_a_card_redirect_is_not_followed(llm: FakeOpenAI, elsewhere: HostileAgent) -> None:
    with HostileAgent(card="redirect", redirect_to=elsewhere.url) as server:
        config = _agent(server, headers={"Authorization": SECRET})
        async with running_engine(_settings(llm, config)) as harness:
            source = await _settled(harness)
            assert source.state is AgentState.UNAVAILABLE
            assert source.reason.startswith("HTTP 302 from ")
        assert [s.path for s in server.seen()][:1] == ["/.well-known/agent-card.json"]
    assert elsewhere.seen() == []


async def test_headers_never_reach_an_interface_on_another_origin(
    llm: FakeOpenAI, elsewhere: HostileAgent
) -> None:
    with HostileAgent(interface_urls=(f"{elsewhere.url}/",)) as server:
        config = _agent(server, headers={"Authorization": SECRET})
        llm.enqueue(_call("hello", "o1"))
        async with running_engine(_settings(llm, config)) as harness:
            source = await _settled(harness)
            assert source.state is AgentState.UNAVAILABLE
            assert "names only endpoints on another origin" in source.reason
            # The LLM calls it anyway (it knows the name from an earlier conversation).
            events = await collect(harness.stub.Run(_run("rev-foreign")))
        assert all(s.verb == "GET" and s.authorization == SECRET for s in server.seen())
    assert elsewhere.seen() == []
    _finished(events)
    assert _result(events).is_error


async def test_with_headers_only_the_cards_own_origin_is_called(
    llm: FakeOpenAI, hostile: HostileAgent, elsewhere: HostileAgent
) -> None:
    # The card names a foreign interface first (the SDK would pick it), then its own.
    hostile.interface_urls = (f"{elsewhere.url}/", f"{hostile.url}/")
    config = _agent(hostile, headers={"Authorization": SECRET}, call_timeout=1.0)
    llm.enqueue(_call("hang-task", "m1"))  # timed out: the CancelTask goes there too
    async with running_engine(_settings(llm, config)) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-mixed")))
        await _still_works(harness, llm, hostile, "rev-mixed")

    assert _result(events).content.endswith("its task was cancelled")
    assert elsewhere.seen() == []
    calls = [(c.rpc, c.authorization) for c in hostile.calls()]
    assert calls == [
        ("SendStreamingMessage", SECRET),
        ("CancelTask", SECRET),
        ("SendStreamingMessage", SECRET),
    ]


async def test_a_call_to_an_agent_that_is_not_ready_names_no_address(
    llm: FakeOpenAI, unused_port: int
) -> None:
    # The tool is not offered, but a call from the history may still name it: the answer
    # must not carry the card error, which names the agent's URL.
    down = A2aAgentConfig(NAME, f"http://127.0.0.1:{unused_port}/")
    llm.enqueue(_call("are you there?", "nr1"))
    async with running_engine(_settings(llm, down)) as harness:
        await _settled(harness)
        events = await collect(harness.stub.Run(_run("rev-not-ready")))

    _finished(events)
    result = _result(events)
    assert result.is_error
    assert result.content == (
        "error: the agent 'hostile' is not available: its card could not be read yet"
    )
    _assert_hidden(events, unused_port)


# -- a clumsy caller ---------------------------------------------------------------------


async def test_malformed_arguments_are_error_results_and_reach_no_agent(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    bad: list[str | dict[str, Any]] = [
        {},
        {"message": ""},
        {"message": "   \n"},
        {"message": 42},
        {"message": ["hang"]},
        {"message": None},
        "not json",
        "[1, 2]",
    ]
    calls = [FakeToolCall(NAME, args, id=f"bad{i}") for i, args in enumerate(bad)]
    llm.enqueue(FakeReply(tool_calls=calls))
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        await _ready(harness)
        events = await collect(harness.stub.Run(_run("rev-clumsy")))
        await _still_works(harness, llm, hostile, "rev-clumsy")

    _finished(events)
    results = _results(events)
    assert sorted(r.tool_call_id for r in results) == sorted(f"bad{i}" for i in range(len(bad)))
    assert all(r.is_error and r.content.startswith("error: ") for r in results)
    assert [c.text for c in hostile.calls()] == ["hello again"]


async def test_stopping_the_engine_during_a_call_closes_the_remote_stream(
    llm: FakeOpenAI, hostile: HostileAgent
) -> None:
    llm.enqueue(_call("chatter", "stop1"))
    config = _agent(hostile, call_timeout=60.0)
    async with running_engine(_settings(llm, config, AGENTIK_SHUTDOWN_GRACE="0.5")) as harness:
        await _ready(harness)
        run = harness.stub.Run(_run("rev-stop"))
        event = await next_event(run)
        while kind(event) != "custom":
            event = await next_event(run)
        started = time.monotonic()
    stopped_after = time.monotonic() - started
    # The grace, then the run is interrupted: the remote task is cancelled on the way out.
    assert stopped_after < 0.5 + 5.0
    assert hostile.cancelled() == ["hostile-task-1"]
    assert await _until(lambda: hostile.gone >= 1, within=5.0), "the stream outlived the engine"
    assert await _until(lambda: hostile.open_connections() == 0, within=5.0)


# -- isolation between principals ---------------------------------------------------------


async def test_principals_never_share_a_remote_context_nor_a_waiting_task(
    llm: FakeOpenAI,
) -> None:
    with SdkAgent() as agent:
        config = A2aAgentConfig(NAME, agent.url)
        settings = _settings(llm, config, AGENTIK_TOKENS=TOKENS_ENV)
        async with running_engine(settings) as harness:
            await _ready(harness)

            async def call(who: str, session_id: str, message: str, call_id: str) -> str:
                llm.enqueue(_call(message, call_id))
                run = harness.stub.Run(_run(session_id), metadata=as_(who))
                events = await collect(run)
                _finished(events)
                _assert_hidden(events, agent)
                return _result(events).content

            # Each in a conversation of their own: two contexts.
            alice_own = await call("alice", "rev-alice", "hello from alice", "i1")
            bob_own = await call("bob", "rev-bob", "hello from bob", "i2")
            alice_context = await _context_of(harness, "rev-alice")
            bob_context = await _context_of(harness, "rev-bob")
            # Alice leaves a remote task waiting for input, then deletes the conversation;
            # bob creates his own under the same id and answers "the question".
            asked = await call("alice", "rev-shared", "ask me something", "i3")
            alice_shared = await _context_of(harness, "rev-shared")
            await harness.stub.DeleteSession(
                pb.DeleteSessionRequest(session_id="rev-shared"), metadata=as_("alice")
            )
            bob_shared_answer = await call("bob", "rev-shared", "teal", "i4")
            bob_shared = await _context_of(harness, "rev-shared")
            contexts = await asyncio.wait_for(asyncio.to_thread(agent.contexts), WAIT)

    assert len({alice_context, bob_context, alice_shared, bob_shared}) == 4
    assert alice_own == f"sdk-agent heard: hello from alice (message 1 of context {alice_context})"
    assert bob_own == f"sdk-agent heard: hello from bob (message 1 of context {bob_context})"
    assert asked.startswith("The agent 'hostile' needs more input before it can finish")
    # Bob's "teal" is a new message in a new context, not the answer to alice's task.
    assert bob_shared_answer == f"sdk-agent heard: teal (message 1 of context {bob_shared})"
    assert contexts[alice_shared] == ["ask me something"]
    assert contexts[bob_shared] == ["teal"]


# -- a card that changes -------------------------------------------------------------------


async def test_a_ready_agent_that_changes_its_card_is_described_anew_and_one_that_fails_is_kept(
    llm: FakeOpenAI, hostile: HostileAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine_service.tools.a2a import tool as a2a_agents

    monkeypatch.setattr(a2a_agents, "CARD_REFRESH", 0.1)
    async with running_engine(_settings(llm, _agent(hostile))) as harness:
        source = await _ready(harness)
        assert "Breaks things" in source.tool.description
        first = source.card

        original = hostile.card_json

        def grown() -> dict[str, Any]:
            card = original()
            card["skills"].append(
                {"id": "mend", "name": "Mend", "description": "Fixes things", "tags": ["t"]}
            )
            return card

        monkeypatch.setattr(hostile, "card_json", grown)
        assert await _until(lambda: "Fixes things" in source.tool.description)
        assert source.card is not None and source.card is not first
        assert len(source.card.skills) == 2

        hostile.card = "huge"  # cannot be read any more: the last card stays, ready

        def reads() -> int:
            return len([seen for seen in hostile.seen() if seen.verb == "GET"])

        before = reads()
        assert await _until(lambda: reads() >= before + 2)
        assert source.state.value == "ready" and "Fixes things" in source.tool.description
        events = await collect(harness.stub.Run(_run("rev-card-changed", "go")))
        _finished(events)


def test_the_tasks_remembered_per_context_are_bounded() -> None:
    from engine_service.tools.a2a import tool as a2a_agents

    remembered: dict[str, str] = {}
    for number in range(a2a_agents.MAX_REMEMBERED + 5):
        a2a_agents._remember(remembered, f"context-{number}", f"task-{number}")
    assert len(remembered) == a2a_agents.MAX_REMEMBERED
    assert "context-0" not in remembered and "context-4" not in remembered
    a2a_agents._remember(remembered, "context-5", "task-again")  # refreshed: now the newest
    a2a_agents._remember(remembered, "one-more", "task-x")
    assert remembered["context-5"] == "task-again" and "context-6" not in remembered
