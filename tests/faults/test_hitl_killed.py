"""kill -9 around a person's approval: the request survives, nothing is lost or run twice.

A real engine process on an SQLite file, a real MCP server whose ``slow`` tool needs
approval, the fake LLM. The run stops for approval; the engine is killed; a new one on the
same file still waits for the person. Approved, the call starts — and the engine is killed
again mid-call. The next engine resumes the cut run (its answers were kept with it): the
call had started and has no result, so it may have run, and the person is asked again
("may already have run"); a second approval with edited arguments finishes the turn. The
client's view is held against the stored log: zero lost, zero duplicated events, one result
for the call.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import json_format

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.core.test_recovery import MCP_CONNECTED, EngineProcess
from tests.engine.harness import kind, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.tools.mcp.servers import DEMO
from tests.web.e2e.conftest import WAIT


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _approve(interrupt_id: str, arguments: dict[str, object] | None = None) -> pb.ResumeEntry:
    entry = pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_RESOLVED)
    payload: dict[str, object] = {"approved": True}
    if arguments is not None:
        payload["arguments"] = arguments
    json_format.ParseDict(payload, entry.payload)
    return entry


def _engine(llm: FakeOpenAI, workdir: Path, config: Path, **env: str) -> EngineProcess:
    env = {"AGENTIK_TOOLS_APPROVAL": "demo__slow", **env}
    engine = EngineProcess(llm, workdir, AGENTIK_CONFIG=str(config), **env)
    engine.process.wait_for_log(re.compile(f"({MCP_CONNECTED})"))
    return engine


def test_a_pending_approval_survives_kill_9_twice_and_the_call_runs_once(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        "[[mcp.servers]]\n"
        'name = "demo"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(DEMO)}, "stdio"]\n'
    )
    seen: list[pb.Event] = []

    # 1. The run stops for approval; kill -9 once it has ended.
    engine = _engine(llm, tmp_path, config)
    try:
        llm.enqueue(
            FakeReply(
                text="this needs a slow tool",
                tool_calls=[FakeToolCall("demo__slow", {"seconds": 60}, id="slow1")],
            )
        )
        first = list(
            engine.stub.Run(
                pb.RunRequest(session_id="t", create_session=True, messages=[user("go")]),
                timeout=WAIT,
            )
        )
        seen += first
        engine.kill()
    finally:
        engine.stop()
    assert first[-1].run_finished.outcome == pb.OUTCOME_TYPE_INTERRUPT
    [asked] = first[-1].run_finished.interrupts
    assert asked.tool_call.id == "slow1"

    # 2. A new engine still waits; approve; kill -9 while the approved call runs.
    engine = _engine(llm, tmp_path, config)
    try:
        session = engine.stub.GetSession(pb.GetSessionRequest(session_id="t"), timeout=WAIT)
        assert [i.id for i in session.pending_interrupts] == [asked.id]
        call = engine.stub.Run(
            pb.RunRequest(session_id="t", resume=[_approve(asked.id)]), timeout=WAIT
        )
        for event in call:
            seen.append(event)
            if sum(kind(e) == "custom" for e in seen) >= 2:  # the tool's progress: it runs
                break
        engine.kill()
        call.cancel()
    finally:
        engine.stop()

    # 3. The next engine resumes the cut run: the approved call started and has no result,
    # so it is in doubt, and the person is asked again (never run twice silently).
    # Approving again with edited arguments finishes the turn.
    engine = _engine(llm, tmp_path, config)
    try:
        seen += engine.follow("t", seen[-1].seq)
        session = engine.stub.GetSession(pb.GetSessionRequest(session_id="t"), timeout=WAIT)
        [again] = session.pending_interrupts
        assert again.tool_call.id == "slow1" and "may already have run" in again.message
        llm.enqueue(FakeReply(text="the slow tool is done"))
        last = list(
            engine.stub.Run(
                pb.RunRequest(session_id="t", resume=[_approve(again.id, {"seconds": 0.05})]),
                timeout=WAIT,
            )
        )
        seen += last
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
        session = engine.stub.GetSession(pb.GetSessionRequest(session_id="t"), timeout=WAIT)
    finally:
        engine.stop()

    got = [e.seq for e in seen]
    assert len(got) == len(set(got)), "duplicated events"
    assert {e.seq for e in stored} - set(got) == set(), "lost events"
    assert [e.seq for e in stored] == sorted(e.seq for e in stored)
    assert last[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    results = [e.tool_call_result for e in last if kind(e) == "tool_call_result"]
    assert [(r.tool_call_id, r.is_error) for r in results] == [("slow1", False)]
    tool_messages = [m for m in messages if m.role == pb.ROLE_TOOL]
    assert [m.tool_call_id for m in tool_messages] == ["slow1"], "the call has one result"
    assert list(session.pending_interrupts) == []
    assert "the slow tool is done" in "".join(
        e.text_message_content.delta for e in last if kind(e) == "text_message_content"
    )


# -- a round cut mid-call whose other calls wait for a person -------------------------------

GATED_ENV = {"AGENTIK_TOOLS_APPROVAL": "demo__count", "AGENTIK_TOOLS_ASK_USER": "true"}
QUESTION = "Which file?"


def _answer(interrupt_id: str, answer: str) -> pb.ResumeEntry:
    entry = pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_RESOLVED)
    json_format.ParseDict({"answer": answer}, entry.payload)
    return entry


def _decline(interrupt_id: str) -> pb.ResumeEntry:
    return pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_CANCELLED)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["sqlite restart", "postgres takeover"])
def test_a_round_cut_mid_call_asks_its_approval_and_question_again_and_runs_nothing_unapproved(
    llm: FakeOpenAI, tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    """One LLM round calls a slow tool (it runs), a tool listed for approval and
    ``ask_user``; the engine is killed while the slow call runs. The engine that resumes
    the run (the same one restarted on SQLite, the other replica on PostgreSQL) raises
    the approval and the question again, as the cut run would have, beside the in-doubt
    slow call: the gated tool has not run, nobody answered the question. Approved, the
    gated tool runs once; a client resuming from its last id loses and repeats nothing."""
    config = tmp_path / "agentik.toml"
    config.write_text(
        "[[mcp.servers]]\n"
        'name = "demo"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(DEMO)}, "stdio"]\n'
    )
    env = {**GATED_ENV, "AGENTIK_STORE": f"sqlite:///{tmp_path / 'agentik.db'}"}
    replicas = where == "postgres takeover"
    if replicas:
        env |= {"AGENTIK_STORE": request.getfixturevalue("pg_url"), "AGENTIK_LEASE_SECONDS": "2"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    counter = tmp_path / "counter"
    seen: list[pb.Event] = []

    engine = _engine(llm, tmp_path / "a", config, **env)
    other = _engine(llm, tmp_path / "b", config, **env) if replicas else None
    try:
        llm.enqueue(
            FakeReply(
                text="three calls",
                tool_calls=[
                    FakeToolCall("demo__slow", {"seconds": 60}, id="s1"),
                    FakeToolCall("demo__count", {"path": str(counter), "seconds": 0.05}, id="c2"),
                    FakeToolCall("ask_user", {"question": QUESTION}, id="q3"),
                ],
            )
        )
        call = engine.stub.Run(
            pb.RunRequest(session_id="t", create_session=True, messages=[user("go")])
        )
        for event in call:
            seen.append(event)
            if sum(kind(e) == "custom" for e in seen) >= 2:  # the slow tool's progress: it runs
                break
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    assert not counter.exists()

    # The run goes on: restarted on the same file, or taken over by the other replica.
    engine = other or _engine(llm, tmp_path / "b", config, **env)
    try:
        resumed = engine.follow("t", seen[-1].seq)
        session = engine.stub.GetSession(pb.GetSessionRequest(session_id="t"), timeout=WAIT)
        assert not counter.exists(), "the call that needs approval ran without one"
        messages = engine.messages("t")
        assert [m.role for m in messages] == [pb.ROLE_USER, pb.ROLE_ASSISTANT]  # no results
        assert len(llm.requests) == 1  # the LLM was not asked on without the answers
        final = resumed[-1].run_finished
        assert final.outcome == pb.OUTCOME_TYPE_INTERRUPT
        asked = {i.tool_call.id: i for i in session.pending_interrupts}
        assert sorted(asked) == ["c2", "q3", "s1"]
        assert sorted(i.id for i in final.interrupts) == sorted(i.id for i in asked.values())
        in_doubt = json_format.MessageToDict(asked["s1"].payload)
        assert "may already have run" in asked["s1"].message and in_doubt["inDoubt"] is True
        approval = json_format.MessageToDict(asked["c2"].payload)
        assert asked["c2"].kind == pb.INTERRUPT_KIND_APPROVAL and "inDoubt" not in approval
        assert approval["tool"] == "demo__count"
        assert asked["q3"].kind == pb.INTERRUPT_KIND_QUESTION
        assert asked["q3"].message == QUESTION

        llm.enqueue(FakeReply(text="all done"))
        last = list(
            engine.stub.Run(
                pb.RunRequest(
                    session_id="t",
                    resume=[
                        _decline(asked["s1"].id),
                        _approve(asked["c2"].id),
                        _answer(asked["q3"].id, "the second one"),
                    ],
                ),
                timeout=WAIT,
            )
        )
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
    finally:
        engine.stop()

    assert last[-1].run_finished.outcome == pb.OUTCOME_TYPE_SUCCESS
    run_id = seen[0].run_id
    assert counter.read_text().splitlines() == [f"{run_id}:c2"]  # approved: run once
    results = {m.tool_call_id: m.content[0].text.text for m in messages if m.role == pb.ROLE_TOOL}
    assert sorted(results) == ["c2", "q3", "s1"]
    assert results["q3"] == "the second one" and results["c2"] == f"counted {run_id}:c2"
    sent = llm.requests[-1]["messages"]
    assert {m.get("tool_call_id") for m in sent if m.get("role") == "tool"} == {"s1", "c2", "q3"}
    got = [e.seq for e in seen + resumed + last]
    assert len(got) == len(set(got)), "duplicated events"
    assert {e.seq for e in stored} - set(got) == set(), "lost events"
