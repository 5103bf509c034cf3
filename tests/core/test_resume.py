"""``core.resume``: where a run whose engine died stood, and what is stored to go on.

On the memory store, with the events and messages a dead engine leaves behind: the cut
answer is ended and superseded, the resume is marked after every reserved seq, in-doubt
calls are sorted by policy, a run that had answered is finished, and one resumed too
often is stopped with ``resume_limit``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.models import (
    Message,
    Role,
    RunRecord,
    RunStatus,
    TextPart,
    ToolCall,
)
from engine_service.core.recovery import RunClosed
from engine_service.core.resume import IN_DOUBT, RESUME_LIMIT_CODE, Resumption, resume_run
from engine_service.stores.memory import MemorySessionStore

NOW = datetime(2026, 12, 5, tzinfo=UTC)
ENGINE_TOOLS = {"charge", "current_time"}


async def _dead_run(
    store: MemorySessionStore, *messages: Message, started: tuple[str, ...] = ()
) -> RunRecord:
    """A run that stored ``messages`` and began an answer "m2" when its engine died, the
    tool calls ``started`` stored as started."""
    begun = await store.begin_run("s", "r", NOW, create=True, reserve=64)
    user = Message(id="u", role=Role.USER, content=[TextPart("hi")], run_id="r")
    await store.append_messages("s", [user, *messages])
    bodies: list[ev.EventBody] = [
        ev.RunStarted(),
        ev.MessageStored(user),
        *(ev.MessageStored(m) for m in messages),
        *(ev.StepStarted(f"tool_call:{call_id}") for call_id in started),
        ev.TextMessageStart("m2"),
        ev.TextMessageContent("m2", "half an ans"),
    ]
    first = begun.session.last_seq + 1
    events = [ev.Event(first + i, time.time(), "s", "r", b) for i, b in enumerate(bodies)]
    await store.append_events("s", events)
    return await store.get_run("s", "r")


async def _resume(
    store: MemorySessionStore, run: RunRecord, *, max_resumes: int = 3, in_doubt: str = "ask"
) -> Resumption | RunClosed:
    return await resume_run(
        store,
        run,
        NOW,
        max_resumes=max_resumes,
        is_engine_tool=ENGINE_TOOLS.__contains__,
        seq_block=64,
        idempotent=("current_*",),
        in_doubt=in_doubt,
    )


async def _run_events(store: MemorySessionStore, after: int) -> list[ev.Event]:
    return [e for e in await store.read_events("s", after, 0) if e.run_id == "r"]


async def test_a_cut_answer_is_ended_superseded_and_the_resume_marked_after_the_reservation() -> (
    None
):
    store = MemorySessionStore()
    run = await _dead_run(store)
    before = await store.get_session("s")
    resumed = await _resume(store, run)
    assert isinstance(resumed, Resumption) and resumed.resumes == 1 and resumed.rounds == 0
    added = await _run_events(store, before.last_seq)
    assert added[0].seq == before.reserved_seq + 1  # after every seq the dead engine held
    assert [type(e.body) for e in added] == [ev.TextMessageEnd, ev.Custom, ev.Custom]
    superseded, marked = added[1].body, added[2].body
    assert isinstance(superseded, ev.Custom) and superseded.name == "superseded"
    assert isinstance(superseded.value, dict) and superseded.value["messageId"] == "m2"
    assert isinstance(marked, ev.Custom) and marked.name == "resumed"
    # The history keeps only what the LLM should see: no partial answer.
    assert [m.id for m in resumed.history] == ["u"]
    assert resumed.session.reserved_seq >= added[-1].seq + 64
    assert (await store.get_run("s", "r")).status is RunStatus.RUNNING


async def test_in_doubt_calls_are_run_again_asked_about_or_answered_with_an_error() -> None:
    calls = [
        ToolCall("t1", "current_time", "{}"),
        ToolCall("c1", "charge", '{"cents": 5}'),
        ToolCall("f1", "frontend", "{}"),
    ]
    asked = Message(id="m1", role=Role.ASSISTANT, tool_calls=calls, run_id="r")
    store = MemorySessionStore()
    run = await _dead_run(store, asked, started=("c1",))
    before = await store.get_session("s")
    resumed = await _resume(store, run)
    assert isinstance(resumed, Resumption) and resumed.rounds == 1
    assert [c.id for c in resumed.rerun] == ["t1"]
    assert [c.id for c in resumed.ask] == ["c1"]
    assert resumed.pending == ["f1"]  # the client's call: the run ends waiting for it
    # The cut call's step is closed, so a client's started steps all finish.
    closing = [e.body for e in await _run_events(store, before.last_seq)]
    assert ev.StepFinished("tool_call:c1") in closing

    store = MemorySessionStore()
    run = await _dead_run(store, asked, started=("c1",))
    resumed = await _resume(store, run, in_doubt="error")
    assert (
        isinstance(resumed, Resumption)
        and [c.id for c in resumed.rerun] == ["t1"]
        and not resumed.ask
    )
    results = [m for m in resumed.history if m.role is Role.TOOL]
    assert [(m.tool_call_id, m.content) for m in results] == [("c1", [TextPart(IN_DOUBT)])]
    assert results[0] in await store.all_messages("s")


async def test_a_call_never_stored_as_started_runs_it_was_cut_before_it_could_run() -> None:
    """Its round's message is stored, its start is not: it never ran, so it runs now
    (a tool that is not idempotent included), without asking anyone."""
    calls = [ToolCall("c1", "charge", '{"cents": 5}'), ToolCall("c2", "charge", "{}")]
    asked = Message(id="m1", role=Role.ASSISTANT, tool_calls=calls, run_id="r")
    store = MemorySessionStore()
    resumed = await _resume(store, await _dead_run(store, asked, started=("c2",)))
    assert isinstance(resumed, Resumption)
    assert [c.id for c in resumed.rerun] == ["c1"]
    assert [c.id for c in resumed.ask] == ["c2"]


async def test_a_run_whose_engine_did_not_store_starts_has_every_unfinished_call_in_doubt() -> None:
    """Begun by an engine from before starts were stored (nothing kept with the run): a
    call without a stored start may still have run, so it is asked about, not run."""
    calls = [ToolCall("c1", "charge", '{"cents": 5}')]
    asked = Message(id="m1", role=Role.ASSISTANT, tool_calls=calls, run_id="r")
    store = MemorySessionStore()
    run = await _dead_run(store, asked)
    resumed = await resume_run(
        store,
        run,
        NOW,
        max_resumes=3,
        is_engine_tool=ENGINE_TOOLS.__contains__,
        seq_block=64,
        starts_stored=False,
    )
    assert isinstance(resumed, Resumption) and not resumed.rerun
    assert [c.id for c in resumed.ask] == ["c1"]


async def test_a_run_whose_last_round_was_stored_whole_is_finished_not_asked_again() -> None:
    answer = Message(id="m1", role=Role.ASSISTANT, content=[TextPart("done")], run_id="r")
    store = MemorySessionStore()
    closed = await _resume(store, await _dead_run(store, answer))
    assert isinstance(closed, RunClosed)  # how it ended, for its webhook
    assert isinstance(closed.final, ev.RunFinished) and closed.final.outcome is ev.Outcome.SUCCESS
    assert [m.id for m in closed.messages] == ["u", "m1"]
    run = await store.get_run("s", "r")
    assert run.status is RunStatus.SUCCEEDED
    last = (await _run_events(store, 0))[-1].body
    assert isinstance(last, ev.RunFinished) and last.outcome is ev.Outcome.SUCCESS


async def test_a_run_resumed_max_resumes_times_stops_with_resume_limit() -> None:
    store = MemorySessionStore()
    run = await _dead_run(store)
    assert isinstance(await _resume(store, run, max_resumes=1), Resumption)
    closed = await _resume(store, run, max_resumes=1)
    assert isinstance(closed, RunClosed) and isinstance(closed.final, ev.RunError)
    assert closed.final.code == RESUME_LIMIT_CODE
    run = await store.get_run("s", "r")
    assert (run.status, run.error_code) == (RunStatus.FAILED, RESUME_LIMIT_CODE)
    last = (await _run_events(store, 0))[-1].body
    assert isinstance(last, ev.RunError) and last.code == RESUME_LIMIT_CODE


async def test_a_run_cut_before_it_stored_its_input_is_closed_as_interrupted() -> None:
    store = MemorySessionStore()
    await store.begin_run("s", "r", NOW, create=True)
    closed = await _resume(store, await store.get_run("s", "r"))
    assert isinstance(closed, RunClosed) and isinstance(closed.final, ev.RunFinished)
    assert closed.final.outcome is ev.Outcome.CANCELLED
    assert (await store.get_run("s", "r")).status is RunStatus.INTERRUPTED
