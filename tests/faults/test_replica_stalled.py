"""A replica stalled past its lease shows its clients only what the store holds, and stores
nothing more for the runs another replica took over.

Two engine processes on one PostgreSQL. Replica A runs every turn, with clients streaming
through it (each run's own stream and a follower) and a follower on B. A is paused with
SIGSTOP for 9 s, its listener still up, mid-answer or mid-tool; meanwhile B takes each of
its runs (the lease lapsed): with ``resume_runs`` off it closes them, stored as interrupted,
the closing events after everything A handed out; on, it resumes them and answers (ending
before A wakes, or still answering then). A is then let go with a backlog of LLM chunks to
publish (or its tools' results), and events it had not stored. Afterwards every event each
client saw is held against the store's replay: none seen that is not stored, none lost, none
seen twice, every stream ending on the stored end (issue 27, item 10). And the history holds
nothing of A's after the takeover: no second result for a call, no second answer, no message
the event log does not announce.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.engine.harness import kind, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply
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
TOOL_SECONDS = 6.0
"""How long A's tool runs: it is running when A stalls, and done (its result to store) as
soon as A wakes."""
TERMINAL = ("run_finished", "run_error")


@dataclass(frozen=True)
class Stall:
    """Where A stalls, and what B does with A's runs meanwhile."""

    name: str
    mid_tool: bool
    """Mid-call of a Python tool (else mid-answer)."""
    resume: bool
    """``resume_runs``: B resumes A's runs (else closes them)."""
    b_answering: bool = False
    """B's resumed answer is still streaming when A wakes (else B ended the run)."""
    a_whole: bool = True
    """A's whole answer reaches it while it is stopped: it wakes with all of it to publish
    and store at once (else it is still mid-answer as it wakes)."""


STALLS = [
    Stall("mid-answer as A wakes, closed by B", mid_tool=False, resume=False, a_whole=False),
    Stall("mid-answer, closed by B", mid_tool=False, resume=False),
    Stall("mid-answer, resumed and ended by B", mid_tool=False, resume=True),
    Stall("mid-answer, B still answering", mid_tool=False, resume=True, b_answering=True),
    Stall("mid-tool, closed by B", mid_tool=True, resume=False),
    Stall("mid-tool, resumed and ended by B", mid_tool=True, resume=True),
]


@pytest.fixture(params=STALLS, ids=[s.name for s in STALLS])
def stall(request: pytest.FixtureRequest) -> Stall:
    stall: Stall = request.param
    return stall


class Replicas:
    """Two engine processes on one PostgreSQL schema, each on a port of its own."""

    def __init__(self, llm: FakeOpenAI, logs: Path, store: str, stall: Stall) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "AGENTIK_CONFIG"},
            "PYTHONPATH": str(ROOT),
            "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
            "AGENTIK_STORE": store,
            "AGENTIK_LEASE_SECONDS": str(LEASE),
            "AGENTIK_RESUME_RUNS": "true" if stall.resume else "false",
            # A call cut mid-run gets an error result on resume (not a question): the run
            # goes on, and A's late result would be a second one.
            "AGENTIK_TOOLS_IN_DOUBT": "error",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "test-key",
            "AGENTIK_LLM_MAX_RETRIES": "0",
            "AGENTIK_LOG_LEVEL": "INFO",
        }
        if stall.mid_tool:
            config = logs / "tools.toml"
            config.write_text(
                '[[tools.python]]\nfunction = "tests.tools.sample_tools:slow_note"\n',
                encoding="utf-8",
            )
            self.env["AGENTIK_CONFIG"] = str(config)
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
    llm: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory, stall: Stall
) -> Iterator[Replicas]:
    running = Replicas(llm, tmp_path_factory.mktemp("stalled"), pg_url, stall)
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


async def _history(stub: Any, session_id: str) -> list[pb.Message]:
    listed = await stub.ListMessages(pb.ListMessagesRequest(session_id=session_id, limit=1000))
    return list(listed.messages)


def _history_problems(messages: list[pb.Message], stored: list[pb.Event]) -> list[str]:
    """What the stalled replica would have added to the history after the takeover: a
    second result for a call, a second answer in a row, a message no event announced."""
    problems = []
    results = Counter(m.tool_call_id for m in messages if m.role == pb.ROLE_TOOL)
    problems += [f"{n} results for call {c}" for c, n in results.items() if n > 1]
    for before, after in itertools.pairwise(messages):
        if before.role == after.role == pb.ROLE_ASSISTANT and not before.tool_calls:
            problems.append(f"a second answer in a row: {after.id}")
    announced = {e.message_stored.message.id for e in stored if kind(e) == "message_stored"}
    problems += [
        f"message {m.id} stored, never announced" for m in messages if m.id not in announced
    ]
    return problems


def _script(llm: FakeOpenAI, stall: Stall) -> None:
    """A's answers, then (resumed) B's: A's slow enough that every run is mid-answer when
    A stalls, and over in 3 s (all of it sent while A is stopped) or in 12 s (still
    coming as A wakes); B's short, or 12 s when B is still answering as A wakes."""
    if stall.mid_tool:
        return  # the turns' directives: a call, then "Result: ..." (the fake's default)
    if stall.a_whole:
        slow = FakeReply(text=[f"a{i} " for i in range(300)], delay=0.01)
    else:
        slow = FakeReply(text=[f"a{i} " for i in range(600)], delay=0.02)
    llm.enqueue(*[slow] * CONVERSATIONS)
    if stall.b_answering:
        llm.enqueue(*[FakeReply(text=[f"b{i} " for i in range(600)], delay=0.02)] * CONVERSATIONS)
    elif stall.resume:
        llm.enqueue(*[FakeReply(text="B answers in full.")] * CONVERSATIONS)


def _turn(stall: Stall, notes: Path, index: int) -> str:
    if not stall.mid_tool:
        return TURN
    args = {"path": str(notes / f"c{index}.txt"), "seconds": TOOL_SECONDS}
    return f"[[tool:slow_note {json.dumps(args)}]]"


async def test_a_replica_stalled_past_its_lease_shows_only_stored_events_and_adds_nothing(
    replicas: Replicas, stubs: list[Any], llm: FakeOpenAI, stall: Stall, tmp_path: Path
) -> None:
    a, b = stubs
    _script(llm, stall)
    asked_before = len(llm.requests)
    streams: list[Stream] = []
    readers = []
    for index in range(CONVERSATIONS):
        session_id = f"c{index}"
        await a.CreateSession(pb.CreateSessionRequest(session_id=session_id))
        run = Stream(f"{session_id}/run on A", session_id, run_only=True)
        turn = _turn(stall, tmp_path, index)
        call = a.Run(pb.RunRequest(session_id=session_id, messages=[user(turn)]))
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

    async def calling() -> bool:
        notes = [tmp_path / f"c{index}.txt" for index in range(CONVERSATIONS)]
        return all(n.exists() and n.read_text() == "start\n" for n in notes)

    if stall.mid_tool:
        await _until(calling, "every run's tool to be running on A")
    else:
        await _until(streaming, "every run to stream on A")
    replicas.pause(0)
    paused = time.monotonic()
    try:

        async def taken_by_b() -> bool:
            if stall.b_answering:  # B asked the LLM again for every run: it resumed them
                return len(llm.requests) - asked_before >= 2 * CONVERSATIONS
            for index in range(CONVERSATIONS):
                session = await b.GetSession(pb.GetSessionRequest(session_id=f"c{index}"))
                if session.active_run_id:
                    return False
            return True

        await _until(taken_by_b, "B to take A's runs over once their lease lapsed")
        # The stall itself, not a wait for anything: A's LLM chunks pile up meanwhile.
        await asyncio.sleep(max(0.0, PAUSE - (time.monotonic() - paused)))
    finally:
        replicas.resume(0)
    async with asyncio.timeout(WITHIN * 2):
        await asyncio.gather(*readers)

    problems: dict[str, dict[str, list[int]]] = {}
    histories: dict[str, list[str]] = {}
    for index in range(CONVERSATIONS):
        session_id = f"c{index}"
        stored = await _replay(b, session_id)
        run_id = stored[0].run_id
        runs = await b.ListRuns(pb.ListRunsRequest(session_id=session_id))
        # B closed each run as interrupted, or resumed it to its end.
        status = pb.RUN_STATUS_SUCCEEDED if stall.resume else pb.RUN_STATUS_INTERRUPTED
        assert [(r.id, r.status) for r in runs.runs] == [(run_id, status)]
        assert [kind(e) for e in stored].count("run_finished") == 1
        assert kind(stored[-1]) == "run_finished"
        if found := _history_problems(await _history(b, session_id), stored):
            histories[session_id] = found
        for stream in streams:
            if stream.session_id != session_id:
                continue
            audit = _audit(stream, stored, run_id)
            if stall.b_answering and stream.name.endswith(" on A"):
                # A's own streams of a run B still answers may end early (a separate
                # matter); what they did show must be stored, and shown once.
                audit = {k: v for k, v in audit.items() if k != "lost"}
            elif not (stream.events and stream.events[-1] == stored[-1]):
                audit["ended_elsewhere"] = [stream.events[-1].seq if stream.events else 0]
            if any(audit.values()):
                problems[stream.name] = audit
    counts = {name: {k: len(v) for k, v in audit.items()} for name, audit in problems.items()}
    assert not histories, histories
    assert not problems, counts
    if stall.mid_tool:  # A's calls ran once: B did not run them again
        notes = [(tmp_path / f"c{index}.txt").read_text() for index in range(CONVERSATIONS)]
        assert all(n.count("start") == 1 for n in notes), notes
