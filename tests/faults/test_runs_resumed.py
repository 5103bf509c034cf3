"""Runs that outlive their process: kill -9 of the engine, and the run goes on.

One engine on a SQLite file, killed mid-answer and started again: the run keeps its id,
the cut answer is closed as ``superseded`` and asked of the LLM again, and the run ends in
success with the whole answer. A client resuming from its last id loses nothing and gets
nothing twice. A run cut mid-tool gets an in-doubt result (never a silent second call); a
run that keeps killing its engine stops after ``max_resumes``.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from google.protobuf import json_format

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.core.test_recovery import MCP_CONNECTED, EngineProcess
from tests.engine.harness import kind, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.faults.conftest import SIGNAL_MARKS, WITHIN, open_streams
from tests.faults.ledger import Ledger, audit, store_view
from tests.faults.test_replicas_killed import LEASE, Replicas
from tests.tools.mcp.servers import DEMO

pytestmark = SIGNAL_MARKS

CHUNKS = 1500
ANSWER = "".join(f"w{i} " for i in range(CHUNKS))
TURN = f"[[chunks:{CHUNKS}]][[slow:0.003]]"
"""About 4.5 s of text: the engine is killed mid-answer."""


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _read_until(call: object, stop: str, count: int) -> list[pb.Event]:
    seen: list[pb.Event] = []
    for event in call:  # type: ignore[attr-defined]
        seen.append(event)
        if sum(kind(e) == stop for e in seen) >= count:
            return seen
    raise AssertionError(f"the run ended before {count} {stop}: {[kind(e) for e in seen]}")


def _lost_and_duplicated(
    seen: list[pb.Event], resumed: list[pb.Event], stored: list[pb.Event]
) -> tuple[int, int]:
    got = [e.seq for e in seen + resumed]
    return len({e.seq for e in stored} - set(got)), len(got) - len(set(got))


def _kill_mid_text(llm: FakeOpenAI, workdir: Path, **env: str) -> list[pb.Event]:
    engine = EngineProcess(llm, workdir, **env)
    try:
        call = engine.stub.Run(
            pb.RunRequest(session_id="t", create_session=True, messages=[user(TURN)])
        )
        seen = _read_until(call, "text_message_content", 100)
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    return seen


def test_kill_9_mid_text_and_a_restart_finish_the_run_with_the_whole_answer(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    seen = _kill_mid_text(llm, tmp_path)
    run_id = seen[0].run_id

    engine = EngineProcess(llm, tmp_path)
    try:
        resumed = engine.follow("t", seen[-1].seq)
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
        run = engine.stub.GetRun(pb.GetRunRequest(run_id=run_id))
    finally:
        engine.stop()

    kinds = [kind(e) for e in resumed]
    assert all(e.run_id == run_id for e in resumed)  # one run that hiccups, not two
    assert "run_started" not in kinds
    customs = [(e.custom.name, e) for e in resumed if e.HasField("custom")]
    assert [name for name, _ in customs] == ["superseded", "resumed"], kinds
    cut = seen[-1].text_message_content.message_id
    superseded = customs[0][1]
    assert superseded.custom.value.struct_value.fields["messageId"].string_value == cut
    # The cut message is ended before the superseded event; the new attempt is a new one.
    first_custom = kinds.index("custom")
    assert kinds[first_custom - 1] == "text_message_end"
    starts = [e.text_message_start.message_id for e in resumed if e.HasField("text_message_start")]
    assert len(starts) == 1 and starts[0] != cut
    assert kinds[-2:] == ["message_stored", "run_finished"], kinds
    assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert all(e.seq > seen[-1].seq for e in resumed)
    assert _lost_and_duplicated(seen, resumed, stored) == (0, 0)
    # Only what the LLM should see is kept: the question and the whole answer.
    assert [m.role for m in messages] == [pb.ROLE_USER, pb.ROLE_ASSISTANT]
    assert messages[-1].content[0].text.text == ANSWER
    assert messages[-1].id == starts[0]
    assert run.status == pb.RUN_STATUS_SUCCEEDED
    log = engine.process.log()
    assert log.count("resumed here") == 1
    # The run's log line says how often it was resumed, and where.
    [finished] = [
        line for line in log.splitlines() if f"run finished session=t run={run_id}" in line
    ]
    assert "outcome=success" in finished and "resumes=1 resumed_on=" in finished


def test_without_resume_runs_a_restart_closes_the_run_as_interrupted(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    seen = _kill_mid_text(llm, tmp_path, AGENTIK_RESUME_RUNS="false")
    engine = EngineProcess(llm, tmp_path, AGENTIK_RESUME_RUNS="false")
    try:
        resumed = engine.follow("t", seen[-1].seq)
    finally:
        engine.stop()
    assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert not any(e.HasField("custom") for e in resumed)


@pytest.mark.parametrize("resume", ["true", "false"])
@pytest.mark.parametrize("turn", ["first", "later"])
def test_kill_9_right_after_a_run_began_keeps_its_input_once(
    llm: FakeOpenAI, tmp_path: Path, resume: str, turn: str
) -> None:
    """The run stored RUN_STARTED and its input as it began (its opening: a conversation's
    first run, or a later one whose client sent the whole history again with a new
    message); the LLM has not answered yet when the engine dies."""
    slow = user("[[slow:1.5]] [[chunks:2]]", "u-slow")
    engine = EngineProcess(llm, tmp_path, AGENTIK_RESUME_RUNS=resume)
    try:
        earlier: list[pb.Event] = []
        sent = [slow]
        if turn == "later":
            hello = user("hello", "u-hello")
            earlier = list(
                engine.stub.Run(
                    pb.RunRequest(session_id="t", create_session=True, messages=[hello])
                )
            )
            sent = [hello, engine.messages("t")[-1], slow]  # the history, sent again
        call = engine.stub.Run(pb.RunRequest(session_id="t", create_session=True, messages=sent))
        seen = _read_until(call, "message_stored", 1)
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    assert [kind(e) for e in seen] == ["run_started", "message_stored"]
    assert seen[-1].message_stored.message.id == "u-slow"

    engine = EngineProcess(llm, tmp_path, AGENTIK_RESUME_RUNS=resume)
    try:
        resumed = engine.follow("t", seen[-1].seq)
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
    finally:
        engine.stop()
    assert _lost_and_duplicated(earlier + seen, resumed, stored) == (0, 0)
    assert all(e.seq > seen[-1].seq and e.run_id == seen[0].run_id for e in resumed)
    assert [kind(e) for e in stored].count("run_started") == (2 if turn == "later" else 1)
    before = [pb.ROLE_USER, pb.ROLE_ASSISTANT] if turn == "later" else []
    assert [m.id for m in messages].count("u-slow") == 1
    if resume == "true":  # the run goes on from its stored input, and answers it
        assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
        assert [m.role for m in messages] == [*before, pb.ROLE_USER, pb.ROLE_ASSISTANT]
        assert messages[-1].content[0].text.text == "w0 w1 "
    else:  # closed, the input kept once
        assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
        assert [m.role for m in messages] == [*before, pb.ROLE_USER]


def test_a_run_that_keeps_killing_its_engine_stops_after_max_resumes(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    seen = _kill_mid_text(llm, tmp_path, AGENTIK_MAX_RESUMES="1")
    # The restart resumes it (resume 1 of 1); the engine is killed again mid-answer.
    engine = EngineProcess(llm, tmp_path, AGENTIK_MAX_RESUMES="1")
    try:
        call = engine.stub.Subscribe(pb.SubscribeRequest(session_id="t", after_seq=seen[-1].seq))
        again = _read_until(call, "text_message_content", 100)
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    assert [e.custom.name for e in again if e.HasField("custom")] == ["superseded", "resumed"]

    engine = EngineProcess(llm, tmp_path, AGENTIK_MAX_RESUMES="1")
    try:
        last = engine.follow("t", again[-1].seq)
        run = engine.stub.GetRun(pb.GetRunRequest(run_id=seen[0].run_id))
    finally:
        engine.stop()
    assert kind(last[-1]) == "run_error"
    assert last[-1].run_error.code == "resume_limit"
    assert "max_resumes" in last[-1].run_error.message
    assert run.status == pb.RUN_STATUS_FAILED


# -- tools, exactly once -------------------------------------------------------------------


def _mcp_config(workdir: Path) -> Path:
    config = workdir / "agentik.toml"
    config.write_text(
        "[[mcp.servers]]\n"
        'name = "demo"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(DEMO)}, "stdio"]\n'
    )
    return config


def _tool_engine(llm: FakeOpenAI, workdir: Path, **env: str) -> EngineProcess:
    engine = EngineProcess(llm, workdir, AGENTIK_CONFIG=str(_mcp_config(workdir)), **env)
    engine.process.wait_for_log(re.compile(f"({MCP_CONNECTED})"))
    return engine


def _kill_mid_count(
    llm: FakeOpenAI, workdir: Path, counter: Path, seconds: float, **env: str
) -> list[pb.Event]:
    """A run whose LLM calls ``demo__count`` (a side effect counted in ``counter``, then
    ``seconds`` of work); kill -9 of the engine while the call runs."""
    engine = _tool_engine(llm, workdir, **env)
    try:
        arguments = {"path": str(counter), "seconds": seconds}
        counting = FakeToolCall("demo__count", arguments, id="c1")
        llm.enqueue(FakeReply(text="counting", tool_calls=[counting], usage=(100, 10)))
        call = engine.stub.Run(
            pb.RunRequest(session_id="t", create_session=True, messages=[user("count once")])
        )
        seen = _read_until(call, "custom", 2)  # the tool's progress: it is running
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    assert counter.read_text().splitlines() == [f"{seen[0].run_id}:c1"]
    return seen


def _approve(interrupt_id: str, arguments: dict[str, object]) -> pb.ResumeEntry:
    entry = pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_RESOLVED)
    json_format.ParseDict({"approved": True, "arguments": arguments}, entry.payload)
    return entry


def test_kill_9_mid_tool_asks_whether_to_run_it_again_and_approved_it_runs_once_more(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    seen = _kill_mid_count(llm, tmp_path, counter, 60)
    key = f"{seen[0].run_id}:c1"

    engine = _tool_engine(llm, tmp_path)
    try:
        resumed = engine.follow("t", seen[-1].seq)
        session = engine.stub.GetSession(pb.GetSessionRequest(session_id="t"))
        assert counter.read_text().splitlines() == [key]  # not run again by itself
        [asked] = resumed[-1].run_finished.interrupts
        assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_INTERRUPT
        assert asked.tool_call.id == "c1" and "may already have run" in asked.message
        assert [i.id for i in session.pending_interrupts] == [asked.id]
        llm.enqueue(FakeReply(text="counted twice, as you asked"))
        last = list(
            engine.stub.Run(
                pb.RunRequest(
                    session_id="t",
                    resume=[_approve(asked.id, {"path": str(counter), "seconds": 0.05})],
                ),
                timeout=WITHIN,
            )
        )
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
    finally:
        engine.stop()

    # Approved: run exactly once more, with the same idempotency key.
    assert counter.read_text().splitlines() == [key, key]
    assert last[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    results = [m for m in messages if m.role == pb.ROLE_TOOL]
    assert [(m.tool_call_id, m.status) for m in results] == [("c1", pb.MESSAGE_STATUS_COMPLETE)]
    assert _lost_and_duplicated(seen, resumed + last, stored) == (0, 0)


def test_kill_9_mid_tool_runs_an_idempotent_tool_again_by_itself(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    seen = _kill_mid_count(llm, tmp_path, counter, 3, AGENTIK_TOOLS_IDEMPOTENT="demo__count")
    llm.enqueue(FakeReply(text="counted"))
    engine = _tool_engine(llm, tmp_path, AGENTIK_TOOLS_IDEMPOTENT="demo__count")
    try:
        resumed = engine.follow("t", seen[-1].seq)
        stored = engine.follow("t", 0)
    finally:
        engine.stop()
    key = f"{seen[0].run_id}:c1"
    assert counter.read_text().splitlines() == [key, key]
    results = [e.tool_call_result for e in resumed if e.HasField("tool_call_result")]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("c1", False)]
    assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert _lost_and_duplicated(seen, resumed, stored) == (0, 0)


def test_kill_9_mid_tool_with_in_doubt_error_gives_the_llm_an_error_result(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    seen = _kill_mid_count(llm, tmp_path, counter, 60, AGENTIK_TOOLS_IN_DOUBT="error")
    llm.enqueue(FakeReply(text="the count was cut", usage=(200, 20)))
    engine = _tool_engine(llm, tmp_path, AGENTIK_TOOLS_IN_DOUBT="error")
    try:
        resumed = engine.follow("t", seen[-1].seq)
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
        run = engine.stub.GetRun(pb.GetRunRequest(run_id=seen[0].run_id))
    finally:
        engine.stop()

    # The tokens of the round before the kill count with those of the round after.
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)
    final_usage = resumed[-1].run_finished.usage
    assert (final_usage.input_tokens, final_usage.output_tokens) == (300, 30)

    assert counter.read_text().splitlines() == [f"{seen[0].run_id}:c1"]  # never twice
    kinds = [kind(e) for e in resumed]
    # The cut call's result, then its step (stored as started before it ran) ends.
    assert kinds[:4] == ["tool_call_result", "message_stored", "step_finished", "custom"], kinds
    assert resumed[0].tool_call_result.is_error
    assert "may or may not have taken effect" in resumed[0].tool_call_result.content
    assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    assert _lost_and_duplicated(seen, resumed, stored) == (0, 0)
    assert [m.role for m in messages] == [
        pb.ROLE_USER,
        pb.ROLE_ASSISTANT,
        pb.ROLE_TOOL,
        pb.ROLE_ASSISTANT,
    ]
    assert messages[-1].content[0].text.text == "the count was cut"
    # The LLM was asked again with a result for the call it made.
    sent = llm.requests[-1]["messages"]
    assert any(m.get("role") == "tool" and m.get("tool_call_id") == "c1" for m in sent)


# -- two replicas on PostgreSQL ------------------------------------------------------------

REPLICA_CHUNKS = 300
REPLICA_TURN = f"[[slow:0.02]] [[chunks:{REPLICA_CHUNKS}]]"
"""About 6 s of text per turn: every turn is mid-answer when a replica is killed."""
REPLICA_ANSWER = "".join(f"w{i} " for i in range(REPLICA_CHUNKS))
GRACE_ENV = "AGENTIK_SHUTDOWN_GRACE"
GRACE = 30.0
"""Far longer than a turn: a stop that waited for it would show."""


@pytest.fixture
def resuming(
    llm: FakeOpenAI, pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    running = Replicas(
        llm, tmp_path_factory.mktemp("resumed"), pg_url, resume=True, **{GRACE_ENV: str(GRACE)}
    )
    yield running
    running.stop()


@pytest.fixture
async def http(resuming: Replicas) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(
        base_url=resuming.stack.base_url, timeout=httpx.Timeout(WITHIN), limits=limits
    ) as client:
        yield client


async def _note_retries(ledgers: dict[str, Ledger], since: float, first: dict[str, float]) -> None:
    """Note in ``first`` the seconds after ``since`` at which each stream got a ``retry``."""
    while True:
        for name, ledger in ledgers.items():
            if name not in first and ledger.count("retry"):
                first[name] = time.monotonic() - since
        await asyncio.sleep(0.05)


async def test_kill_9_of_a_replica_mid_text_and_its_runs_finish_on_the_other(
    resuming: Replicas, http: httpx.AsyncClient
) -> None:
    # 32 conversations over two replicas: the killed one holds about 16 streaming runs.
    ledgers, runs = await open_streams(http, 32, REPLICA_TURN, mid_turn=20)
    first: dict[str, float] = {}
    try:
        killed = time.monotonic()
        resuming.engines[0].stop(signal.SIGKILL)
        watch = asyncio.create_task(_note_retries(ledgers, killed, first))
        try:
            for run in runs:
                assert await run, "a stream did not reach its turn's end"
        finally:
            watch.cancel()
    finally:
        for run in runs:
            run.cancel()

    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, resuming.target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views, crashed=True)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    assert not result.skipped, result.skipped
    # Every run ends in success with the whole answer as its last stored message.
    ends = {name: ledger.frames[-1].type for name, ledger in ledgers.items()}
    assert set(ends.values()) == {"end"}, ends
    for conversation_id, view in views.items():
        assert view.assistant_text() == REPLICA_ANSWER, conversation_id
    retried = {name: ledger.count("retry") for name, ledger in ledgers.items()}
    assert set(retried.values()) <= {0, 1}, retried  # at most one superseded partial per cut
    cut = sum(1 for name, n in retried.items() if n and name.startswith("send"))
    assert cut >= 8, f"only {cut} runs were on the killed replica"
    # The cut runs went on within the lease (+ a third of it, the claim period) + 2 s.
    assert max(first.values()) < LEASE * 4 / 3 + 2.0, first
    # Both streams of a conversation agree on whether it was cut.
    for index in range(32):
        assert retried[f"send {index}"] == retried[f"follow {index}"], index


async def test_a_rolling_restart_hands_runs_over_without_cutting_or_waiting(
    resuming: Replicas, http: httpx.AsyncClient
) -> None:
    """SIGTERM one replica, start it again, SIGTERM the other, under 32 runs (64 streams):
    each stopping replica hands its runs over at once instead of waiting for
    ``shutdown_grace``; every run ends in success with the whole answer."""
    ledgers, runs = await open_streams(http, 32, REPLICA_TURN, mid_turn=10)
    stops = []
    try:
        for index in (0, 1):
            began = time.monotonic()
            resuming.restart(index, signal.SIGTERM)
            stops.append(time.monotonic() - began)
        for run in runs:
            assert await run, "a stream did not reach its turn's end"
    finally:
        for run in runs:
            run.cancel()

    # Each restart (stop + start) took far less than the grace a waiting stop would use.
    assert max(stops) < GRACE / 3, stops
    conversations = {ledger.conversation_id for ledger in ledgers.values()}
    views = {c: await store_view(http, resuming.target, c, WITHIN) for c in conversations}
    result = audit(ledgers.items(), views, crashed=True)
    assert result.clean(), str(result)
    assert result.lost_count == 0 and result.duplicated_count == 0
    assert not result.skipped, result.skipped
    ends = {name: ledger.frames[-1].type for name, ledger in ledgers.items()}
    assert set(ends.values()) == {"end"}, ends  # 0 runs cut
    for conversation_id, view in views.items():
        assert view.assistant_text() == REPLICA_ANSWER, conversation_id
    assert any(ledger.count("retry") for ledger in ledgers.values()), "nothing handed over?"
