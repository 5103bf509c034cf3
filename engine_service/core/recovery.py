"""Closing the runs a dead engine left RUNNING, from what it managed to store.

An engine killed mid-run leaves its run RUNNING, its last events (up to one flush
interval) unstored, and the partial answer only in the event log. The next engine closes
such a run as the interrupt path would have: what was open (reasoning, text, tool calls)
is ended, the partial answer rebuilt from the stored ``TEXT_MESSAGE_CONTENT`` events is
kept as an interrupted assistant message, tool calls that never got a result get an
error result (the LLM requires one per call), and ``RUN_FINISHED`` with the cancelled
outcome ends the run.

The closing events continue after the session's ``reserved_seq``, not after its last
stored event: the dead engine may have shown clients seqs up to the reservation, and a
client resuming from any of them must get the closing events next, never an old id.

Safe to repeat: a partial message already stored (a crash during recovery) is not
stored twice, and the run's end is stored with its closing events in one transaction, and
with the outbox rows that tell of it (its webhook, its A2A push updates: ``deliveries``),
so an engine killed right after the close cannot lose them. The close is made only while
the run is RUNNING on the replica it was read on (``RunHold``): a replica that lost the run
to another (which resumed or closed it) writes nothing of its close, and adds no row.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from engine_service.core import events as ev
from engine_service.core.bounds import MESSAGE_ROOM, bound_message
from engine_service.core.deliveries import Delivery
from engine_service.core.history import new_id
from engine_service.core.models import (
    Message,
    MessageStatus,
    Role,
    RunRecord,
    RunStatus,
    TextPart,
)
from engine_service.core.store import RunHold, SessionStore
from engine_service.core.tool_calls import step_call_id

__all__ = [
    "ABANDONED_CODE",
    "RESUMED",
    "EndDeliveries",
    "SUPERSEDED",
    "RunClosed",
    "close_abandoned_run",
    "read_run",
]

ABANDONED_CODE = "abandoned"
_ABANDONED_MESSAGE = "the engine stopped while this run was in flight"
_NO_RESULT = "error: the engine stopped before the tool finished"
_READ_BATCH = 1000

RESUMED = "resumed"
"""The ``CUSTOM`` event that marks a run going on after its engine died (``core.resume``)."""
SUPERSEDED = "superseded"
"""The ``CUSTOM`` event that says a partial answer clients saw is replaced by a new one."""


@dataclass(frozen=True, slots=True)
class RunClosed:
    """How a run its dead engine left was closed without running again (here, or as
    ``core.resume`` found it answered already): what its webhook tells (``core.notices``)."""

    final: ev.RunFinished | ev.RunError
    """Its terminal event, as stored."""
    messages: list[Message]
    """The session's messages once it was closed (its last answer among them)."""


EndDeliveries = Callable[[RunClosed], Awaitable[Sequence[Delivery]]]
"""The outbox rows of a closed run's end (its webhook, its A2A push updates), made from
how it was closed, to be stored with the close (``core.takeover``)."""


@dataclass(slots=True)
class _OpenWork:
    """What a run's stored events leave open, in the order it was opened."""

    reasoning: list[str] = field(default_factory=list)
    texts: dict[str, list[str]] = field(default_factory=dict)
    """Text message id → its deltas, for messages not ended yet."""
    ended_texts: dict[str, list[str]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    stored: set[str] = field(default_factory=set)
    results: set[str] = field(default_factory=set)
    resumes: int = 0
    """How many times the run was resumed (its ``resumed`` events, ``core.resume``)."""
    started: set[str] = field(default_factory=set)
    """Tool calls stored as started (``core.tool_calls``), whether done or not."""
    steps: list[str] = field(default_factory=list)
    """Steps started and not finished (their ``STEP_FINISHED`` is owed)."""

    def see(self, body: ev.EventBody) -> None:
        if isinstance(body, ev.ReasoningStart):
            self.reasoning.append(body.message_id)
        elif isinstance(body, ev.ReasoningEnd) and body.message_id in self.reasoning:
            self.reasoning.remove(body.message_id)
        elif isinstance(body, ev.TextMessageStart):
            self.texts.setdefault(body.message_id, [])
        elif isinstance(body, ev.TextMessageContent):
            self.texts.setdefault(body.message_id, []).append(body.delta)
        elif isinstance(body, ev.TextMessageEnd) and body.message_id in self.texts:
            self.ended_texts[body.message_id] = self.texts.pop(body.message_id)
        elif isinstance(body, ev.ToolCallStart):
            self.calls.append(body.tool_call_id)
        elif isinstance(body, ev.ToolCallEnd) and body.tool_call_id in self.calls:
            self.calls.remove(body.tool_call_id)
        elif isinstance(body, ev.ToolCallResult):
            self.results.add(body.tool_call_id)
        elif isinstance(body, ev.MessageStored):
            self.stored.add(body.message.id)
        elif isinstance(body, ev.StepStarted):
            self.steps.append(body.step_name)
            if call_id := step_call_id(body.step_name):
                self.started.add(call_id)
        elif isinstance(body, ev.StepFinished) and body.step_name in self.steps:
            self.steps.remove(body.step_name)
        elif isinstance(body, ev.Custom) and body.name == RESUMED:
            self.resumes += 1


async def read_run(store: SessionStore, run: RunRecord) -> _OpenWork:
    work = _OpenWork()
    after = max(run.start_seq - 1, 0)
    while True:
        batch = await store.read_events(run.session_id, after, _READ_BATCH)
        for event in batch:
            if event.run_id == run.id:
                work.see(event.body)
        if len(batch) < _READ_BATCH:
            return work
        after = batch[-1].seq


async def close_abandoned_run(
    store: SessionStore,
    run: RunRecord,
    now: datetime,
    *,
    max_event_bytes: int = 1024 * 1024,
    error: ev.RunError | None = None,
    deliveries: EndDeliveries | None = None,
) -> RunClosed:
    """Store the closing events and the end of ``run``, with the outbox rows
    ``deliveries`` makes of it, in one transaction; how it ended. Only while ``run`` is
    RUNNING on ``run.replica``: else nothing is written and ``InvalidInput`` raised.

    The partial answer rebuilt from its deltas is clipped to one event (``core.bounds``).
    With ``error`` the run ends failed with it instead of interrupted (a run resumed too
    often, ``core.resume``)."""
    hold = RunHold(run.id, run.replica)
    work = await read_run(store, run)
    history = await store.all_messages(run.session_id)
    known = {m.id for m in history}
    bodies: list[ev.EventBody] = []
    for reasoning_id in work.reasoning:
        bodies += [ev.ReasoningMessageEnd(reasoning_id), ev.ReasoningEnd(reasoning_id)]
    bodies += [ev.TextMessageEnd(message_id) for message_id in work.texts]
    bodies += [ev.ToolCallEnd(call_id) for call_id in work.calls]

    kept: list[Message] = []
    for message_id, deltas in (work.ended_texts | work.texts).items():
        if message_id in work.stored or not deltas:
            continue
        partial = Message(
            id=message_id,
            role=Role.ASSISTANT,
            content=[TextPart("".join(deltas))],
            status=MessageStatus.INTERRUPTED,
            created_at=now,
            run_id=run.id,
        )
        kept.append(bound_message(partial, max_event_bytes - MESSAGE_ROOM))
    answered = {m.tool_call_id for m in history if m.role is Role.TOOL}
    results: list[tuple[str, Message]] = []
    for message in history:
        if message.run_id != run.id or message.role is not Role.ASSISTANT:
            continue
        for call in message.tool_calls:
            if call.id not in answered:
                result = Message(
                    id=new_id(),
                    role=Role.TOOL,
                    content=[TextPart(_NO_RESULT)],
                    tool_call_id=call.id,
                    status=MessageStatus.ERROR,
                    created_at=now,
                    run_id=run.id,
                )
                results.append((call.id, result))

    fresh = [m for m in kept if m.id not in known] + [m for _, m in results]
    if fresh:
        await store.append_messages(run.session_id, fresh, hold=hold)
    bodies += [ev.MessageStored(m) for m in kept]
    for call_id, result in results:
        bodies.append(ev.ToolCallResult(result.id, call_id, _NO_RESULT, is_error=True))
        bodies.append(ev.MessageStored(result))
    bodies += [ev.StepFinished(name) for name in work.steps]  # after the cut calls' results
    final = error if error is not None else ev.RunFinished(outcome=ev.Outcome.CANCELLED)
    bodies.append(final)

    session = await store.get_session(run.session_id)
    first = max(session.last_seq, session.reserved_seq) + 1
    stamp = time.time()
    closing = [
        ev.Event(first + i, stamp, run.session_id, run.id, body) for i, body in enumerate(bodies)
    ]
    closed = RunClosed(final, history + fresh)
    rows = await deliveries(closed) if deliveries is not None else ()
    await store.finish_run(
        run.session_id,
        run.id,
        RunStatus.FAILED if error is not None else RunStatus.INTERRUPTED,
        now,
        error.code if error is not None else ABANDONED_CODE,
        error.message if error is not None else _ABANDONED_MESSAGE,
        events=closing,
        hold=hold,
        deliveries=rows,
    )
    return closed
