"""One agentik calls another through A2A: instance B (engine + gunicorn, ``AGENTIK_A2A_AGENTS``
naming A) offers A as a tool, and its LLM calls it; instance A is a whole stack of its own,
each with its own fake LLM. Everything goes over real HTTP between real processes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import collect, engine_settings, kind, running_engine, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.web.e2e.conftest import WAIT, SseStream, Stack, checked, has, types, wait_for
from tests.web.sse_frames import Frame

pytestmark = [pytest.mark.processes]


@pytest.fixture(scope="module")
def llm_a() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def llm_b() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack_a(llm_a: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm_a, tmp_path_factory.mktemp("peer-a"), AGENTIK_TOOLS_ASK_USER="true")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def stack_b(
    llm_b: FakeOpenAI, stack_a: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    running = Stack(
        llm_b,
        tmp_path_factory.mktemp("peer-b"),
        # The same agent twice: by its A2A 1.0 card, and by its legacy 0.3 card's URL.
        AGENTIK_A2A_AGENTS=f"peer={stack_a.base_url}/,peer03={stack_a.base_url}"
        "/.well-known/agent.json",
        AGENTIK_TOOL_TIMEOUT="30",
    )
    for name in ("peer", "peer03"):
        running.engine.wait_for_log(re.compile(rf"A2A agent '{name}' (ready)"))
    yield running
    running.stop()


@pytest.fixture
def a(stack_a: Stack) -> Iterator[httpx.Client]:
    with stack_a.client() as client:
        yield client


@pytest.fixture
def b(stack_b: Stack) -> Iterator[httpx.Client]:
    with stack_b.client() as client:
        yield client


def _new(http: httpx.Client) -> str:
    conversation_id: str = checked(http.post("/agentik/conversations", json={})).json()["id"]
    return conversation_id


def _send(http: httpx.Client, conversation_id: str, text: str) -> SseStream:
    path = f"/agentik/conversations/{conversation_id}/send"
    return SseStream(http, "POST", path, json={"text": text})


def _text(events: list[Frame]) -> str:
    return "".join(f.data["text"] for f in events if f.type == "append_text")  # type: ignore[index]


def _results(events: list[Frame]) -> list[dict[str, Any]]:
    return [f.data for f in events if f.type == "tool_call_result"]  # type: ignore[misc]


def _ask_peer(message: str, agent: str = "peer") -> str:
    return f'[[tool:{agent} {{"message": "{message}"}}]]'


def _peer_conversations(a: httpx.Client) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = checked(a.get("/agentik/conversations")).json()["items"]
    return [c for c in items if c["id"].startswith("agentik-")]


def test_a_turn_on_b_calls_a_through_a2a_and_answers_with_a_reply(
    b: httpx.Client, a: httpx.Client, llm_b: FakeOpenAI
) -> None:
    conversation = _new(b)
    stream = _send(b, conversation, _ask_peer("hello from B"))
    events = stream.read_to_end()
    stream.close()

    [result] = _results(events)
    assert result["content"] == "Echo: hello from B" and not result.get("is_error")
    assert _text(events) == "Result: Echo: hello from B"
    assert events[-1].data["outcome"] == "success"  # type: ignore[index]
    offered = {t["function"]["name"]: t["function"] for t in llm_b.requests[-2]["tools"]}
    assert "agentik" in offered["peer"]["description"]  # A's card, read by B's engine
    assert offered["peer"]["parameters"]["required"] == ["message"]
    # On A, B's conversation is one A2A context holding B's message and A's answer.
    [remote] = [c for c in _peer_conversations(a) if c["count"] == 2]
    messages = checked(a.get(f"/agentik/conversations/{remote['id']}/messages")).json()["items"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[0]["content"][0]["text"] == "hello from B"


def test_an_agent_known_by_its_a2a_0_3_card_is_called_in_that_dialect(
    b: httpx.Client, stack_b: Stack
) -> None:
    stream = _send(b, _new(b), _ask_peer("hello in 0.3", agent="peer03"))
    events = stream.read_to_end()
    stream.close()
    [result] = _results(events)
    assert result["content"] == "Echo: hello in 0.3" and not result["is_error"]
    assert "A2A agent 'peer03' ready: 'agentik', 1 skills" in stack_b.engine.log()


def test_a_follow_up_in_the_same_conversation_reaches_the_same_remote_context(
    b: httpx.Client, a: httpx.Client, llm_a: FakeOpenAI
) -> None:
    conversation = _new(b)
    for text in ("first question", "second question"):
        stream = _send(b, conversation, _ask_peer(text))
        stream.read_to_end()
        stream.close()
    # A's LLM saw the first exchange as history when answering the second.
    last = llm_a.requests[-1]["messages"]
    said = [m["content"] for m in last if m["role"] == "user"]
    assert said == ["first question", "second question"]

    other = _new(b)
    stream = _send(b, other, _ask_peer("a stranger's question"))
    stream.read_to_end()
    stream.close()
    said = [m["content"] for m in llm_a.requests[-1]["messages"] if m["role"] == "user"]
    assert said == ["a stranger's question"]  # another conversation: another remote context


def test_interrupting_bs_run_cancels_as_task(
    b: httpx.Client, a: httpx.Client, llm_a: FakeOpenAI
) -> None:
    llm_a.enqueue(FakeReply(text="a very long answer that never ends", hang_after=2))
    before = {c["id"] for c in _peer_conversations(a)}
    conversation = _new(b)
    stream = _send(b, conversation, _ask_peer("take your time"))
    stream.read_until(has("tool_call_start"))

    def a_is_working() -> bool:
        fresh = [c for c in _peer_conversations(a) if c["id"] not in before]
        return bool(fresh) and fresh[0]["active_run_id"] is not None

    wait_for(a_is_working, "A to work on B's question")
    [remote] = [c for c in _peer_conversations(a) if c["id"] not in before]
    reply = checked(b.post(f"/agentik/conversations/{conversation}/interrupt"))
    assert reply.json()["interrupted"] is True
    events = stream.read_to_end()
    stream.close()
    assert types(events)[-1] == "interrupted"
    [cut] = _results(events)  # the call was cut, not answered
    assert cut["is_error"] and cut["content"] == "error: interrupted before the tool finished"

    # B cancelled A's task: A's run stopped, and its LLM stream was closed.
    assert llm_a.wait_connection_closed(WAIT)

    def a_is_idle() -> bool:
        state = checked(a.get(f"/agentik/conversations/{remote['id']}")).json()
        return state["active_run_id"] is None

    wait_for(a_is_idle, "A's run to end")
    messages = checked(a.get(f"/agentik/conversations/{remote['id']}/messages")).json()["items"]
    assert messages[-1]["status"] == "interrupted"  # A kept what it had said


async def test_a_question_the_agent_asked_before_a_restart_is_answered_after_it(
    stack_a: Stack, llm_a: FakeOpenAI, llm_b: FakeOpenAI, tmp_path: Path
) -> None:
    # B runs in this process on a SQLite file, twice: the second engine knows nothing of
    # what the first remembered in memory (A's task waiting for an answer).
    settings = engine_settings(
        AGENTIK_STORE=f"sqlite:///{tmp_path / 'b.db'}",
        OPENAI_BASE_URL=llm_b.base_url,
        OPENAI_API_KEY="k",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_A2A_AGENTS=f"peer={stack_a.base_url}/",
    )

    async def turn(text: str, to_peer: str, *, create: bool) -> pb.ToolCallResult:
        llm_b.enqueue(FakeReply(tool_calls=[FakeToolCall("peer", {"message": to_peer})]))
        async with running_engine(settings) as harness:
            await harness.server.a2a["peer"].wait_ready(within=WAIT)
            request = pb.RunRequest(
                session_id="fence", create_session=create, messages=[user(text)]
            )
            events = await collect(harness.stub.Run(request))
        [result] = [e.tool_call_result for e in events if kind(e) == "tool_call_result"]
        return result

    llm_a.enqueue(FakeReply(tool_calls=[FakeToolCall("ask_user", {"question": "Which colour?"})]))
    asked = await turn("paint my fence", "paint my fence", create=True)
    assert not asked.is_error
    assert asked.content.startswith(
        "The agent 'peer' needs more input before it can finish: Which colour?"
    )
    answered = await turn("teal, please", "teal", create=False)
    assert not answered.is_error, answered.content
    assert "teal" in answered.content and answered.content.startswith("Result: ")
