"""A replica stalled past its lease shows its clients only what the store holds.

Two engine processes on one PostgreSQL. Replica A runs every turn, with clients streaming
through it (each run's own stream and a follower) and a follower on B. A is paused with
SIGSTOP for 9 s, its listener still up; meanwhile B closes each of its runs (the lease lapsed):
stored as interrupted, the closing events after everything A handed out. A is then let go
with a backlog of LLM chunks to publish, and events it had not stored. Afterwards every
event each client saw is held against the store's replay: none seen that is not stored,
none lost, none seen twice, every stream ending on the stored end (issue 27, item 10).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.engine.harness import kind, user
from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import SIGNAL_MARKS, WITHIN
from tests.web.e2e.conftest import ENGINE_LISTENING, ROOT, Process

pytestmark = SIGNAL_MARKS

LEASE = 4.0
"""Seconds: B closes A's runs this long after A's last renewal (plus a third of it)."""
PAUSE = 9.0
"""Seconds A stays stopped (at least until B has closed its runs)."""
CONVERSATIONS = 6
TURN = "[[slow:0.02]] [[chunks:600]]"
"""About 12 s of text: every turn is mid-answer when A stalls, and still is when A wakes."""
TERMINAL = ("run_finished", "run_error")


class Replicas:
    """Two engine processes on one PostgreSQL schema, each on a port of its own."""

    def __init__(self, llm: FakeOpenAI, logs: Path, store: str) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTIK_CONFIG"},
            "PYTHONPATH": str(ROOT),
            "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
            "AGENTIK_STORE": store,
            "AGENTIK_LEASE_SECONDS": str(LEASE),
            "AGENTIK_RESUME_RUNS": "false",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "test-key",
            "AGENTIK_LLM_MAX_RETRIES": "0",
            "AGENTIK_LOG_LEVEL": "INFO",
        }
        self.engines: list[Process] = []
        self.targets: list[str] = []
        try:
            for name in ("engine-a", "engine-b"):
                engine = Process(name, [sys.executable, "-m", "engine_service"], self.env, logs)
                self.engines.append(engine)
                self.targets.append(f"127.0.0.1:{engine.wait_for_log(ENGINE_LISTENING)}")
        except BaseException:
            self.stop()
            raise

    def pause(self, index: int) -> None:
        self.engines[index].popen.send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        self.engines[index].popen.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        for index, engine in enumerate(self.engines):
            if not engine.stopped:
                self.resume(index)  # a stopped process cannot take SIGTERM
                engine.stop()


@pytest.fixture
def replicas(
    llm: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    running = Replicas(llm, tmp_path_factory.mktemp("stalled"), pg_url)
    yield running
    running.stop()


@pytest.fixture
async def stubs(replicas: Replicas) -> AsyncIterator[list[Any]]:
    channels = [grpc.aio.insecure_channel(target) for target in replicas.targets]
    try:
        yield [pb_grpc.AgentEngineStub(channel) for channel in channels]
    finally:
        for channel in channels:
            await channel.close()


@dataclass
class Stream:
    """What one client saw, in order."""

    name: str
    session_id: str
    run_only: bool
    """A run's own stream (its events only), not a follower of the whole session."""
    events: list[pb.Event] = field(default_factory=list)


async def _read(call: Any, stream: Stream) -> None:
    async with asyncio.timeout(WITHIN * 2):
        while (event := await call.read()) is not grpc.aio.EOF:
            stream.events.append(event)


async def _until(check: Any, what: str) -> None:
    """Poll ``check`` (async) until true, bounded by ``WITHIN``."""
    deadline = time.monotonic() + WITHIN
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def _replay(stub: Any, session_id: str) -> list[pb.Event]:
    call = stub.Subscribe(pb.SubscribeRequest(session_id=session_id, until_idle=True))
    stored = Stream("replay", session_id, run_only=False)
    await _read(call, stored)
    return stored.events


def _audit(stream: Stream, stored: list[pb.Event], run_id: str) -> dict[str, list[int]]:
    """Seqs the client saw that the store lacks (or holds differently), seqs it saw twice,
    and stored seqs it should have seen but did not."""
    by_seq = {e.seq: e for e in stored}
    seen = [e.seq for e in stream.events]
    expected = [e.seq for e in stored if not stream.run_only or e.run_id == run_id]
    return {
        "not_stored": [e.seq for e in stream.events if by_seq.get(e.seq) != e],
        "duplicated": sorted({s for s in seen if seen.count(s) > 1}),
        "lost": sorted(set(expected) - set(seen)),
    }


async def test_a_replica_stalled_past_its_lease_shows_its_clients_only_stored_events(
    replicas: Replicas, stubs: list[Any]
) -> None:
    a, b = stubs
    streams: list[Stream] = []
    readers = []
    for index in range(CONVERSATIONS):
        session_id = f"c{index}"
        await a.CreateSession(pb.CreateSessionRequest(session_id=session_id))
        run = Stream(f"{session_id}/run on A", session_id, run_only=True)
        call = a.Run(pb.RunRequest(session_id=session_id, messages=[user(TURN)]))
        readers.append(asyncio.create_task(_read(call, run)))
        streams.append(run)

    async def started() -> bool:
        return all(s.events for s in streams)

    await _until(started, "every run to start on A")
    for run in list(streams):
        # Followers from the session's start, while the run is in flight.
        for stub, where in ((a, "A"), (b, "B")):
            follower = Stream(f"{run.session_id}/follower on {where}", run.session_id, False)
            call = stub.Subscribe(pb.SubscribeRequest(session_id=run.session_id, until_idle=True))
            readers.append(asyncio.create_task(_read(call, follower)))
            streams.append(follower)

    async def streaming() -> bool:
        return all(len(s.events) >= 20 for s in streams)

    await _until(streaming, "every run to stream on A")
    replicas.pause(0)
    paused = time.monotonic()
    try:

        async def closed_by_b() -> bool:
            for index in range(CONVERSATIONS):
                session = await b.GetSession(pb.GetSessionRequest(session_id=f"c{index}"))
                if session.active_run_id:
                    return False
            return True

        await _until(closed_by_b, "B to close A's runs once their lease lapsed")
        # The stall itself, not a wait for anything: A's LLM chunks pile up meanwhile.
        await asyncio.sleep(max(0.0, PAUSE - (time.monotonic() - paused)))
    finally:
        replicas.resume(0)
    async with asyncio.timeout(WITHIN * 2):
        await asyncio.gather(*readers)

    problems: dict[str, dict[str, list[int]]] = {}
    for index in range(CONVERSATIONS):
        session_id = f"c{index}"
        stored = await _replay(b, session_id)
        run_id = stored[0].run_id
        runs = await b.ListRuns(pb.ListRunsRequest(session_id=session_id))
        # A stalled mid-answer in every conversation: B closed each run, as interrupted.
        assert [(r.id, r.status) for r in runs.runs] == [(run_id, pb.RUN_STATUS_INTERRUPTED)]
        assert [kind(e) for e in stored].count("run_finished") == 1
        assert kind(stored[-1]) == "run_finished"
        for stream in streams:
            if stream.session_id != session_id:
                continue
            audit = _audit(stream, stored, run_id)
            if any(audit.values()):
                problems[stream.name] = audit
            assert stream.events and stream.events[-1] == stored[-1], stream.name
    counts = {name: {k: len(v) for k, v in audit.items()} for name, audit in problems.items()}
    assert not problems, counts
