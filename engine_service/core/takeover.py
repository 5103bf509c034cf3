"""Runs that change engines: taken over when their engine died, handed over when it stops.

One job, out of ``Engine``, with a narrow interface (callbacks, as ``core.leases``):

- :class:`TakeOver` gets a run whose engine died (this one, before a restart; another
  replica whose lease expired) and resumes it from its last checkpoint (``core.resume``),
  with what it kept of its request (``core.kept_input``: the client's tools and context, a
  person's answers it was carrying out), or closes it as interrupted when ``resume_runs``
  is off. The engine starts the resumed run through ``launch``, with the webhook the run
  named (kept with it) or its conversation's default; a run closed instead is told to
  ``closed``, which posts its end to that webhook too.
- :func:`hand_over` stops a stopping replica's runs at their next step boundary and
  releases their leases, for another replica to resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine_service.core import events as ev
from engine_service.core.clock import utc_now
from engine_service.core.errors import (
    AgentikError,
    InputRequired,
    InvalidInput,
    StorageUnavailable,
)
from engine_service.core.hitl import Decision, admit, needs_approval
from engine_service.core.kept_input import restore
from engine_service.core.leases import LeaseKeeper
from engine_service.core.limits import EngineLimits
from engine_service.core.models import (
    Message,
    ResumeEntry,
    RunInput,
    RunRecord,
    Session,
    ToolCall,
)
from engine_service.core.recovery import RunClosed, close_abandoned_run
from engine_service.core.resume import IN_DOUBT, ResumePoint, Resumption, resume_run
from engine_service.core.run_webhooks import webhook_for
from engine_service.core.store import SessionStore
from engine_service.core.tool import session_key

__all__ = ["Resumed", "TakeOver", "hand_over"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Resumed:
    """A run ready to go on: what ``launch`` needs to start it."""

    session: Session
    run_input: RunInput
    principal: str
    history: list[Message]
    decisions: list[Decision]
    point: ResumePoint


class TakeOver:
    """Resumes (or closes) the runs whose engine died; call it with each one."""

    def __init__(
        self,
        store: SessionStore,
        limits: EngineLimits,
        *,
        is_engine_tool: Callable[[str], bool],
        launch: Callable[[Resumed], object],
        closed: Callable[[str, str, RunRecord, RunClosed], None],
        tools_settled: Callable[[], Callable[[], Awaitable[None]] | None],
        event_limit: Callable[[], int],
        replica: str,
    ) -> None:
        """``tools_settled``: the awaitable to wait for before a resume (the tool sources
        connected), if any; ``launch`` starts the resumed run; ``closed(webhook, run,
        how)`` tells of a run closed instead (``webhook``: where its end is posted, "" for
        nowhere)."""
        self.store = store
        self.limits = limits
        self._is_engine_tool = is_engine_tool
        self._launch = launch
        self._closed = closed
        self._tools_settled = tools_settled
        self._event_limit = event_limit
        self.replica = replica

    async def __call__(self, record: RunRecord) -> None:
        if not self.limits.resume_runs:
            closed = await close_abandoned_run(
                self.store, record, utc_now(), max_event_bytes=self._event_limit()
            )
            log.warning(
                "run %s of session %s lost its engine; stored as interrupted with what it had said",
                record.id,
                record.session_id,
            )
            await self._tell(record, closed)
            return
        settled = self._tools_settled()
        if settled is not None:
            await settled()
        kept = restore(await self.store.kept_input(record.session_id, record.id))
        decisions = await self._decisions(record, kept.resume)
        run_limits = self.limits.run
        resumed = await resume_run(
            self.store,
            record,
            utc_now(),
            max_resumes=self.limits.max_resumes,
            is_engine_tool=self._is_engine_tool,
            seq_block=run_limits.seq_block,
            max_event_bytes=self._event_limit(),
            idempotent=run_limits.idempotent,
            in_doubt=run_limits.in_doubt,
            carrying_out=bool(decisions),
            starts_stored=kept.starts,
        )
        if isinstance(resumed, RunClosed):
            log.warning(
                "run %s of session %s lost its engine and was closed (nothing to resume, "
                "already answered, or resumed too often)",
                record.id,
                record.session_id,
            )
            await self._tell(record, resumed, kept.webhook)
            return
        decisions, ask = self._sort_decisions(decisions, resumed)
        run_input = RunInput(
            record.session_id,
            record.id,
            parent_run_id=record.parent_run_id,
            tools=kept.tools,
            context=kept.context,
            webhook_url=webhook_for(kept.webhook, resumed.session),
        )
        point = ResumePoint(
            resumes=resumed.resumes,
            rounds_done=resumed.rounds,
            rerun=resumed.rerun,
            ask_again=[*resumed.ask, *ask],
            pending=resumed.pending,
            usage_before=ev.Usage(
                input_tokens=record.input_tokens,
                output_tokens=record.output_tokens,
                cached_tokens=record.cached_tokens,
            ),
        )
        self._launch(
            Resumed(
                resumed.session, run_input, resumed.principal, resumed.history, decisions, point
            )
        )
        log.warning(
            "run %s of session %s lost its engine; resumed here (replica %s, resume %d of "
            "at most %d) after %d tool rounds",
            record.id,
            record.session_id,
            self.replica,
            resumed.resumes,
            self.limits.max_resumes,
            resumed.rounds,
        )

    async def _tell(self, record: RunRecord, closed: RunClosed, webhook: str | None = None) -> None:
        """Tell ``closed`` of a run closed here, with the webhook it named (None: not read
        yet) or its conversation's default. A failed read loses the webhook, not the close."""
        try:
            if webhook is None:
                webhook = restore(await self.store.kept_input(record.session_id, record.id)).webhook
            session = await self.store.get_session(record.session_id)
        except AgentikError as exc:
            log.error("the webhook of run %s is lost: %s", record.id, exc.message)
            return
        key = session_key(session.id, session.owner, session.created_at)
        self._closed(webhook_for(webhook, session), key, record, closed)

    async def left_behind(self, is_local: Callable[[str], bool]) -> None:
        """Take over every RUNNING run in the store but this engine's own (``is_local``:
        started after a failed recovery): a single engine starting again."""
        for run in await self.store.running_runs():
            if not is_local(run.session_id):
                await self(run)

    async def _decisions(self, record: RunRecord, entries: Sequence[ResumeEntry]) -> list[Decision]:
        """The person's answers the run was carrying out, made again from the entries it
        kept while their interrupts are still pending (none once it carried them out)."""
        if not entries:
            return []
        session = await self.store.get_session(record.session_id)
        if not session.interrupts:
            return []
        try:
            # As decided when the run began: an interrupt that expired since stays answered.
            return admit(session.interrupts, entries, record.started_at)
        except (InvalidInput, InputRequired):
            return []

    def _sort_decisions(
        self, decisions: list[Decision], resumed: Resumption
    ) -> tuple[list[Decision], list[ToolCall]]:
        """The decisions to carry out, and approved calls in doubt to ask about again: an
        approved call stored as started without a result may have run (never twice
        silently: an idempotent tool runs again, another is asked about, or with
        ``in_doubt = "error"`` gets an error result)."""
        limits = self.limits.run
        kept: list[Decision] = []
        ask: list[ToolCall] = []
        for decision in decisions:
            call = decision.run
            in_doubt = (
                call is not None
                and call.id in resumed.started
                and call.id not in resumed.answered
                and not needs_approval(call.name, limits.idempotent)
            )
            if not in_doubt or call is None:
                kept.append(decision)
            elif limits.in_doubt == "error":
                kept.append(Decision(decision.interrupt, result=IN_DOUBT))
            else:
                ask.append(call)
        return kept, ask


class _Handing(Protocol):
    """What ``hand_over`` needs of a run (``core.turn.Run``)."""

    @property
    def task(self) -> asyncio.Task[None] | None: ...

    @property
    def handing_over(self) -> bool: ...

    @property
    def final(self) -> object: ...

    def hand_over(self) -> None: ...

    def stop(self) -> None: ...


async def hand_over(runs: Sequence[_Handing], leases: LeaseKeeper, grace: float) -> int:
    """Stop ``runs`` at their next step boundary (an LLM round at once; running tools may
    finish within ``grace``), their events stored, and release their leases: another
    replica resumes them. Only when another replica is alive (renewing its leases) to take
    them: with none, nothing is done (the runs get ``grace`` to finish, as with one
    engine). How many were handed over."""
    if not await leases.others_alive():
        log.warning(
            "shutting down: no other replica is alive to take %d runs over; they get %g s "
            "to finish",
            len(runs),
            grace,
        )
        return 0
    for run in runs:
        run.hand_over()
    tasks = [r.task for r in runs if r.task is not None]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=grace)
        if pending:  # tools that did not finish in time: cut (in doubt elsewhere)
            for run in runs:
                if run.task in pending:
                    run.stop()
            await asyncio.wait(pending, timeout=5.0)
    await leases.stop()  # no renewal after the release below
    handed = [r for r in runs if r.handing_over and r.final is None]
    try:
        # Expired now: the other replicas claim them at their next lease tick.
        await leases.release()
    except StorageUnavailable as exc:
        log.error("the leases could not be released (%s): runs resume once they lapse", exc)
    log.warning(
        "shutting down: %d runs handed over to the other replicas (their leases released)",
        len(handed),
    )
    return len(handed)
