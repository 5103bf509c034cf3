"""Faults as tests: the whole stack in real processes, hurt with real signals.

Each test module gets its own stack (the fake LLM in this process; the engine and gunicorn as
child processes) with a SQLite store file, so a test that kills or restarts part of it does
not disturb the others. Tests count lost and duplicated event ids (:mod:`tests.faults.ledger`)
and assert zero.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.ledger import Ledger, follow, poll, send_request
from tests.faults.procs import NEEDS_SIGNALS
from tests.postgres_server import pg_database, pg_url
from tests.web.e2e.conftest import ENGINE_LISTENING, Process, Stack

__all__ = [
    "SIGNAL_MARKS",
    "WITHIN",
    "http",
    "llm",
    "open_streams",
    "pg_database",
    "pg_url",
    "stack",
]

SIGNAL_MARKS = [
    pytest.mark.processes,
    pytest.mark.signals,
    pytest.mark.load,
    NEEDS_SIGNALS,
    pytest.mark.timeout(180),
]
"""The marks of a test that hurts the stack's processes with signals under load."""

WITHIN = 30.0
"""Upper bound for one stream, replay or wait in these tests, in seconds (a busy host)."""


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("faults")
    running = Stack(
        llm,
        logs,
        AGENTIK_STORE=f"sqlite:///{logs / 'store.db'}",
        # Every stream of a test must fit in one worker while the other one is down.
        AGENTIK_WEB_THREADS="96",
    )
    yield running
    running.stop()


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=stack.base_url, timeout=httpx.Timeout(WITHIN), limits=limits
    ) as client:
        yield client


async def new_conversation(http: httpx.AsyncClient) -> str:
    response = await http.post("/agentik/conversations", json={})
    assert response.status_code == 201, response.text
    conversation_id: str = response.json()["id"]
    return conversation_id


async def open_streams(
    http: httpx.AsyncClient, conversations: int, turn: str, *, mid_turn: int = 0
) -> tuple[dict[str, Ledger], list[asyncio.Task[bool]]]:
    """A ``send`` of ``turn`` and an ``/events`` follower from the start, per new conversation.

    Each runs in its own task (:func:`follow`: to the run's end, resuming after drops).
    With ``mid_turn`` it returns once every stream got that many ``append_text`` events.
    """
    ids = [await new_conversation(http) for _ in range(conversations)]
    ledgers: dict[str, Ledger] = {}
    tasks: list[asyncio.Task[bool]] = []
    for index, conversation_id in enumerate(ids):
        sender = ledgers[f"send {index}"] = Ledger(conversation_id)
        tasks.append(
            asyncio.create_task(follow(http, sender, send_request(conversation_id, turn), WITHIN))
        )
        follower = ledgers[f"follow {index}"] = Ledger(conversation_id)
        path = f"/agentik/conversations/{conversation_id}/events?after=0"
        tasks.append(asyncio.create_task(follow(http, follower, ("GET", path, None), WITHIN)))
    try:
        await poll(
            lambda: all(ledger.count("append_text") >= mid_turn for ledger in ledgers.values()),
            "every stream to be mid-turn",
            WITHIN,
        )
    except AssertionError as exc:
        for task in tasks:
            task.cancel()
        raise AssertionError(f"{exc}; {_behind(ledgers, tasks, mid_turn)}") from None
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
    return ledgers, tasks


def _behind(ledgers: dict[str, Ledger], tasks: list[asyncio.Task[bool]], mid_turn: int) -> str:
    """The streams that did not get far enough, and how each fared (for a diagnosis)."""
    lines = []
    for (name, ledger), task in zip(ledgers.items(), tasks, strict=True):
        if ledger.count("append_text") >= mid_turn:
            continue
        outcome = "running"
        if task.done() and not task.cancelled():
            error = task.exception()
            outcome = f"ended: {type(error).__name__}: {error}" if error else "ended"
        frames = [frame.type for frame in ledger.frames[-3:]]
        lines.append(
            f"{name}: {ledger.count('append_text')} texts, {len(ledger.frames)} frames, last "
            f"{frames}, {ledger.resumes} resumes, {ledger.failed_attempts} failed, {outcome}"
        )
    return f"{len(lines)} behind: " + " | ".join(lines[:10])


def restart_engine(stack: Stack) -> None:
    """kill -9 the stack's engine and start a new one on the same port and store."""
    stack.engine.stop(signal.SIGKILL)
    stack.engine = Process(
        "engine", [sys.executable, "-m", "engine_service"], stack.env, stack.logs
    )
    assert int(stack.engine.wait_for_log(ENGINE_LISTENING)) == stack.grpc_port
