"""A run its engine left RUNNING that the next engine closes instead of resuming has its
webhook stored with the close, in the same transaction: the outbox row is there the moment
the run is seen closed, with no step after it that a crash could cut.

The SQLite file holds run "r" of conversation "s" as a killed engine leaves it; an engine
(wired as the server wires it, its delivery worker not started) starts on it and closes
the run in its recovery. The file is read right after, in the same turn of the event loop:
nothing the engine does after the close has run yet."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from engine_service.build import build_engine
from engine_service.core import events as ev
from engine_service.core.deliveries import PushConfig
from engine_service.core.engine import Engine
from engine_service.core.kept_input import keep
from engine_service.core.models import (
    Interrupt,
    InterruptKind,
    Message,
    Role,
    RunInput,
    RunStatus,
    TextPart,
    ToolCall,
)
from engine_service.core.store import Lease, SessionStore
from engine_service.server import EngineServer
from engine_service.stores import SqliteSessionStore
from engine_service.stores.postgres import PostgresSessionStore
from tests.engine.harness import engine_settings
from tests.engine.webhooks.outbox import (
    postgres_rows,
    sqlite_push_rows,
    sqlite_rows,
    sqlite_run_status,
)
from tests.fakes.fake_openai import FakeOpenAI

T0 = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
HOOK = "http://127.0.0.1:9/hook"
"""Never called: the deliveries stay in the outbox (the worker is not started)."""


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def _left_running(
    store: SessionStore,
    *,
    said: bool = True,
    answered: bool = False,
    resumes: int = 0,
    lease: Lease | None = None,
) -> None:
    """Run "r" as an engine killed mid-run leaves it, its own webhook kept with it:
    ``said``: its input stored; ``answered``: its answer stored whole (else half an answer
    in its events only); ``resumes``: how often it was resumed already."""
    try:
        kept = keep(RunInput("s", "r", webhook_url=HOOK), 100_000)
        begun = await store.begin_run("s", "r", T0, create=True, reserve=64, kept=kept, lease=lease)
        bodies: list[ev.EventBody] = [ev.RunStarted()]
        if said:
            user = Message(id="u", role=Role.USER, content=[TextPart("go")], run_id="r")
            await store.append_messages("s", [user])
            bodies.append(ev.MessageStored(user))
        bodies += [
            ev.Custom("resumed", {"resumes": n + 1, "reason": "test"}) for n in range(resumes)
        ]
        bodies += [ev.TextMessageStart("m1"), ev.TextMessageContent("m1", "half an ans")]
        if answered:
            answer = Message(id="m1", role=Role.ASSISTANT, content=[TextPart("all")], run_id="r")
            await store.append_messages("s", [answer])
            bodies += [ev.TextMessageEnd("m1"), ev.MessageStored(answer)]
        first = begun.session.last_seq + 1
        events = [ev.Event(first + i, time.time(), "s", "r", b) for i, b in enumerate(bodies)]
        await store.append_events("s", events)
    finally:
        await store.close()


@asynccontextmanager
async def _engine_on(store: str, llm: FakeOpenAI, **env: str) -> AsyncIterator[Engine]:
    """An engine on ``store`` with its run webhooks and A2A push as the server sets them,
    not started."""
    settings = engine_settings(
        AGENTIK_STORE=store,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="1",
        **env,
    )
    engine = build_engine(settings)
    EngineServer(engine, settings)  # wires engine.notices; never started
    try:
        yield engine
    finally:
        await engine.shutdown(0)
        await engine.store.close()


async def _tools_fail() -> None:
    """The run's resume fails (waiting for its tools): the engine closes it instead."""
    raise RuntimeError("the tool sources could not be reached")


CASES: dict[str, tuple[dict[str, bool | int], dict[str, str], str, str]] = {
    # how the run was left, the settings, the run's stored end, its webhook's outcome
    "resume_runs off": ({}, {"AGENTIK_RESUME_RUNS": "false"}, "interrupted", "cancelled"),
    "resumed too often": ({"resumes": 1}, {"AGENTIK_MAX_RESUMES": "1"}, "failed", "error"),
    "cut before its input": ({"said": False}, {}, "interrupted", "cancelled"),
    "answered but for its end": ({"answered": True}, {}, "succeeded", "success"),
    "its resume failed": ({}, {}, "interrupted", "cancelled"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_a_run_the_next_engine_closes_has_its_webhook_stored_with_the_close(
    llm: FakeOpenAI, tmp_path: Path, case: str
) -> None:
    left, env, status, outcome = CASES[case]
    path = tmp_path / "agentik.db"
    shape = {"said": True, "answered": False, "resumes": 0} | left
    await _left_running(
        SqliteSessionStore(path),
        said=bool(shape["said"]),
        answered=bool(shape["answered"]),
        resumes=int(shape["resumes"]),
    )
    async with _engine_on(f"sqlite:///{path}", llm, **env) as engine:
        if case == "its resume failed":
            engine.tools_settled = _tools_fail
        await engine.start()  # its recovery closes the run
        # Read at once: no await since the close, so nothing after it has run.
        run_status, rows = sqlite_run_status(path, "r"), sqlite_rows(path, "r")
    assert run_status == status
    (row,) = rows
    payload = json.loads(row.payload)
    assert (row.status, row.id, payload["id"]) == ("pending", payload["id"], row.id)
    assert (payload["runId"], payload["outcome"]) == ("r", outcome)


async def test_of_two_replicas_that_took_a_dead_one_s_run_only_the_one_holding_it_closes_it(
    llm: FakeOpenAI, pg_url: str
) -> None:
    """Replica "dead" died mid-run; B claimed the run, stalled past its lease, and C claimed
    it in turn (``resume_runs = false``: each closes the run it takes). B, late, closes
    nothing and stores no webhook; C's close stores the run's end with its webhook's row,
    there as soon as the close returns."""
    await _left_running(PostgresSessionStore(pg_url), lease=Lease("dead", T0))
    off = {"AGENTIK_RESUME_RUNS": "false"}
    async with _engine_on(pg_url, llm, **off) as b, _engine_on(pg_url, llm, **off) as c:
        (by_b,) = await b.store.claim_expired_runs(b.replica, at(10), at(15))
        (by_c,) = await c.store.claim_expired_runs(c.replica, at(20), at(25))
        await b._take_over(by_b)
        assert postgres_rows(pg_url, "r") == []
        assert (await b.store.get_run("s", "r")).status is RunStatus.RUNNING
        await c._take_over(by_c)
        rows = postgres_rows(pg_url, "r")  # read at once, as above
        assert (await c.store.get_run("s", "r")).status is RunStatus.INTERRUPTED
    (row,) = rows
    payload = json.loads(row.payload)
    assert (payload["id"], payload["runId"], payload["outcome"]) == (row.id, "r", "cancelled")


async def test_a_reply_to_a_task_that_the_next_engine_closes_pushes_the_task_s_end(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """Run "task1" asked a person, its task has a push config; "reply2" carried the answer
    out and its engine died. The next engine closes "reply2" (resume_runs off): the close
    stores the task's updates for its config, though that engine never knew "reply2"
    resumed "task1" (only the store does)."""
    path = tmp_path / "agentik.db"
    store = SqliteSessionStore(path)
    try:
        await store.begin_run("s", "task1", T0, create=True)
        call = ToolCall("q1", "ask_user", "{}")
        asked = Interrupt("i1", InterruptKind.QUESTION, "task1", call, "which?")
        await store.finish_run("s", "task1", RunStatus.INPUT_REQUIRED, at(1), interrupts=[asked])
        await store.add_push_config(PushConfig("c1", "task1", "s", HOOK, at(1)), 10)
        await store.begin_run("s", "reply2", at(2), create=False, reserve=64)
        await store.resolve_interrupts("s", "reply2")
    finally:
        await store.close()
    async with _engine_on(f"sqlite:///{path}", llm, AGENTIK_RESUME_RUNS="false") as engine:
        await engine.start()  # its recovery closes "reply2"
        run_status, rows = sqlite_run_status(path, "reply2"), sqlite_push_rows(path)
    assert run_status == "interrupted"
    updates = [json.loads(row.payload)["statusUpdate"] for row in rows]
    assert [(u["taskId"], u["status"]["state"]) for u in updates] == [
        ("task1", "TASK_STATE_CANCELED")
    ]
