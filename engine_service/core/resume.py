"""Resuming a run whose engine died: it goes on from its last checkpoint.

A run's checkpoint is what the store holds of it: its messages (stored at each step's
end: the client's input, each LLM round's assistant message, each tool result) and its
events. From them, the engine that claims the run (a replica whose lease expired, a
SQLite engine started again) knows where the run stood:

- the LLM rounds done are its stored assistant messages; a round cut mid-stream (its
  message not stored) is asked again. The partial text clients saw of it is closed with
  ``TEXT_MESSAGE_END`` and a ``CUSTOM`` event ``superseded`` naming the message, so a UI
  can replace it; the new attempt is a new message. The stored history keeps only what
  the LLM should see next time: the partial is not stored.
- each engine tool call of a stored round is *done* when its result is stored, and
  *started* when its ``STEP_STARTED`` is (stored before a tool not listed idempotent
  runs: ``core.tool_calls``). One never started goes on as its round would have: it runs
  now, or, when it waits for a person (``ask_user``, a tool listed for approval: the run
  decides it, ``PersonInTheLoop.gated``), its approval or question is asked again; it
  never runs, nor is answered, without them. One started but not done was
  cut while it ran: it is *in doubt*, and never runs silently twice. A tool listed as
  idempotent (``[tools] idempotent``) runs again; any other call asks a person whether
  to run it again (an approval); or, with ``[tools] in_doubt = "error"``, gets an error
  result the LLM sees. Every attempt of a call carries the same idempotency key
  (``ToolContext.idempotency_key``).
- calls of tools the engine does not have are the client's: a run whose last round
  asked for them ends waiting for their results, as it would have.

What the dead engine left open is closed, a ``CUSTOM`` event ``resumed`` marks the
resume (their count in the log is the run's resume count: ``max_resumes`` stops a run
that keeps killing engines with ``resume_limit``), and the run goes on under the same
id, its events after every seq the dead engine may have shown (``reserved_seq``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery
from engine_service.core.history import new_id
from engine_service.core.hitl import needs_approval
from engine_service.core.models import (
    Message,
    MessageStatus,
    Role,
    RunRecord,
    RunStatus,
    Session,
    TextPart,
    ToolCall,
)
from engine_service.core.recovery import (
    RESUMED,
    SUPERSEDED,
    EndDeliveries,
    RunClosed,
    close_abandoned_run,
    read_run,
)
from engine_service.core.store import RunHold, SessionStore

__all__ = ["IN_DOUBT", "RESUME_LIMIT_CODE", "ResumePoint", "Resumption", "resume_run"]

RESUME_LIMIT_CODE = "resume_limit"
IN_DOUBT = (
    "error: the engine running this tool stopped before its result was stored; "
    "the call may or may not have taken effect"
)
_SUPERSEDED_REASON = "the engine answering stopped mid-answer; the answer is asked again"


@dataclass(slots=True)
class ResumePoint:
    """Where a resumed run goes on (``core.resume``)."""

    resumes: int
    """How many times the run was resumed after its engine died, this one included."""
    rounds_done: int = 0
    """Tool rounds it completed before it was cut."""
    rerun: list[ToolCall] = field(default_factory=list)
    """Calls run first: never started, or in doubt and idempotent."""
    ask_again: list[ToolCall] = field(default_factory=list)
    """Calls in doubt a person decides about (whether to run them again)."""
    pending: list[str] = field(default_factory=list)
    """The client's tool calls of the cut round, still without a result: the run ends
    waiting for them, as that round would have."""
    usage_before: ev.Usage | None = None
    """What the run's earlier engines used."""


@dataclass(slots=True)
class Resumption:
    """A run ready to go on: the session as stored after the resume's events, and the
    run's history (its in-doubt results included)."""

    run: RunRecord
    session: Session
    history: list[Message]
    resumes: int
    """Resumes of the run, this one included."""
    rounds: int
    """Tool rounds the run completed before it was cut."""
    principal: str
    """Whose run it is (budget, report): the session's owner."""
    rerun: list[ToolCall]
    """Calls never started, and in-doubt calls of idempotent tools: they go on as their
    round would have (run, or, for those that wait for a person, asked again:
    ``core.turn``)."""
    ask: list[ToolCall]
    """Other in-doubt calls: a person decides whether they run again."""
    pending: list[str]
    """The client's tool calls without a result (``ResumePoint.pending``)."""
    started: set[str]
    """Tool calls stored as started (done or not)."""
    answered: set[str]
    """Tool calls with a stored result."""


async def resume_run(
    store: SessionStore,
    run: RunRecord,
    now: datetime,
    *,
    max_resumes: int,
    is_engine_tool: Callable[[str], bool],
    seq_block: int,
    max_event_bytes: int = 1024 * 1024,
    idempotent: tuple[str, ...] = (),
    in_doubt: str = "ask",
    carrying_out: bool = False,
    starts_stored: bool = True,
    deliveries: EndDeliveries | None = None,
) -> Resumption | RunClosed:
    """Store the events that close what ``run``'s dead engine left open and mark its
    resume; the run to go on with, or how it ended when it was closed instead (nothing of
    it stored, its answer complete, or resumed ``max_resumes`` times already).
    ``carrying_out``: the run carries out a person's answers (kept with it), so it goes
    on even when it stored nothing yet. ``starts_stored``: whether its engine stored each
    tool call's start (``core.kept_input``); if not, every unfinished call is in doubt.
    A run closed instead has the outbox rows ``deliveries`` makes of its end stored with
    it (``close_abandoned_run``)."""
    work = await read_run(store, run)
    history = await store.all_messages(run.session_id)
    own = [m for m in history if m.run_id == run.id]
    if work.resumes >= max_resumes:
        error = ev.RunError(
            message=(
                f"the run was resumed {work.resumes} times after its engine stopped, its "
                "limit ([engine] max_resumes); it is not resumed again"
            ),
            code=RESUME_LIMIT_CODE,
        )
        return await close_abandoned_run(
            store, run, now, max_event_bytes=max_event_bytes, error=error, deliveries=deliveries
        )
    if not own and not carrying_out:
        # Cut before it stored its input: there is nothing to go on from.
        return await close_abandoned_run(
            store, run, now, max_event_bytes=max_event_bytes, deliveries=deliveries
        )

    bodies: list[ev.EventBody] = []
    for reasoning_id in work.reasoning:
        bodies += [ev.ReasoningMessageEnd(reasoning_id), ev.ReasoningEnd(reasoning_id)]
    bodies += [ev.TextMessageEnd(message_id) for message_id in work.texts]
    bodies += [ev.ToolCallEnd(call_id) for call_id in work.calls]
    for message_id in work.ended_texts | work.texts:
        if message_id not in work.stored:
            value = {"messageId": message_id, "reason": _SUPERSEDED_REASON}
            bodies.append(ev.Custom(SUPERSEDED, value))

    answered = {m.tool_call_id for m in history if m.role is Role.TOOL}
    results: list[tuple[str, Message]] = []
    client_calls: list[str] = []
    rerun: list[ToolCall] = []
    ask: list[ToolCall] = []
    for message in own:
        if message.role is not Role.ASSISTANT:
            continue
        for call in message.tool_calls:
            if call.id in answered:
                continue
            if not is_engine_tool(call.name):
                client_calls.append(call.id)
                continue
            never_started = starts_stored and call.id not in work.started
            if never_started or needs_approval(call.name, idempotent):
                rerun.append(call)  # never started (its start is stored first), or idempotent
                continue
            if in_doubt != "error":
                ask.append(call)
                continue
            result = Message(
                id=new_id(),
                role=Role.TOOL,
                content=[TextPart(IN_DOUBT)],
                tool_call_id=call.id,
                status=MessageStatus.ERROR,
                created_at=now,
                run_id=run.id,
            )
            results.append((call.id, result))
    if results:
        await store.append_messages(run.session_id, [m for _, m in results])
        history += [m for _, m in results]
    for call_id, result in results:
        bodies.append(ev.ToolCallResult(result.id, call_id, IN_DOUBT, is_error=True))
        bodies.append(ev.MessageStored(result))
    bodies += [ev.StepFinished(name) for name in work.steps]  # the cut calls' steps end

    last = own[-1] if own else None
    done = (
        last is not None
        and not carrying_out
        and last.role is Role.ASSISTANT
        and not results
        and not ({c.id for c in last.tool_calls} - set(client_calls))
    )
    if done:
        # Its last round was stored whole: the run had ended but for storing its end.
        end = ev.RunFinished(pending_tool_call_ids=client_calls)
        closed = RunClosed(end, history)
        rows = await deliveries(closed) if deliveries is not None else ()
        finish = RunStatus.SUCCEEDED
        await _store(store, run, [*bodies, end], finish=finish, end=end, now=now, rows=rows)
        return closed

    resumes = work.resumes + 1
    reason = "the engine running this run stopped; it goes on from its last checkpoint"
    bodies.append(ev.Custom(RESUMED, {"resumes": resumes, "reason": reason}))
    await _store(store, run, bodies, reserve=seq_block)
    session = await store.get_session(run.session_id)
    rounds = sum(1 for m in own if m.role is Role.ASSISTANT and m.tool_calls)
    return Resumption(
        run,
        session,
        history,
        resumes,
        rounds,
        session.owner,
        rerun,
        ask,
        client_calls,
        work.started,
        answered | {call_id for call_id, _ in results},
    )


async def _store(
    store: SessionStore,
    run: RunRecord,
    bodies: list[ev.EventBody],
    *,
    reserve: int = 0,
    finish: RunStatus | None = None,
    end: ev.RunFinished | None = None,
    now: datetime | None = None,
    rows: Sequence[Delivery] = (),
) -> None:
    """Store ``bodies`` after every seq the dead engine may have shown; with ``finish``
    the run's end in the same transaction, and the outbox ``rows`` that tell of it (only
    while the run is RUNNING on the replica it was read on)."""
    session = await store.get_session(run.session_id)
    first = max(session.last_seq, session.reserved_seq) + 1
    stamp = time.time()
    events = [
        ev.Event(first + i, stamp, run.session_id, run.id, body) for i, body in enumerate(bodies)
    ]
    if finish is not None and now is not None:
        pending = end.pending_tool_call_ids if end is not None else ()
        await store.finish_run(
            run.session_id,
            run.id,
            finish,
            now,
            "",
            "",
            pending,
            events=events,
            hold=RunHold(run.id, run.replica),
            deliveries=rows,
        )
        return
    last = events[-1].seq
    await store.append_events(run.session_id, events, reserve_through=last + reserve)
