"""The agent on the other end of an A2A tool call dies (kill -9 of its web processes) while
our run waits for it: the call is a tool error, our turn ends normally with nothing lost or
repeated, the conversation is free, and once the agent is back the next call reaches it
without restarting anything on our side (first cancelling the task the cut call left running
there, which would keep that remote context busy)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI, FakeReply
from tests.faults.conftest import SIGNAL_MARKS, WITHIN, new_conversation
from tests.faults.ledger import Ledger, audit, follow, poll, send_request, store_view
from tests.faults.procs import NEEDS_PROCFS, worker_pids
from tests.web.e2e.conftest import Stack

pytestmark = [*SIGNAL_MARKS, pytest.mark.procfs, NEEDS_PROCFS]


@pytest.fixture(scope="module")
def llm_a() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack_a(llm_a: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm_a, tmp_path_factory.mktemp("remote"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def stack(
    llm: FakeOpenAI, stack_a: Stack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("caller")
    running = Stack(
        llm,
        logs,
        AGENTIK_STORE=f"sqlite:///{logs / 'store.db'}",
        AGENTIK_A2A_AGENTS=f"peer={stack_a.base_url}/",
    )
    running.engine.wait_for_log(re.compile(r"A2A agent 'peer' (ready)"))
    yield running
    running.stop()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=WITHIN) as client:
        yield client


def _kill_web(remote: Stack) -> None:
    """kill -9 the remote's gunicorn master and every worker: its connections drop."""
    master = remote.web.popen.pid
    for pid in [*worker_pids(master), master]:
        os.kill(pid, signal.SIGKILL)
    remote.web.popen.wait(WITHIN)
    remote.web.stop()  # closes the log; the process is already gone


async def test_a_remote_agent_killed_mid_call_is_a_tool_error_and_our_turn_loses_nothing(
    stack: Stack, stack_a: Stack, http: httpx.AsyncClient, llm_a: FakeOpenAI
) -> None:
    llm_a.enqueue(FakeReply(text="a long answer that hangs here", hang_after=2))
    asked = len(llm_a.requests)
    conversation_id = await new_conversation(http)
    text = '[[tool:peer {"message": "are you there?"}]]'
    ledger = Ledger(conversation_id)
    turn = asyncio.create_task(follow(http, ledger, send_request(conversation_id, text), WITHIN))
    try:
        await poll(lambda: len(llm_a.requests) > asked, "the remote agent to be working", WITHIN)
        await asyncio.to_thread(_kill_web, stack_a)
        assert await turn
    finally:
        turn.cancel()

    [result] = [f.data for f in ledger.frames if f.type == "tool_call_result"]
    assert result is not None and result["is_error"]
    assert result["content"] == "error: the agent 'peer' is unreachable"
    assert ledger.frames[-1].type == "end"
    assert ledger.text() == "Result: error: the agent 'peer' is unreachable"
    view = await store_view(http, f"127.0.0.1:{stack.grpc_port}", conversation_id, WITHIN)
    checked = audit([("send", ledger)], {conversation_id: view})
    assert checked.lost_count == 0 and checked.duplicated_count == 0, str(checked)
    assert checked.clean(), str(checked)

    # The agent comes back on its address: the same engine, no restart here, reaches it.
    stack_a.web = stack_a.start_web()
    again = Ledger(conversation_id)
    follow_up = send_request(conversation_id, '[[tool:peer {"message": "and now?"}]]')
    assert await follow(http, again, follow_up, WITHIN)
    [answered] = [f.data for f in again.frames if f.type == "tool_call_result"]
    assert answered is not None
    assert not answered["is_error"], answered["content"]
    assert answered["content"] == "Echo: and now?"
    view = await store_view(http, f"127.0.0.1:{stack.grpc_port}", conversation_id, WITHIN)
    both = Ledger(conversation_id, ledger.frames + again.frames)
    checked = audit([("both turns", both)], {conversation_id: view})
    assert checked.clean(), str(checked)
