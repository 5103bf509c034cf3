"""Runs that change engines: taken over when their engine died, handed over when it stops.

One job, out of ``Engine``, with a narrow interface (callbacks, as ``core.leases``):

- :class:`TakeOver` gets a run whose engine died (this one, before a restart; another
  replica whose lease expired) and resumes it from its last checkpoint (``core.resume``),
  with what it kept of its request (``core.kept_input``: the client's tools and context, a
  person's answers it was carrying out), or closes it as interrupted when ``resume_runs``
  is off. The engine starts the resumed run through ``launch``, with the webhook the run
  named (kept with it) or its conversation's default; a run closed instead (or after its
  resume failed) posts its end to that webhook too, its outbox row stored with the close
  (``deliveries``): an engine killed right after the close cannot lose it.
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
from engine_service.core.deliveries import Delivery
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
    RunStatus,
    Session,
    ToolCall,
)
from engine_service.core.recovery import EndDeliveries, RunClosed, close_abandoned_run
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
        deliveries: Callable[[str, str, RunRecord, RunClosed], Awaitable[Sequence[Delivery]]],
        stored: Callable[[], None],
        tools_settled: Callable[[], Callable[[], Awaitable[None]] | None],
        event_limit: Callable[[], int],
        replica: str,
    ) -> None:
        """``tools_settled``: the awaitable to wait for before a resume (the tool sources
        connected), if any; ``launch`` starts the resumed run. A run closed instead has the
        outbox rows ``deliveries(webhook, session_key, run, how)`` makes of its end stored
        with the close (``webhook``: where its end is posted, "" for nowhere); ``stored``
        is told once they are."""
        self.store = store
        self.limits = limits
        self._is_engine_tool = is_engine_tool
        self._launch = launch
        self._deliveries = deliveries
        self._stored = stored
        self._tools_settled = tools_settled
        self._event_limit = event_limit
        self.replica = replica

    async def __call__(self, record: RunRecord) -> None:
        """Resume ``record``, or close it. One whose resume (or close) fails is closed as
        interrupted, its webhook stored with that close; an error of that close is
        raised."""
        try:
            await self._take(record)
        except Exception:
            log.exception("run %s could not be resumed; closing it as interrupted", record.id)
            await self._close_failed(record)

    async def _take(self, record: RunRecord) -> None:
        if not self.limits.resume_runs:
            await close_abandoned_run(
                self.store,
                record,
                utc_now(),
                max_event_bytes=self._event_limit(),
                deliveries=self._rows(record, None),
            )
            self._stored()
            log.warning(
                "run %s of session %s lost its engine; stored as interrupted with what it had said",
                record.id,
                record.session_id,
            )
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
            deliveries=self._rows(record, kept.webhook),
        )
        if isinstance(resumed, RunClosed):
            self._stored()
            log.warning(
                "run %s of session %s lost its engine and was closed (nothing to resume, "
                "already answered, or resumed too often)",
                record.id,
                record.session_id,
            )
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

    async def _close_failed(self, record: RunRecord) -> None:
        """Close ``record`` as interrupted after its resume (or close) failed, with its
        webhook; not when it is no longer RUNNING here (it was closed, or another replica
        took it, meanwhile)."""
        now = await self.store.get_run(record.session_id, record.id)
        if now.status is not RunStatus.RUNNING or now.replica != record.replica:
            log.warning("run %s was closed or taken over meanwhile; not closed here", record.id)
            return
        await close_abandoned_run(
            self.store,
            record,
            utc_now(),
            max_event_bytes=self._event_limit(),
            deliveries=self._rows(record, None, or_none=True),
        )
        self._stored()

    def _rows(
        self, record: RunRecord, named: str | None, *, or_none: bool = False
    ) -> EndDeliveries:
        """What a close of ``record`` stores with its end: its end posted to the webhook it
        named (``named``; None: read from what it kept) or its conversation's default,
        read before the close. With ``or_none`` (a last resort) a failed read loses the
        webhook, not the close. Rows that cannot be made are lost (logged), not the close."""

        async def rows(closed: RunClosed) -> Sequence[Delivery]:
            try:
                webhook = named
                if webhook is None:
                    kept = await self.store.kept_input(record.session_id, record.id)
                    webhook = restore(kept).webhook
                session = await self.store.get_session(record.session_id)
            except AgentikError as exc:
                if not or_none:
                    raise
                log.error("the webhook of run %s is lost: %s", record.id, exc.message)
                return ()
            except Exception:  # a row the store cannot decode: the last resort closes still
                if not or_none:
                    raise
                log.exception("the webhook of run %s is lost", record.id)
                return ()
            key = session_key(session.id, session.owner, session.created_at)
            try:
                return await self._deliveries(webhook_for(webhook, session), key, record, closed)
            except Exception:  # the webhook is lost, not the close (logged)
                log.exception("run %s: its webhook could not be made", record.id)
                return ()

        return rows

    async def left_behind(self, is_local: Callable[[str], bool]) -> None:
        """Take over every RUNNING run in the store but this engine's own (``is_local``:
        started after a failed recovery): a single engine starting again. A store that
        fails (``StorageUnavailable``) stops it, to go on when the store writes again; a
        run that cannot even be closed for another reason (a row the store cannot decode)
        is logged and left RUNNING, for the next start, and the others are taken over: one
        such run does not keep the engine from starting."""
        for run in await self.store.running_runs():
            if is_local(run.session_id):
                continue
            try:
                await self(run)
            except StorageUnavailable:
                raise
            except Exception:
                log.exception(
                    "run %s could not be closed; it is tried again at the next start", run.id
                )

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
