"""kill -9 of the engine process mid-run: no event id is reused, nothing said is lost.

A real engine process on an SQLite file, the real fake LLM, kill -9, a new engine on the
same file. The client counts what it saw before the crash and what it reads after
resuming from its last id, and holds both against the stored log: zero lost, zero
duplicated, and the partial answer kept as an interrupted message.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.engine.harness import kind, user
from tests.fakes.fake_openai import FakeOpenAI, FakeReply, FakeToolCall
from tests.tools.mcp.servers import DEMO
from tests.web.e2e.conftest import ENGINE_LISTENING, WAIT, Process

MCP_CONNECTED = r"MCP server 'demo' connected"


def engine_env(llm: FakeOpenAI, workdir: Path, **env: str) -> dict[str, str]:
    """The environment of an engine process on the SQLite file of ``workdir``."""
    return {
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "PATH": "/usr/bin:/bin",
        "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": f"sqlite:///{workdir / 'agentik.db'}",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_LLM_MAX_RETRIES": "0",
        "AGENTIK_SHUTDOWN_GRACE": "1",
        "AGENTIK_LOG_LEVEL": "INFO",
        **env,
    }


class EngineProcess:
    """``python -m engine_service`` on a SQLite file, with a sync stub to it."""

    def __init__(self, llm: FakeOpenAI, workdir: Path, **env: str) -> None:
        self.env = engine_env(llm, workdir, **env)
        self.workdir = workdir
        self.process = Process(
            "engine", [sys.executable, "-m", "engine_service"], self.env, workdir
        )
        port = int(self.process.wait_for_log(ENGINE_LISTENING))
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.AgentEngineStub(self.channel)

    def kill(self) -> None:
        self.channel.close()
        self.process.stop(signal.SIGKILL)

    def stop(self) -> None:
        self.channel.close()
        if not self.process.stopped:
            self.process.stop()

    def follow(self, thread_id: str, after: int) -> list[pb.Event]:
        """The session's events after ``after`` until it is idle."""
        call = self.stub.Subscribe(
            pb.SubscribeRequest(session_id=thread_id, after_seq=after, until_idle=True),
            timeout=WAIT,
        )
        return list(call)

    def messages(self, thread_id: str) -> list[pb.Message]:
        page = self.stub.ListMessages(pb.ListMessagesRequest(session_id=thread_id), timeout=WAIT)
        return list(page.messages)


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def _read_until(call: object, stop: str, count: int) -> list[pb.Event]:
    """Events of a Run stream until ``count`` events of kind ``stop`` were seen."""
    seen: list[pb.Event] = []
    for event in call:  # type: ignore[attr-defined]
        seen.append(event)
        if sum(kind(e) == stop for e in seen) >= count:
            return seen
    raise AssertionError(f"the run ended before {count} {stop}: {[kind(e) for e in seen]}")


def _count_lost_and_duplicated(
    seen: list[pb.Event], resumed: list[pb.Event], stored: list[pb.Event]
) -> tuple[int, int]:
    """Stored events the client never got, and ids it got twice (within or across)."""
    got = [e.seq for e in seen + resumed]
    duplicated = len(got) - len(set(got))
    lost = len({e.seq for e in stored} - set(got))
    return lost, duplicated


def test_without_resume_kill_9_mid_text_loses_nothing_and_keeps_the_partial_answer(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    engine = EngineProcess(llm, tmp_path, AGENTIK_RESUME_RUNS="false")
    try:
        call = engine.stub.Run(
            pb.RunRequest(
                session_id="t",
                create_session=True,
                messages=[user("[[chunks:3000]][[slow:0.002]]")],
            )
        )
        seen = _read_until(call, "text_message_content", 150)
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    last_seen = seen[-1].seq
    seen_text = "".join(
        e.text_message_content.delta for e in seen if e.HasField("text_message_content")
    )

    engine = EngineProcess(llm, tmp_path, AGENTIK_RESUME_RUNS="false")
    try:
        resumed = engine.follow("t", last_seen)
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
        session = engine.stub.GetSession(pb.GetSessionRequest(session_id="t"), timeout=WAIT)
        run = engine.stub.GetRun(pb.GetRunRequest(run_id=seen[0].run_id), timeout=WAIT)
        after = list(
            engine.stub.Run(pb.RunRequest(session_id="t", messages=[user("again")]), timeout=WAIT)
        )
    finally:
        engine.stop()

    # Deltas stored just before the kill but not shown yet come first, then the closing.
    kinds = [kind(e) for e in resumed]
    assert kinds[-3:] == ["text_message_end", "message_stored", "run_finished"], kinds
    assert set(kinds[:-3]) <= {"text_message_content"}, kinds
    assert all(e.seq > last_seen for e in resumed)
    assert resumed[-1].run_finished.outcome == pb.OUTCOME_TYPE_CANCELLED
    assert _count_lost_and_duplicated(seen, resumed, stored) == (0, 0)
    by_seq = {e.seq: e for e in stored}
    # Every event the client saw before the kill is stored as it saw it (issue 27, item 10).
    assert [by_seq.get(e.seq) for e in seen] == seen
    partial = messages[-1]
    assert partial.role == pb.ROLE_ASSISTANT
    assert partial.status == pb.MESSAGE_STATUS_INTERRUPTED
    late_text = "".join(e.text_message_content.delta for e in resumed[:-3])
    assert partial.content[0].text.text == seen_text + late_text  # exactly what was shown
    assert resumed[-2].message_stored.message.id == partial.id
    assert run.status == pb.RUN_STATUS_INTERRUPTED
    assert session.last_seq == resumed[-1].seq and not session.active_run_id
    assert after[0].seq > resumed[-1].seq and kind(after[-1]) == "run_finished"


def test_without_resume_kill_9_mid_tool_gives_the_call_an_error_result(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    config = tmp_path / "agentik.toml"
    config.write_text(
        "[[mcp.servers]]\n"
        'name = "demo"\n'
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(DEMO)}, "stdio"]\n'
    )
    engine = EngineProcess(llm, tmp_path, AGENTIK_CONFIG=str(config), AGENTIK_RESUME_RUNS="false")
    try:
        engine.process.wait_for_log(__import__("re").compile(f"({MCP_CONNECTED})"))
        llm.enqueue(
            FakeReply(
                text="let me wait",
                tool_calls=[FakeToolCall("demo__slow", {"seconds": 60}, id="slow1")],
            )
        )
        call = engine.stub.Run(
            pb.RunRequest(session_id="t", create_session=True, messages=[user("wait please")])
        )
        seen = _read_until(call, "custom", 2)  # the tool's progress: it is running
        engine.kill()
        call.cancel()
    finally:
        engine.stop()
    last_seen = seen[-1].seq

    engine = EngineProcess(llm, tmp_path, AGENTIK_CONFIG=str(config), AGENTIK_RESUME_RUNS="false")
    try:
        resumed = engine.follow("t", last_seen)
        stored = engine.follow("t", 0)
        messages = engine.messages("t")
        after = list(
            engine.stub.Run(
                pb.RunRequest(session_id="t", messages=[user("and now?")]), timeout=WAIT
            )
        )
    finally:
        engine.stop()

    assert [kind(e) for e in resumed] == [
        "tool_call_result",
        "message_stored",
        "step_finished",  # the call's step, stored as started before it ran, ends
        "run_finished",
    ]
    assert resumed[0].tool_call_result.tool_call_id == "slow1"
    assert resumed[0].tool_call_result.is_error
    assert all(e.seq > last_seen for e in resumed)
    assert _count_lost_and_duplicated(seen, resumed, stored) == (0, 0)
    assert [m.role for m in messages] == [pb.ROLE_USER, pb.ROLE_ASSISTANT, pb.ROLE_TOOL]
    assert messages[2].tool_call_id == "slow1" and messages[2].status == pb.MESSAGE_STATUS_ERROR
    # The LLM of the next turn gets a result for every call it made, as it requires.
    sent = llm.requests[-1]["messages"]
    assert any(m.get("role") == "tool" and m.get("tool_call_id") == "slow1" for m in sent)
    assert kind(after[-1]) == "run_finished" and after[0].seq > resumed[-1].seq


def _drain(call: object) -> None:
    """Read a Run stream to its end, or until it is cancelled or the engine dies."""
    try:
        for _ in call:  # type: ignore[attr-defined]
            pass
    except grpc.RpcError:
        pass


def test_kill_9_mid_compaction_loses_nothing_and_the_next_turn_compacts_again(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """The engine dies while the LLM writes the summary (docs/conversations.md): every
    message is still stored, no checkpoint half made, and the next turn compacts again."""
    import threading
    import time

    llm.summary_reply = FakeReply(hang_after=0)  # the summariser waits forever
    # The next turn, not a resume of the cut one (tests/faults/test_runs_resumed.py), compacts.
    env = {"AGENTIK_CONTEXT_TOKENS": "1500", "AGENTIK_RESUME_RUNS": "false"}
    engine = EngineProcess(llm, tmp_path, **env)
    sent = 0
    try:
        for index in range(10):
            call = engine.stub.Run(
                pb.RunRequest(
                    session_id="t",
                    create_session=True,
                    messages=[user(f"turn {index} " + "tell me more " * 60)],
                ),
                timeout=WAIT,
            )
            sent += 1
            reader = threading.Thread(target=_drain, args=(call,), daemon=True)
            reader.start()
            deadline = time.monotonic() + WAIT
            while reader.is_alive() and not llm.summaries and time.monotonic() < deadline:
                time.sleep(0.01)
            if llm.summaries:
                break
            reader.join(WAIT)
        assert llm.summaries == 1, "no compaction began"
        engine.kill()
        call.cancel()
    finally:
        engine.stop()

    llm.summary_reply = None
    engine = EngineProcess(llm, tmp_path, **env)
    try:
        before = engine.messages("t")
        after = list(
            engine.stub.Run(
                pb.RunRequest(session_id="t", messages=[user("and now? " + "more " * 100)]),
                timeout=WAIT,
            )
        )
        stored = engine.messages("t")
    finally:
        engine.stop()

    # Every user message sent, and the answers of the turns that ended, are stored.
    assert [m.role for m in before].count(pb.ROLE_USER) == sent
    assert len(before) == 2 * sent - 1
    assert kind(after[-1]) == "run_finished"
    compacted = [e for e in after if kind(e) == "custom" and e.custom.name == "compacted"]
    assert len(compacted) == 1 and llm.summaries == 2
    assert compacted[0].custom.value.struct_value["mode"] == "summarize"
    assert len(stored) == len(before) + 2
