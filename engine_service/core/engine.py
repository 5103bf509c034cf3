"""``Engine``: the transport-free API the gRPC servicer (and tests) call.

It validates requests, owns the running runs, and hands out event streams. Runs live
here, not in any RPC: a caller that goes away leaves its run running, and its owner can
pick up the rest with ``subscribe``.

Every operation takes the ``Caller``: the one place that decides who sees what. A
session belongs to the principal that created it; to anyone else (but an admin) it does
not exist — the same ``SessionNotFound`` an unknown id gets, so no answer hints at it.

Its parts each have one job and get callbacks, not the engine: ``core.follow`` (the hubs
and their followers), ``core.health`` (storage health, retention), ``core.records`` (the
read side), ``core.intake`` (a run's input), ``core.run_table`` (the runs in flight),
``core.unsettled`` (ends waiting to be stored), ``core.leases``, ``core.takeover`` (runs
taken over and handed over); a run is ``core.turn.Run``.

Words: a run is *stopped* (``stop_run``; the ``Interrupt`` RPC); a run *asks* a person
through an ``Interrupt`` (human in the loop, AG-UI's word); replicas send each other
*signals* (``SignalKind.STOP`` asks the one holding a run to stop it).

Several engines may share one store (``store.shared``): each runs its own runs under a
lease (``core.leases``), follows the others' runs from the store as their signals say
events were stored (with a poll as a safety net), and signals a stop for a run it does
not hold to the replica that does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine_service.core import events as ev
from engine_service.core.agents import AgentProfile, Agents
from engine_service.core.bounds import bound_message
from engine_service.core.budget import TokenBudget
from engine_service.core.caller import Caller
from engine_service.core.chat import ChatModel
from engine_service.core.clock import utc_now
from engine_service.core.context import Anchors
from engine_service.core.errors import (
    AgentikError,
    InvalidInput,
    QuotaExceeded,
    ShuttingDown,
    StorageUnavailable,
)
from engine_service.core.follow import Hubs, flat, of_run
from engine_service.core.health import StorageHealth, prune_periodically
from engine_service.core.history import new_id
from engine_service.core.hitl import Decision, admit
from engine_service.core.ids import check_id
from engine_service.core.intake import (
    check_input,
    check_media,
    first_title,
    opening,
    read_history,
    started_from,
)
from engine_service.core.kept_input import keep
from engine_service.core.leases import LeaseKeeper, new_replica_id
from engine_service.core.limits import EngineLimits
from engine_service.core.models import (
    Interrupt,
    Message,
    RunInput,
    RunStatus,
    Session,
)
from engine_service.core.notices import Notices
from engine_service.core.observe import RunLog, RunObserver, RunObservers
from engine_service.core.quota import SessionQuota
from engine_service.core.registry import ToolRegistry
from engine_service.core.run_table import RunTable
from engine_service.core.run_webhooks import webhook_for
from engine_service.core.stopping import Stopping
from engine_service.core.store import Checkpoint, RunBegun, SessionStore, Signal
from engine_service.core.streams import StreamSlots
from engine_service.core.takeover import Resumed, TakeOver, hand_over
from engine_service.core.tool import session_key
from engine_service.core.trace import NO_TRACER, Tracer
from engine_service.core.turn import Run
from engine_service.core.unsettled import Unsettled

__all__ = ["Engine", "EngineLimits", "RunHandle"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RunHandle:
    """A run that has been accepted; ``events`` streams it from RUN_STARTED to its end."""

    session_id: str
    run_id: str
    after_seq: int
    session: Session | None = field(default=None, compare=False, repr=False)
    """The session as the run began it: its stream needs no read of the store to start."""


class Engine(Stopping):
    """Sessions, runs, stops and subscriptions over a store, a model and tools (the read
    side of sessions, messages and run records is ``core.records``)."""

    def __init__(
        self,
        store: SessionStore,
        model: ChatModel,
        tools: ToolRegistry,
        limits: EngineLimits | None = None,
        tracer: Tracer = NO_TRACER,
        observers: Sequence[RunObserver] = (),
        agents: Agents | None = None,
    ) -> None:
        """``observers`` hear of each run's start and end, after the run log. ``agents``:
        the agents served (``core.agents``); None: one, with ``model`` and every tool."""
        super().__init__(store, limits or EngineLimits())
        self.tracer = tracer
        """Opens each run's spans (``core.trace``); records nothing unless tracing is on."""
        self.tools = tools
        """Every tool of the engine; each agent sees its own ``ToolView`` of them."""
        self.agents = agents or Agents.single(model, tools, self.limits.run)
        self.observer = RunObservers([RunLog(), *observers])
        self.budget = TokenBudget(store, self.limits.tokens_per_day)
        self._anchors = Anchors()
        """The LLM's count of each session's last request (``core.context``)."""
        self._runs = RunTable(self.limits)
        """The runs in flight here, by session (``core.run_table``)."""
        self.quota = SessionQuota(store, self.limits.max_sessions_per_caller)
        self.streams = StreamSlots(self.limits.max_streams, self.limits.max_streams_per_caller)
        """The event streams clients hold open here (``core.streams``): the transports take
        a slot for each before its first event."""
        self._accepting = True
        self._pruner: asyncio.Task[None] | None = None
        self._unsettled = Unsettled(on_settled=self._settled)
        """Runs that ended but whose end could not be stored (``core.unsettled``)."""
        self._recovered = False
        self._health = StorageHealth(store, on_writable=self._store_what_waited)
        self._writing = self._health.writing
        self._hubs = Hubs(
            store,
            max_event_bytes=self.limits.run.max_event_bytes,
            is_local=lambda session_id: session_id in self._runs,
            is_unsettled=lambda session_id: session_id in self._unsettled,
            accepting=lambda: self._accepting,
        )
        self.tools_settled: Callable[[], Awaitable[None]] | None = None
        """Awaited before a run is resumed: until the tool sources (MCP servers, A2A
        agents) have connected or failed, so the resumed run knows its calls' tools."""
        self.replica = new_replica_id()
        self._take_over = TakeOver(
            store,
            self.limits,
            is_engine_tool=lambda name: self.tools.get(name) is not None,
            launch=self._launch_resumed,
            # notices: made below
            deliveries=lambda *closed: self.notices.closed_deliveries(*closed),
            stored=lambda: self.notices.wake(),
            tools_settled=lambda: self.tools_settled,
            event_limit=lambda: self._event_limit,
            replica=self.replica,
        )
        """Resumes (or closes) the runs whose engine died (``core.takeover``)."""
        self.notices = Notices()
        """Run webhooks and A2A push (their ``webhooks`` and ``push`` set by the server)."""
        self._leases: LeaseKeeper | None = None
        if store.shared:
            self._leases = LeaseKeeper(
                store,
                self.replica,
                self.limits.lease_seconds,
                is_local=lambda session_id: session_id in self._runs,
                on_lost=self._leases_lost,
                max_event_bytes=self.limits.run.max_event_bytes,
                take_over=self._take_over,
            )

    @property
    def model(self) -> ChatModel:
        """The default agent's model."""
        return self.agents.get("").model

    @model.setter
    def model(self, model: ChatModel) -> None:
        self.agents.swap_model(self.model, model)

    def observe(self, observer: RunObserver) -> None:
        """Tell ``observer`` of every run started from now on (its start and its end)."""
        self.observer = RunObservers([*self.observer.observers, observer])

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Close runs a dead engine left behind and start event retention.

        A store that cannot write does not stop the start: reads are served, writes fail
        with ``StorageUnavailable``, and the recovery runs once the store writes again.
        """
        if self._leases is not None:
            # Shared: the other replicas' runs are alive while their leases are.
            self._recovered = True
            await self.store.watch(self._on_signal)
            self._leases.start()
        else:
            try:
                await self._recover()
            except StorageUnavailable as exc:
                self._health.failed(exc)
        if self.limits.event_retention > 0:
            pruning = prune_periodically(self.store, self.limits.event_retention)
            self._pruner = asyncio.get_running_loop().create_task(pruning)

    async def _recover(self) -> None:
        await self._take_over.left_behind(lambda session_id: session_id in self._runs)
        self._recovered = True

    def _launch_resumed(self, resumed: Resumed) -> None:
        """Start a run taken over (``core.takeover``) as its conversation's agent."""
        session = resumed.session
        run = self._launch(
            session,
            resumed.run_input,
            resumed.principal,
            self.agents.of_session(session),
            [bound_message(m, self._message_limit) for m in resumed.history],
            incoming=[],
            decisions=resumed.decisions,
            resume_point=resumed.point,
        )
        run.report.resumes = resumed.point.resumes
        run.report.resumed_on = self.replica

    # -- storage health -----------------------------------------------------------

    @property
    def storage_ok(self) -> bool:
        """False from a failed write until a write probe succeeds again."""
        return self._health.ok

    def on_storage_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ok)`` whenever the store starts or stops failing."""
        self._health.on_change(listener)

    async def _store_what_waited(self) -> None:
        """The store writes again: store the ends that waited, and recover if not yet."""
        await self._unsettled.store_all()
        if not self._recovered:
            await self._recover()

    def _settled(self, run: Run) -> None:
        """The end of ``run`` that waited for the store is stored (its webhooks with it),
        or another replica closed or took over the run meanwhile (``lost_at``): then, as
        in ``_run_done``, the followers here read what that replica stored and follow the
        run there to its end, instead of ending at the store's last seq as it was then."""
        self.notices.settled(run)
        if run.lost_at:
            self._hubs.lost(run.hub, run.run_id, run.lost_at, run.lost_to)
        else:
            run.hub.notify()
        self._hubs.drop_if_unused(run.hub)

    async def shutdown(self, grace: float) -> None:
        """Take no new runs, let runs finish within ``grace`` seconds, stop the rest.

        With a shared store, ``resume_runs`` and another replica alive (renewing its
        leases: ``LeaseKeeper.others_alive``), the runs are handed over instead: each
        stops at its next step boundary (an LLM round at once; running tools may finish
        within ``grace``), its events stored, and the lease is released, so another
        replica resumes it within a third of ``lease_seconds`` (or the first to start)."""
        self._accepting = False
        if self.hands_over and self._runs and self._leases is not None:
            await hand_over(self._runs.all(), self._leases, grace)
        tasks = [r.task for r in self._runs.all() if r.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            if pending:
                self.stop_all()
                await asyncio.wait(pending, timeout=5.0)
        await self.notices.drain(5.0)
        if self._pruner is not None:
            self._pruner.cancel()
        if self._leases is not None:
            await self._leases.leave()  # gone: no replica counts on this one
        self._health.stop()
        await self._unsettled.store_at_shutdown()
        self._hubs.wake_all()
        for model in self.agents.models():
            await model.aclose()

    @property
    def hands_over(self) -> bool:
        """Whether a shutdown hands the runs over (a shared store, ``resume_runs``)."""
        return self._leases is not None and self.limits.resume_runs

    def stop_all(self) -> int:
        """Stop every local run now (a shutdown told not to wait); how many."""
        return self._runs.stop_all()

    @property
    def runs_in_flight(self) -> int:
        return len(self._runs)

    @property
    def accepting(self) -> bool:
        return self._accepting

    @property
    def followers(self) -> int:
        """Followers of this engine's hubs: every event stream open here (a client's, or
        one the engine reads itself)."""
        return self._hubs.followers

    # -- sessions (created, renamed, forked: core.sessions) --------------------------

    async def delete_session(self, caller: Caller, session_id: str) -> None:
        await self._session(caller, session_id)
        self._unsettled.refuse(session_id)
        await self._writing(self.store.delete_session(session_id))
        self._hubs.drop(session_id)

    # -- runs ---------------------------------------------------------------------

    async def start_run(self, caller: Caller, run_input: RunInput) -> RunHandle:
        """Accept a run and start it; raises before anything is streamed when it cannot run."""
        check_id(run_input.session_id, "session_id")
        if run_input.run_id:
            check_id(run_input.run_id, "run_id")
        else:
            run_input.run_id = new_id()
        if run_input.parent_run_id:
            check_id(run_input.parent_run_id, "parent_run_id")
        if not self._accepting:
            raise ShuttingDown()
        self._runs.check_room(caller.principal)
        named = self.agents.get(run_input.agent)  # AgentNotFound before anything is written
        incoming = check_input(run_input, named.limits, self.tools.get, named.about)
        kept = keep(run_input, named.limits.max_event_bytes)  # for a resume elsewhere
        self.notices.check_run(run_input)
        await self.budget.check(caller.principal)
        session_id = run_input.session_id
        if not incoming and not run_input.resume:
            await self._refuse_empty_history(caller, run_input)
        decisions: list[Decision] = []

        resumed: list[str] = []

        def admit_run(pending: list[Interrupt]) -> None:
            decisions[:] = admit(pending, run_input.resume, utc_now())
            resumed[:] = [pending[0].run_id] if pending and run_input.resume else []

        if session_id in self._unsettled:
            # Refused either way; but to anyone else it is not found, never "not stored yet".
            await self._session(caller, session_id, "session_id")
        self._unsettled.refuse(session_id)
        # A run stores RUN_STARTED and its new input as it begins (a later one reads what
        # it starts from there too): one commit before the LLM's answer, not two or three.
        # Not for an agent with ``max_runs`` nor with push configs, whose checks and
        # writes come after ``begin_run``.
        first = None if named.max_runs or run_input.push_configs else opening(run_input, incoming)
        begun = await self._writing(
            self.store.begin_run(
                session_id,
                run_input.run_id,
                utc_now(),
                create=run_input.create_session,
                reserve=self.limits.run.seq_block,
                owner=caller.principal,
                require_owner=not caller.admin,
                lease=self._leases.lease() if self._leases is not None else None,
                parent_run_id=run_input.parent_run_id,
                admit=admit_run,
                agent=named.name,
                kept=kept,
                opening=first,
            )
        )
        try:
            if begun.created:  # the run made its conversation: one more of the caller's
                await self.quota.check_made(caller.principal)
            await self.notices.keep_push_configs(run_input)
            profile = self.agents.for_run(begun.session, run_input.agent)
            if profile is not named:  # a request naming no agent, on another agent's session
                check_media(incoming, profile.limits, profile.about)
            checkpoint: Checkpoint | None = None
            history: list[Message] = []
            if begun.context is not None:  # read as it began, its new messages stored
                checkpoint, history, incoming = started_from(
                    begun.context, incoming, self._message_limit
                )
            elif not begun.opened:  # else the conversation had no messages: nothing to read
                checkpoint, history, incoming = await read_history(
                    self.store, begun.session, run_input.reconcile, incoming, self._message_limit
                )
        except BaseException as exc:
            await self._writing(
                self.store.finish_run(
                    session_id,
                    run_input.run_id,
                    RunStatus.FAILED,
                    utc_now(),
                    events=_refused_start(begun, exc),
                )
            )
            if isinstance(exc, QuotaExceeded):  # the conversation it made goes with it
                await self._writing(self.store.delete_session(session_id))
            raise
        run_input.webhook_url = webhook_for(run_input.webhook_url, begun.session)
        run = self._launch(
            begun.session,
            run_input,
            caller.principal,
            profile,
            history,
            opened=begun.opened,
            incoming=incoming,
            decisions=decisions,
            title="" if begun.opened else first_title(begun.session, incoming),
            checkpoint=checkpoint,
        )
        self.notices.started(run, resumed[0] if resumed else "")
        return RunHandle(session_id, run_input.run_id, begun.start_after, begun.session)

    def _launch(
        self,
        session: Session,
        run_input: RunInput,
        principal: str,
        profile: AgentProfile,
        history: list[Message],
        opened: Sequence[ev.Event] = (),
        **more: Any,
    ) -> Run:
        """Make a run of ``profile`` in ``session`` (its hub begun, holding the ``opened``
        events ``begin_run`` stored), count it, start it; ``more``: the rest of ``Run``'s
        arguments (a new run's input, a resume's place)."""
        hub = self._hubs.hub(session)
        start_after = opened[0].seq - 1 if opened else session.last_seq
        hub.begin(run_input.run_id, start_after, session.reserved_seq, opened)
        run = Run(
            store=self.store,
            model=profile.model,
            tools=profile.tools,
            limits=profile.limits,
            hub=hub,
            run_input=run_input,
            history=history,
            state=session.state,
            on_done=self._run_done,
            on_storage_error=self._health.failed,
            tracer=self.tracer,
            observer=self.observer,
            principal=principal,
            session_key=session_key(session.id, session.owner, session.created_at),
            budget=self.budget,
            anchors=self._anchors,
            replica=self.replica if self.store.shared else "",
            opened=opened,
            **more,
        )
        run.end_deliveries = self.notices.end_deliveries  # stored with its end
        self._runs.add(run, principal, session.owner)
        self.agents.started(session.id, profile.name)
        run.report.agent = profile.name
        run.start()
        return run

    def _run_done(self, run: Run) -> None:
        if self._runs.remove(run):
            self.agents.ended(run.session_id)
        self.notices.ended(run)
        hub = run.hub
        if not run.settled:
            self._unsettled.hold(run)
        if run.lost_at:
            # Its end is the other replica's: the followers here (the run's own stream
            # among them) read what that replica stored, and follow it there if it goes on.
            self._hubs.lost(hub, run.run_id, run.lost_at, run.lost_to)
        else:
            # Followers may still be behind (the run's own caller usually is): they read the
            # rest from memory. The buffer goes when they do, or when the next run starts.
            hub.end(run.run_id)
        self._hubs.drop_if_unused(hub)

    def run_events(self, handle: RunHandle) -> AsyncIterator[ev.Event]:
        """The events of one run, from RUN_STARTED to RUN_FINISHED or RUN_ERROR (the handle
        is the proof the caller was allowed to start it)."""
        return flat(self.run_event_lists(handle))

    def run_event_lists(self, handle: RunHandle) -> AsyncIterator[list[ev.Event]]:
        """As :meth:`run_events`, the events that are ready together as one list."""
        # While the run is the hub's, the hub holds all its events: no read of the session.
        live = self._hubs.running(handle.session_id, handle.run_id)
        lists = self._hubs.follow_lists(
            handle.session_id,
            handle.after_seq,
            until_idle=True,
            session=handle.session if live else None,
        )
        return of_run(lists, handle.run_id)

    # -- several replicas -----------------------------------------------------------

    def _on_signal(self, signal: Signal) -> None:
        """What another replica (or this one, through the store) says about a session."""
        if not self._runs.on_signal(signal):
            self._hubs.on_signal(signal)  # another replica's run

    def _leases_lost(self) -> None:
        self._runs.stop_all()

    # -- subscriptions ------------------------------------------------------------

    def subscribe(
        self, caller: Caller, session_id: str, after_seq: int, *, until_idle: bool = False
    ) -> AsyncIterator[ev.Event]:
        """Stored events after ``after_seq``, then live ones: no gap, no duplicate; with
        ``until_idle`` it ends once it has caught up and no run is active."""
        return flat(self.subscribe_lists(caller, session_id, after_seq, until_idle=until_idle))

    async def subscribe_lists(
        self, caller: Caller, session_id: str, after_seq: int, *, until_idle: bool = False
    ) -> AsyncIterator[list[ev.Event]]:
        """As :meth:`subscribe`, the events that are ready together as one list."""
        if after_seq < 0:
            raise InvalidInput("after_seq must not be negative")
        session = await self._session(caller, session_id, "session_id")
        shown = self._hubs.shown_seq(session)
        if after_seq > shown:
            # No client was shown a seq past it (events are shown once stored, or by this
            # engine when their store failed): such a point, e.g. of a conversation deleted
            # and made again under its id, would wait for ever for events it skipped.
            raise InvalidInput(
                f"after_seq {after_seq} is past the session's last event ({shown}): resume"
                " after an event this session sent"
            )
        lists = self._hubs.follow_lists(
            session_id, after_seq, until_idle=until_idle, session=session
        )
        async for events in lists:
            yield events


def _refused_start(begun: RunBegun, exc: BaseException) -> list[ev.Event]:
    """What closes a run refused after ``begin_run`` stored its opening: a RUN_ERROR after
    its RUN_STARTED (nothing when it stored none)."""
    if not begun.opened:
        return []
    last = begun.opened[-1]
    error = (
        ev.RunError(exc.message, exc.code)
        if isinstance(exc, AgentikError)
        else ev.RunError("the run could not start", "internal")
    )
    return [ev.Event(last.seq + 1, time.time(), last.session_id, last.run_id, error)]
