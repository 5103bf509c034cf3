"""A run needs a message: none on an empty history is refused, none on a history answers again."""

from __future__ import annotations

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from tests.engine.harness import (
    Harness,
    kinds,
    refused,
    run,
    user,
)
from tests.fakes.fake_openai import FakeOpenAI

# -- 2. a run needs a message ------------------------------------------------------


async def test_a_run_with_no_messages_on_a_new_session_is_refused(harness: Harness) -> None:
    details = await refused(harness, pb.RunRequest(session_id="empty", create_session=True))

    assert details.startswith("messages: a run needs at least one message")
    assert (await harness.stub.ListSessions(pb.ListSessionsRequest())).total == 0


async def test_a_run_with_no_messages_on_a_session_without_history_is_refused(
    harness: Harness, llm: FakeOpenAI
) -> None:
    await harness.stub.CreateSession(pb.CreateSessionRequest(session_id="bare"))

    details = await refused(harness, pb.RunRequest(session_id="bare"))

    assert details.startswith("messages: a run needs at least one message")
    assert llm.requests == []
    runs = await harness.stub.ListRuns(pb.ListRunsRequest(session_id="bare"))
    assert runs.total == 0


async def test_a_run_replacing_the_history_with_nothing_is_refused(harness: Harness) -> None:
    await run(harness, pb.RunRequest(session_id="h", create_session=True, messages=[user("a")]))

    details = await refused(
        harness, pb.RunRequest(session_id="h", reconcile=pb.RECONCILE_MODE_REPLACE)
    )

    assert details.startswith("messages: a run needs at least one message")


async def test_a_run_with_no_new_messages_on_a_session_with_history_answers_again(
    harness: Harness,
) -> None:
    await run(harness, pb.RunRequest(session_id="h", create_session=True, messages=[user("a")]))

    events = await run(harness, pb.RunRequest(session_id="h"))

    assert kinds(events)[-1] == "run_finished"
