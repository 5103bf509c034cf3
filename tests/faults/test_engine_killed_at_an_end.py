"""An engine killed (SIGKILL) the moment it has stored a run's end, before anything after
that write (``tests.faults.dies_after_an_end``): the next start delivers the run's webhook
exactly once, and its A2A push updates, because they were stored with the end.

The ends: a run the next engine closes after kill -9 cut it (``resume_runs = false``), and
a run that ends as it should. The receiver counts POSTs by ``webhook-id``; the outbox, read
from the SQLite file, holds one row for the run, delivered: nothing more can come."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.core.test_recovery import EngineProcess, engine_env
from tests.engine.harness import kind, user
from tests.engine.webhooks.outbox import Row, settled, sqlite_rows, sqlite_run_status
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.conftest import SIGNAL_MARKS, WITHIN
from tests.polling import wait_until
from tests.stack import ENGINE_LISTENING, Process

pytestmark = SIGNAL_MARKS

FAST = {
    "AGENTIK_WEBHOOKS_ALLOW_PRIVATE": "true",
    "AGENTIK_WEBHOOKS_BASE_DELAY": "0.2",
    "AGENTIK_WEBHOOKS_POLL_INTERVAL": "0.05",
    "AGENTIK_WEBHOOKS_TIMEOUT": "1",
}
CHUNKS = 300


class DyingEngine:
    """The engine of ``tests.faults.dies_after_an_end`` on the SQLite file of ``workdir``,
    with the settings an ``EngineProcess`` there would have."""

    def __init__(self, llm: FakeOpenAI, workdir: Path, **env: str) -> None:
        self.env = engine_env(llm, workdir, **env)
        argv = [sys.executable, "-m", "tests.faults.dies_after_an_end"]
        self.process = Process("dying-engine", argv, self.env, workdir)

    def wait_killed(self) -> None:
        """Until the engine is dead: killed by its own SIGKILL, at a run's end."""
        try:
            code = self.process.popen.wait(WITHIN)
        except subprocess.TimeoutExpired:
            self.process.stop(signal.SIGKILL)
            raise AssertionError(f"the engine did not die:\n{self.process.log()}") from None
        self.process.stop()
        assert code == -signal.SIGKILL, self.process.log()


def _delivered(path: Path, run_id: str) -> list[Row]:
    """The outbox rows of the run's webhook once none is pending (bounded)."""
    return settled(lambda: sqlite_rows(path, run_id), WITHIN)


def test_a_run_closed_by_an_engine_killed_right_after_the_close_sends_its_webhook_once(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """kill -9 cuts a run mid-answer; the next engine closes it (``resume_runs = false``)
    and is killed right after the close; the one after that sends the run's webhook: one
    POST, one ``webhook-id``, the ``cancelled`` end with the partial answer."""
    db = tmp_path / "agentik.db"
    off = {**FAST, "AGENTIK_RESUME_RUNS": "false"}
    with Receiver() as hook:
        cutting = EngineProcess(llm, tmp_path, **off)
        try:
            request = pb.RunRequest(
                session_id="s",
                create_session=True,
                messages=[user(f"[[slow:0.01]] [[chunks:{CHUNKS}]]")],
                webhook=pb.Webhook(url=hook.url),
            )
            texts = 0
            for event in cutting.stub.Run(request, timeout=WITHIN):
                texts += kind(event) == "text_message_content"
                if texts == 20:
                    run_id = event.run_id
                    break
            cutting.kill()
        finally:
            cutting.stop()

        DyingEngine(llm, tmp_path, **off).wait_killed()  # its recovery closed the run
        assert sqlite_run_status(db, run_id) == "interrupted"
        assert [row.status for row in sqlite_rows(db, run_id)] == ["pending"]
        assert hook.received == []

        engine = EngineProcess(llm, tmp_path, **off)
        try:
            (row,) = _delivered(db, run_id)
        finally:
            engine.stop()
    assert row.status == "delivered"
    assert Counter(r.headers["webhook-id"] for r in hook.received) == {row.id: 1}
    payload = json.loads(hook.received[0].body)
    assert (payload["runId"], payload["outcome"]) == (run_id, "cancelled")
    assert payload["message"]["text"].startswith("w0 w1 ")


def test_a_run_whose_engine_is_killed_right_after_its_end_sends_its_webhook_and_pushes(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """The engine is killed the moment it stored a run's end; the next start sends the
    run's webhook once and its task's A2A push updates of the end (the answer, COMPLETED)."""
    db = tmp_path / "agentik.db"
    with Receiver() as hook:
        dying = DyingEngine(llm, tmp_path, **FAST)
        port = int(dying.process.wait_for_log(ENGINE_LISTENING))
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = pb_grpc.AgentEngineStub(channel)
            push = pb.PushConfig(id="c1", task_id="r1", url=f"{hook.url}/push", token="t")
            request = pb.RunRequest(
                session_id="s",
                run_id="r1",
                create_session=True,
                messages=[user("hi")],
                webhook=pb.Webhook(url=f"{hook.url}/run"),
                push_configs=[push],
            )
            with pytest.raises(grpc.RpcError):  # the engine dies as the run ends
                for _ in stub.Run(request, timeout=WITHIN):
                    pass
        dying.wait_killed()
        assert sqlite_run_status(db, "r1") == "succeeded"

        engine = EngineProcess(llm, tmp_path, **FAST)
        try:
            (row,) = _delivered(db, "r1")
            wait_until(
                lambda: _pushed_end(hook), WITHIN, lambda: f"a push of the end: {hook.received}"
            )
        finally:
            engine.stop()
    assert row.status == "delivered"
    runs = Counter(r.headers["webhook-id"] for r in hook.received if r.path == "/hook/run")
    assert runs == {row.id: 1}
    assert json.loads(_of(hook, "/hook/run")[0])["outcome"] == "success"
    pushes = Counter(r.headers["webhook-id"] for r in hook.received if r.path == "/hook/push")
    assert set(pushes.values()) == {1}


def _of(hook: Receiver, path: str) -> list[bytes]:
    return [r.body for r in hook.received if r.path == path]


def _pushed_end(hook: Receiver) -> bool:
    """Whether the task's end (the answer's artifact, then COMPLETED) was pushed."""
    updates = [json.loads(body) for body in _of(hook, "/hook/push")]
    artifacts = [u["artifactUpdate"] for u in updates if "artifactUpdate" in u]
    states = [u["statusUpdate"]["status"]["state"] for u in updates if "statusUpdate" in u]
    return bool(artifacts) and "TASK_STATE_COMPLETED" in states
