"""Ownership survives what the store goes through: a kill -9 mid-run and the schema
migration that added owners.

- The engine process is killed while alice's run streams; the next engine closes the run
  as interrupted, and it and its session are still alice's alone.
- A database from before owners (schema v2) migrates without losing a row; its sessions
  have no owner: an admin and a server without authentication see them, alice does not.
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.core.models import Message, Role, TextPart
from engine_service.stores.encoding import message_to_dict
from engine_service.stores.sqlite import SCHEMA_VERSION
from engine_service.stores.sqlite.schema import _MIGRATIONS
from tests.core.test_recovery import EngineProcess
from tests.engine.auth_helpers import TOKENS_ENV, Metadata, as_, rpc_error
from tests.engine.harness import engine_settings, kind, running_engine, text_of, user
from tests.fakes.fake_openai import FakeOpenAI
from tests.faults.procs import NEEDS_SIGNALS
from tests.web.e2e.conftest import WAIT


def _not_found(call: Any, request: Any, metadata: Metadata) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        result = call(request, metadata=metadata, timeout=WAIT)
        if not hasattr(result, "SerializeToString"):
            list(result)  # a stream: the error comes with the first read
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.processes
@pytest.mark.signals
@NEEDS_SIGNALS
@pytest.mark.timeout(120)
@pytest.mark.parametrize("resume", ["false", "true"])
def test_a_run_cut_by_kill_9_stays_its_owners_after_the_restart(
    tmp_path: Path, resume: str
) -> None:
    """Closed as interrupted (resume_runs off) or resumed to its end (on): either way the
    run, its conversation and its messages stay its owner's, and nobody else's."""
    env = {"AGENTIK_TOKENS": TOKENS_ENV, "AGENTIK_ADMINS": "ops", "AGENTIK_RESUME_RUNS": resume}
    with FakeOpenAI() as llm:
        engine = EngineProcess(llm, tmp_path, **env)
        try:
            bobs = list(
                engine.stub.Run(
                    pb.RunRequest(session_id="b1", create_session=True, messages=[user("bob")]),
                    metadata=as_("bob"),
                    timeout=WAIT,
                )
            )
            assert kind(bobs[-1]) == "run_finished"
            call = engine.stub.Run(
                pb.RunRequest(
                    session_id="a1",
                    create_session=True,
                    messages=[user("[[chunks:3000]][[slow:0.002]]")],
                ),
                metadata=as_("alice"),
            )
            seen: list[pb.Event] = []
            for event in call:
                seen.append(event)
                if sum(kind(e) == "text_message_content" for e in seen) >= 100:
                    break
            engine.kill()
            call.cancel()
        finally:
            engine.stop()
        run_id = seen[0].run_id

        engine = EngineProcess(llm, tmp_path, **env)
        try:
            stub = engine.stub
            deadline = time.monotonic() + WAIT
            while True:  # the new engine closes the abandoned run as it starts
                run = stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=as_("alice"))
                if run.status != pb.RUN_STATUS_RUNNING or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            ended = pb.RUN_STATUS_SUCCEEDED if resume == "true" else pb.RUN_STATUS_INTERRUPTED
            assert run.status == ended and run.session_id == "a1"
            session = stub.GetSession(pb.GetSessionRequest(session_id="a1"), metadata=as_("alice"))
            assert session.owner == "alice" and session.active_run_id == ""
            messages = stub.ListMessages(
                pb.ListMessagesRequest(session_id="a1"), metadata=as_("alice")
            ).messages
            kept = messages[-1].content[0].text.text
            if resume == "true":  # asked again, answered whole
                assert messages[-1].status != pb.MESSAGE_STATUS_INTERRUPTED and len(kept) >= 3000
            else:
                assert messages[-1].status == pb.MESSAGE_STATUS_INTERRUPTED
                # Everything the client saw was stored first; the store may hold a few
                # tokens more (written together with the last one it read before it stopped).
                assert kept.startswith(text_of(seen))

            bob = as_("bob")
            _not_found(stub.GetSession, pb.GetSessionRequest(session_id="a1"), bob)
            _not_found(stub.GetRun, pb.GetRunRequest(run_id=run_id), bob)
            _not_found(stub.GetRun, pb.GetRunRequest(run_id=run_id, session_id="a1"), bob)
            _not_found(stub.ListMessages, pb.ListMessagesRequest(session_id="a1"), bob)
            _not_found(stub.ListRuns, pb.ListRunsRequest(session_id="a1"), bob)
            _not_found(stub.Subscribe, pb.SubscribeRequest(session_id="a1", until_idle=True), bob)
            sessions = stub.ListSessions(pb.ListSessionsRequest(), metadata=bob)
            assert [s.id for s in sessions.sessions] == ["b1"] and sessions.total == 1
            runs = stub.ListRuns(pb.ListRunsRequest(), metadata=bob)
            assert [r.session_id for r in runs.runs] == ["b1"] and runs.total == 1
            everyone = stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("ops"))
            assert {(s.id, s.owner) for s in everyone.sessions} == {("a1", "alice"), ("b1", "bob")}
        finally:
            engine.stop()


# -- the migration to owners ----------------------------------------------------------


def _v2_database(path: Path) -> None:
    """A database as an engine before owners left it: one session, two messages, a run."""
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).isoformat(timespec="microseconds")
    conn = sqlite3.connect(path)
    try:
        for script in _MIGRATIONS[:2]:
            conn.executescript(script)
        conn.execute(
            "INSERT INTO sessions (id, title, created_at, updated_at, reserved_seq)"
            " VALUES ('old', 'from v2', ?, ?, 0)",
            (stamp, stamp),
        )
        for position, (role, text) in enumerate(
            [(Role.USER, "old question"), (Role.ASSISTANT, "old answer")]
        ):
            body = message_to_dict(Message(f"m{position}", role, [TextPart(text)], run_id="r0"))
            conn.execute(
                "INSERT INTO messages (session_id, position, id, body) VALUES ('old', ?, ?, ?)",
                (position, f"m{position}", json.dumps(body)),
            )
        conn.execute(
            "INSERT INTO runs (session_id, id, status, started_at, finished_at, start_seq)"
            " VALUES ('old', 'r0', 'succeeded', ?, ?, 1)",
            (stamp, stamp),
        )
        conn.execute("PRAGMA user_version = 2")
        conn.commit()
    finally:
        conn.close()


def _counts(path: Path) -> tuple[int, int, int, int, list[str]]:
    conn = sqlite3.connect(path)
    try:
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        counts = [
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("sessions", "messages", "runs")
        ]
        owners = [row[0] for row in conn.execute("SELECT owner FROM sessions")]
    finally:
        conn.close()
    return version, counts[0], counts[1], counts[2], owners


async def test_a_v2_database_migrates_with_its_sessions_ownerless(tmp_path: Path) -> None:
    assert SCHEMA_VERSION >= 3  # v3 added the owner column
    path = tmp_path / "v2.db"
    _v2_database(path)
    store = f"sqlite:///{path}"

    settings = engine_settings(AGENTIK_STORE=store, AGENTIK_TOKENS=TOKENS_ENV, AGENTIK_ADMINS="ops")
    async with running_engine(settings) as h:
        listed = await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("ops"))
        assert [(s.id, s.owner, s.title, s.message_count) for s in listed.sessions] == [
            ("old", "", "from v2", 2)
        ]
        messages = await h.stub.ListMessages(
            pb.ListMessagesRequest(session_id="old"), metadata=as_("ops")
        )
        assert [m.content[0].text.text for m in messages.messages] == [
            "old question",
            "old answer",
        ]
        run = await h.stub.GetRun(pb.GetRunRequest(run_id="r0"), metadata=as_("ops"))
        assert run.session_id == "old" and run.status == pb.RUN_STATUS_SUCCEEDED

        error = await rpc_error(
            h.stub.GetSession(pb.GetSessionRequest(session_id="old"), metadata=as_("alice"))
        )
        assert error.code() == grpc.StatusCode.NOT_FOUND
        error = await rpc_error(h.stub.GetRun(pb.GetRunRequest(run_id="r0"), metadata=as_("alice")))
        assert error.code() == grpc.StatusCode.NOT_FOUND
        mine = await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=as_("alice"))
        assert mine.total == 0 and not mine.sessions
        runs = await h.stub.ListRuns(pb.ListRunsRequest(), metadata=as_("alice"))
        assert runs.total == 0

    assert _counts(path) == (SCHEMA_VERSION, 1, 2, 1, [""])

    async with running_engine(engine_settings(AGENTIK_STORE=store)) as h:
        session = await h.stub.GetSession(pb.GetSessionRequest(session_id="old"))
        assert session.owner == "" and session.message_count == 2
        listed = await h.stub.ListSessions(pb.ListSessionsRequest())
        assert listed.total == 1
        runs = await h.stub.ListRuns(pb.ListRunsRequest())
        assert [r.id for r in runs.runs] == ["r0"]
