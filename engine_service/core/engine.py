"""``Engine``: the transport-free API the gRPC servicer (and tests) call.

It validates requests, owns the running turns and the per-session hubs, and hands out
event streams. Runs live here, not in any RPC: a caller that goes away leaves its run
running, and its owner can pick up the rest with ``subscribe``.

Every operation takes the ``Caller``: the one place that decides who sees what. A
session belongs to the principal that created it; to anyone else (but an admin) it does
not exist — the same ``SessionNotFound`` an unknown id gets, so no answer hints at it.

Several engines may share one store (``store.shared``): each runs its own turns under a
lease (``core.leases``), follows the others' runs from the store as their signals say
events were stored (with a poll as a safety net), and forwards an interrupt for a run it
does not hold to the replica that does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from engine_service.core import events as ev
from engine_service.core.bounds import (
    MESSAGE_ROOM,
    body_size,
    bound_message,
    bound_run,
    bound_session,
    bounded_events,
    bounded_page,
    fit_bytes,
    fit_page,
    message_size,
    run_size,
    session_size,
)
from engine_service.core.caller import Caller
from engine_service.core.chains import MAX_LAST_MESSAGES, RunChain, fit_chains, page_chains
from engine_service.core.chat import ChatModel
from engine_service.core.client_tools import check_client_tools
from engine_service.core.context import Anchors, refuse_too_long
from engine_service.core.errors import (
    InvalidInput,
    Overloaded,
    RateLimited,
    RunNotFound,
    SessionNotFound,
    ShuttingDown,
    StorageUnavailable,
)
from engine_service.core.history import new_id, prepare_incoming, reconcile
from engine_service.core.hitl import Decision, admit
from engine_service.core.hub import SessionHub
from engine_service.core.ids import check_id
from engine_service.core.leases import LeaseKeeper, new_replica_id
from engine_service.core.models import (
    UNSET,
    Interrupt,
    Message,
    ReconcileMode,
    Role,
    RunInput,
    RunRecord,
    RunStatus,
    Session,
    TextPart,
)
from engine_service.core.observe import RunLog, RunObserver, RunObservers
from engine_service.core.recovery import close_abandoned_run
from engine_service.core.registry import ToolRegistry
from engine_service.core.state import check_state
from engine_service.core.store import SessionStore, Signal, SignalKind
from engine_service.core.text import check_title, title_from
from engine_service.core.tool import session_key
from engine_service.core.trace import NO_TRACER, Tracer
from engine_service.core.turn import Turn, TurnLimits

__all__ = ["Engine", "EngineLimits", "RunHandle"]

log = logging.getLogger(__name__)

MAX_PAGE = 1000
MAX_CHAIN_PAGE = 100
"""Most runs one ListRunChains page reads."""
READ_BATCH = 500
STORE_BATCH = 8
"""Stored events a follower reads at first; it doubles while they are small (up to
``READ_BATCH``) and shrinks to what fits in ``max_event_bytes`` when they are big."""
LIVE_BATCH = 64
"""Most events a follower takes from the hub at once (and holds while it is not read)."""
STORAGE_PROBE_INTERVAL = 1.0
"""Seconds between write probes while the store fails."""
REMOTE_POLL_INTERVAL = 1.0
"""Seconds a follower of another replica's run waits for a signal before it reads the store."""

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EngineLimits:
    turn: TurnLimits = field(default_factory=TurnLimits)
    max_concurrent_runs: int = 512
    max_runs_per_caller: int = 0
    """Runs one principal may have in flight at once; 0: no limit of its own."""
    event_retention: float = 7 * 24 * 3600.0
    """Seconds stored events are kept; 0 keeps them forever."""
    lease_seconds: float = 10.0
    """With a shared store: a replica that died has its runs closed by another within this."""


@dataclass(slots=True)
class RunHandle:
    """A run that has been accepted; ``events`` streams it from RUN_STARTED to its end."""

    thread_id: str
    run_id: str
    after_seq: int


def _now() -> datetime:
    return datetime.now(UTC)


def _drop_unstored(hub: SessionHub, last_seq: int) -> None:
    """Another replica closed the hub's run, its end stored at ``last_seq``: the events
    not stored here never will be. Followers read the rest (that replica's closing
    events) from the store."""
    hub.flushed_seq = hub.last_seq
    hub.release()
    if hub.last_seq < last_seq:
        hub.resync(last_seq)


def _incarnation(session: Session) -> tuple[object, ...]:
    """What tells a session from a later one made under the same id."""
    return (session.created_at, session.owner)


class Engine:
    """Sessions, runs, interrupts and subscriptions over a store, a model and tools."""

    def __init__(
        self,
        store: SessionStore,
        model: ChatModel,
        tools: ToolRegistry,
        limits: EngineLimits | None = None,
        tracer: Tracer = NO_TRACER,
        observers: Sequence[RunObserver] = (),
    ) -> None:
        """``observers`` hear of each run's start and end, after the run log."""
        self.store = store
        self.tracer = tracer
        """Opens each run's spans (``core.trace``); records nothing unless tracing is on."""
        self.model = model
        self.tools = tools
        self.limits = limits or EngineLimits()
        self.observer = RunObservers([RunLog(), *observers])
        self._turns: dict[str, Turn] = {}
        self._turn_callers: dict[str, tuple[str, str]] = {}
        """(principal that started it, session owner) of each session's run in flight."""
        self._runs_by_caller: Counter[str] = Counter()
        self._hubs: dict[str, SessionHub] = {}
        self._accepting = True
        self._pruner: asyncio.Task[None] | None = None
        self._unsettled: dict[str, Turn] = {}
        """Runs that ended but whose end could not be stored, by session."""
        self._recovered = False
        self._storage_ok = True
        self._storage_prober: asyncio.Task[None] | None = None
        self._storage_listeners: list[Callable[[bool], None]] = []
        self.replica = new_replica_id()
        self._anchors = Anchors()
        """The LLM's count of each session's last request (``core.context``)."""
        self._leases: LeaseKeeper | None = None
        if store.shared:
            self._leases = LeaseKeeper(
                store,
                self.replica,
                self.limits.lease_seconds,
                is_local=lambda session_id: session_id in self._turns,
                on_lost=self._leases_lost,
                max_event_bytes=self.limits.turn.max_event_bytes,
            )

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
                self._storage_failed(exc)
        if self.limits.event_retention > 0:
            self._pruner = asyncio.get_running_loop().create_task(self._prune_periodically())

    async def _recover(self) -> None:
        for run in await self.store.running_runs():
            if run.session_id in self._turns:
                continue  # ours, started after a failed recovery; not abandoned
            await close_abandoned_run(self.store, run, _now(), max_event_bytes=self._event_limit)
            log.warning(
                "run %s of session %s was left running by a stopped engine; "
                "stored as interrupted with what it had said",
                run.id,
                run.session_id,
            )
        self._recovered = True

    # -- storage health -----------------------------------------------------------

    @property
    def storage_ok(self) -> bool:
        """False from a failed write until a write probe succeeds again."""
        return self._storage_ok

    def on_storage_change(self, listener: Callable[[bool], None]) -> None:
        """Call ``listener(ok)`` whenever the store starts or stops failing."""
        self._storage_listeners.append(listener)

    def _storage_failed(self, exc: StorageUnavailable) -> None:
        if self._storage_ok:
            log.error("%s; runs fail until it writes again", exc.message)
            self._storage_ok = False
            for listener in self._storage_listeners:
                listener(False)
        if self._storage_prober is None or self._storage_prober.done():
            self._storage_prober = asyncio.get_running_loop().create_task(self._probe_storage())

    async def _probe_storage(self) -> None:
        """Probe until the store writes, then store what waited and report healthy."""
        while True:
            await asyncio.sleep(STORAGE_PROBE_INTERVAL)
            try:
                await self.store.check_writable()
                for turn in list(self._unsettled.values()):
                    await self._settle_late(turn)
                if not self._recovered:
                    await self._recover()
            except StorageUnavailable:
                continue
            break
        log.warning("the store writes again; runs are accepted")
        self._storage_ok = True
        for listener in self._storage_listeners:
            listener(True)

    async def _settle_late(self, turn: Turn) -> None:
        """Store the end of a run that could not be stored when it ended. With a shared
        store another replica may have closed the run meanwhile (our lease lapsed while
        the store failed): its end is the stored one, and ours is dropped unseen."""
        try:
            await turn.settle()
        except InvalidInput:
            closed_at = await turn.closed_elsewhere()
            if closed_at is None:
                raise
            log.warning("run %s was closed by another replica meanwhile", turn.run_id)
            turn.lost_at = closed_at
            _drop_unstored(turn.hub, closed_at)
        self._settled(turn)

    def _settled(self, turn: Turn) -> None:
        if self._unsettled.get(turn.session_id) is turn:
            del self._unsettled[turn.session_id]
        turn.hub.notify()
        self._drop_hub_if_unused(turn.hub)

    async def _writing(self, call: Awaitable[T]) -> T:
        """Await a store call; a storage failure marks the store unhealthy on its way out."""
        try:
            return await call
        except StorageUnavailable as exc:
            self._storage_failed(exc)
            raise

    def _refuse_unsettled(self, session_id: str) -> None:
        turn = self._unsettled.get(session_id)
        if turn is not None:
            raise StorageUnavailable(
                f"storage unavailable: the end of run {turn.run_id!r} of this conversation "
                "is not stored yet; it is stored as soon as the store writes again"
            )

    async def shutdown(self, grace: float) -> None:
        """Take no new runs, let runs finish within ``grace`` seconds, interrupt the rest."""
        self._accepting = False
        tasks = [t.task for t in self._turns.values() if t.task is not None]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            if pending:
                for turn in list(self._turns.values()):
                    turn.interrupt()
                await asyncio.wait(pending, timeout=5.0)
        if self._pruner is not None:
            self._pruner.cancel()
        if self._leases is not None:
            await self._leases.stop()
        if self._storage_prober is not None:
            self._storage_prober.cancel()
        for turn in list(self._unsettled.values()):
            try:
                await turn.settle()
            except StorageUnavailable:
                log.error("run %s ends unstored; the next start closes it", turn.run_id)
        for hub in self._hubs.values():
            hub.notify()
        await self.model.aclose()

    def interrupt_all(self) -> int:
        """Interrupt every local run now (a shutdown told not to wait); how many."""
        turns = list(self._turns.values())
        for turn in turns:
            turn.interrupt()
        return len(turns)

    @property
    def runs_in_flight(self) -> int:
        return len(self._turns)

    @property
    def accepting(self) -> bool:
        return self._accepting

    async def _prune_periodically(self) -> None:
        period = min(max(self.limits.event_retention / 10, 1.0), 3600.0)
        while True:
            before = _now() - timedelta(seconds=self.limits.event_retention)
            removed = await self.store.prune_events(before)
            if removed:
                log.info("event retention removed %d stored events", removed)
            await asyncio.sleep(period)

    # -- access -----------------------------------------------------------------

    async def _session(self, caller: Caller, session_id: str, what: str = "session_id") -> Session:
        """The session if ``caller`` may see it; ``SessionNotFound`` otherwise, as for an
        id that does not exist."""
        check_id(session_id, what)
        session = await self.store.get_session(session_id)
        if not caller.owns(session.owner):
            raise SessionNotFound(session_id)
        return session

    # -- sessions -----------------------------------------------------------------

    async def create_session(
        self, caller: Caller, title: str = "", session_id: str = ""
    ) -> Session:
        check_title(title)
        if session_id:
            check_id(session_id, "session_id")
        return await self._writing(
            self.store.create_session(session_id or new_id(), title, _now(), owner=caller.principal)
        )

    async def get_session(self, caller: Caller, session_id: str) -> Session:
        return bound_session(await self._session(caller, session_id), self._event_limit)

    async def list_sessions(
        self, caller: Caller, offset: int, limit: int
    ) -> tuple[list[Session], int]:
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        if limit < 0 or limit > MAX_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
        sessions, total = await self.store.list_sessions(
            offset, limit or 50, owner=caller.owner_filter
        )
        # One page is one gRPC message: fewer items when they would not fit (the caller
        # pages on by offset; ``total`` says how many there are).
        bounded = [bound_session(s, self._event_limit) for s in sessions]
        return fit_page(bounded, session_size, self._event_limit), total

    async def rename_session(self, caller: Caller, session_id: str, title: str) -> Session:
        await self._session(caller, session_id)
        check_title(title)
        renamed = await self._writing(self.store.rename_session(session_id, title, _now()))
        return bound_session(renamed, self._event_limit)

    async def delete_session(self, caller: Caller, session_id: str) -> None:
        await self._session(caller, session_id)
        self._refuse_unsettled(session_id)
        await self._writing(self.store.delete_session(session_id))
        hub = self._hubs.pop(session_id, None)
        if hub is not None:
            hub.notify()

    async def list_messages(
        self, caller: Caller, session_id: str, after_id: str, limit: int, run_id: str = ""
    ) -> tuple[list[Message], bool]:
        await self._session(caller, session_id)
        if limit < 0 or limit > MAX_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
        # Checked here, so no store's error echoes a huge one back (gRPC cannot even send it).
        if after_id:
            check_id(after_id, "after_message_id")
        if run_id:
            check_id(run_id, "run_id")
        limit = limit or 100
        if not run_id:
            page, more = await self.store.list_messages(session_id, after_id, limit)
        else:
            await self.store.get_run(session_id, run_id)  # unknown run → RunNotFound
            # By index, not a read of the whole history (A2A reads a task's messages so).
            page, more = await self.store.list_run_messages(session_id, run_id, after_id, limit)
        # One page is one gRPC message: it holds what fits in max_event_bytes, each
        # message clipped to fit (rows stored before the bound, or under a larger one).
        bounded = bounded_page(page, self._message_limit, self.limits.turn.max_event_bytes)
        return bounded, more or len(bounded) < len(page)

    @property
    def _event_limit(self) -> int:
        """The most bytes one event, message, page or record may take (``core.bounds``)."""
        return self.limits.turn.max_event_bytes

    @property
    def _message_limit(self) -> int:
        """The most bytes one message may hold (``core.bounds``)."""
        return self.limits.turn.max_event_bytes - MESSAGE_ROOM

    def _refuse_oversized(self, messages: Sequence[Message]) -> None:
        """``InvalidInput`` naming the first new message too large to store and hand out."""
        limit = self._message_limit
        for index, message in enumerate(messages):
            size = message_size(message)
            if size > limit:
                raise InvalidInput(
                    f"messages[{index}] is about {size:,} bytes; a message may hold at most "
                    f"{limit:,} ([engine] max_event_bytes)"
                )

    # -- runs as records ----------------------------------------------------------

    async def get_run(self, caller: Caller, run_id: str, session_id: str = "") -> RunRecord:
        check_id(run_id, "run_id")
        if session_id:
            try:
                await self._session(caller, session_id)
            except SessionNotFound:
                raise RunNotFound(run_id) from None
            run = await self.store.get_run(session_id, run_id)
        else:
            run = await self.store.find_run(run_id, owner=caller.owner_filter)
        return bound_run(run, self._event_limit)

    async def list_runs(
        self, caller: Caller, session_id: str, offset: int, limit: int
    ) -> tuple[list[RunRecord], int]:
        if offset < 0:
            raise InvalidInput("offset must not be negative")
        if limit < 0 or limit > MAX_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_PAGE}")
        if session_id:
            await self._session(caller, session_id)
        runs, total = await self.store.page_runs(
            session_id, offset, limit or 50, owner=caller.owner_filter
        )
        bounded = [bound_run(r, self._event_limit) for r in runs]
        return fit_page(bounded, run_size, self._event_limit), total

    async def list_run_chains(
        self, caller: Caller, session_id: str, offset: int, limit: int, last_messages: int
    ) -> tuple[list[RunChain], int, int]:
        """A page of runs as chains (``core/chains.py``), each with its latest messages,
        bounded to one message of ``max_event_bytes``; the runs in all, and how many runs of
        the page the chains cover (the next page starts after them)."""
        if not 0 <= limit <= MAX_CHAIN_PAGE:
            raise InvalidInput(f"limit must be between 1 and {MAX_CHAIN_PAGE}")
        if not 0 <= last_messages <= MAX_LAST_MESSAGES:
            raise InvalidInput(f"last_messages must be between 0 and {MAX_LAST_MESSAGES}")
        page, total = await self.list_runs(caller, session_id, offset, limit or 50)
        chains = await page_chains(self.store, page, last_messages)
        fitted = fit_chains(chains, self._message_limit, self._event_limit)
        if len(fitted) == len(chains):
            return fitted, total, len(page)
        first_left_out = chains[len(fitted)].runs[0].id
        return fitted, total, [run.id for run in page].index(first_left_out)

    # -- runs ---------------------------------------------------------------------

    async def start_run(self, caller: Caller, run_input: RunInput) -> RunHandle:
        """Accept a run and start it; raises before anything is streamed when it cannot run."""
        check_id(run_input.thread_id, "session_id")
        if run_input.run_id:
            check_id(run_input.run_id, "run_id")
        else:
            run_input.run_id = new_id()
        if run_input.parent_run_id:
            check_id(run_input.parent_run_id, "parent_run_id")
        if not self._accepting:
            raise ShuttingDown()
        if len(self._turns) >= self.limits.max_concurrent_runs:
            raise Overloaded(
                f"the engine is running its maximum of {self.limits.max_concurrent_runs} runs"
            )
        own_limit = self.limits.max_runs_per_caller
        if own_limit and self._runs_by_caller[caller.principal] >= own_limit:
            raise RateLimited(
                f"you have {own_limit} runs in flight, your limit; wait for one to end",
                retry_after=1,
            )
        incoming = prepare_incoming(run_input.messages)
        check_client_tools(run_input.tools, lambda name: self.tools.get(name) is not None)
        self._refuse_oversized(incoming)
        refuse_too_long(incoming, self.limits.turn.context, self.limits.turn.system_prompt)
        for index, entry in enumerate(run_input.resume):
            check_id(entry.interrupt_id, f"resume[{index}].interrupt_id")
        if run_input.state is not UNSET:
            check_state(run_input.state, self.limits.turn.max_state_bytes)
        session_id = run_input.thread_id
        if not incoming and not run_input.resume:
            await self._refuse_empty_history(caller, run_input)
        decisions: list[Decision] = []

        def admit_run(pending: list[Interrupt]) -> None:
            decisions[:] = admit(pending, run_input.resume, _now())

        if session_id in self._unsettled:
            # Refused either way; but to anyone else it is not found, never "not stored yet".
            await self._session(caller, session_id, "session_id")
        self._refuse_unsettled(session_id)
        begun = await self._writing(
            self.store.begin_run(
                session_id,
                run_input.run_id,
                _now(),
                create=run_input.create_session,
                reserve=self.limits.turn.seq_block,
                owner=caller.principal,
                require_owner=not caller.admin,
                lease=self._leases.lease() if self._leases is not None else None,
                parent_run_id=run_input.parent_run_id,
                admit=admit_run,
            )
        )
        try:
            history: list[Message] = []
            # A conversation with no messages yet (just made, most often) has no history to
            # read: one store round trip less before the run starts.
            checkpoint = None
            if run_input.reconcile is ReconcileMode.APPEND and begun.session.message_count:
                # Context budget (core/context.py): the checkpoint and the messages after it
                # only, and which new ids are known by index: bounded by the window, not by
                # the conversation's length.
                checkpoint, history = await self.store.context_messages(session_id)
                known = await self.store.known_message_ids(session_id, [m.id for m in incoming])
                incoming = reconcile(known, incoming)
                # Rows stored before the bound (or under a larger one) are clipped on read.
                history = [bound_message(m, self._message_limit) for m in history]
        except BaseException:
            await self._writing(
                self.store.finish_run(session_id, run_input.run_id, RunStatus.FAILED, _now())
            )
            raise
        hub = self._hub(begun.session)
        if hub.flushed_seq == hub.last_seq:
            hub.release()  # the previous run's events, kept for followers still reading them
        if hub.last_seq != begun.session.last_seq:
            hub.resync(begun.session.last_seq)
        hub.reserved_seq = begun.session.reserved_seq
        hub.active_run_id = run_input.run_id
        turn = Turn(
            store=self.store,
            model=self.model,
            tools=self.tools,
            limits=self.limits.turn,
            hub=hub,
            run_input=run_input,
            incoming=incoming,
            history=history,
            state=begun.session.state,
            on_done=self._turn_done,
            on_storage_error=self._storage_failed,
            decisions=decisions,
            tracer=self.tracer,
            observer=self.observer,
            principal=caller.principal,
            session_key=session_key(session_id, begun.session.owner, begun.session.created_at),
            title=_first_title(begun.session, incoming),
            checkpoint=checkpoint,
            anchors=self._anchors,
        )
        self._turns[session_id] = turn
        self._turn_callers[session_id] = (caller.principal, begun.session.owner)
        self._runs_by_caller[caller.principal] += 1
        turn.start()
        return RunHandle(session_id, run_input.run_id, hub.last_seq)

    async def _refuse_empty_history(self, caller: Caller, run_input: RunInput) -> None:
        """A run without new messages answers the stored history; with none, refuse."""
        if run_input.reconcile is ReconcileMode.APPEND:
            try:
                session = await self._session(caller, run_input.thread_id, "session_id")
            except SessionNotFound:
                if not run_input.create_session:
                    raise
            else:
                if session.message_count > 0:
                    return
        raise InvalidInput(
            "messages: a run needs at least one message, and this conversation has no "
            "history to answer"
        )

    def _turn_done(self, turn: Turn) -> None:
        if self._turns.get(turn.session_id) is turn:
            del self._turns[turn.session_id]
            principal, _ = self._turn_callers.pop(turn.session_id, ("", ""))
            self._runs_by_caller[principal] -= 1
            if self._runs_by_caller[principal] <= 0:
                del self._runs_by_caller[principal]
        hub = turn.hub
        if hub.active_run_id == turn.run_id:
            hub.active_run_id = ""
        if turn.lost_at:
            _drop_unstored(hub, turn.lost_at)
        if not turn.settled:
            self._unsettled[turn.session_id] = turn
        # Followers may still be behind (the run's own caller usually is): they read the
        # rest from memory. The buffer goes when they do, or when the next run starts.
        hub.reveal()
        self._drop_hub_if_unused(hub)

    async def run_events(self, handle: RunHandle) -> AsyncIterator[ev.Event]:
        """The events of one run, from RUN_STARTED to RUN_FINISHED or RUN_ERROR (the handle
        is the proof the caller was allowed to start it)."""
        async for event in self._follow(handle.thread_id, handle.after_seq, until_idle=True):
            if event.run_id != handle.run_id:
                continue
            yield event
            if isinstance(event.body, ev.TERMINAL):
                return

    async def interrupt(self, caller: Caller, thread_id: str, run_id: str = "") -> tuple[bool, str]:
        """Stop the session's run in flight; (False, "") when it is idle."""
        check_id(thread_id, "session_id")
        if run_id:
            check_id(run_id, "run_id")
        started = self._turn_callers.get(thread_id)
        if started is not None and caller.owns(started[1]):
            ending = self._turns.get(thread_id)
            if ending is not None and ending.final is not None and ending.task is not None:
                # The run has ended and its end is being stored: nothing is left to stop
                # but what it may have asked a person, pending once that is stored.
                await asyncio.wait([ending.task])
            else:
                stopped = self.interrupt_now(thread_id, run_id)  # no store read: no waiting
                if stopped:
                    return True, stopped
        session = await self._session(caller, thread_id, "session_id")  # not theirs → not found
        stopped = self.interrupt_now(thread_id, run_id)
        remote = session.active_run_id
        if not stopped and self.store.shared and remote and run_id in ("", remote):
            # Held by another replica: it stops the run when the signal reaches it.
            await self.store.signal(Signal(SignalKind.INTERRUPT, thread_id, remote))
            return True, remote
        asked_by = {i.run_id for i in session.interrupts}
        if not stopped and not remote and asked_by and run_id in ("", *asked_by):
            # Waiting for a person: stop waiting. The run that asked ends interrupted; its
            # unanswered calls read as unanswered to the LLM on the next turn.
            cancelled = await self._writing(self.store.cancel_interrupts(thread_id))
            if cancelled:
                return True, cancelled[-1]
        return bool(stopped), stopped

    def interrupt_now(self, thread_id: str, run_id: str = "") -> str:
        """Interrupt the local run of a session, if any; returns its id or ""."""
        turn = self._turns.get(thread_id)
        if turn is None or (run_id and turn.run_id != run_id):
            return ""
        turn.interrupt()
        return turn.run_id

    def active_run(self, thread_id: str) -> Turn | None:
        return self._turns.get(thread_id)

    # -- subscriptions ------------------------------------------------------------

    def _hub(self, session: Session) -> SessionHub:
        hub = self._hubs.get(session.id)
        if hub is not None and hub.incarnation != _incarnation(session):
            # The hub of a session deleted on another replica, whose id was taken again:
            # its followers end, as at a delete here, and never see the new session.
            del self._hubs[session.id]
            hub.notify()
            hub = None
        if hub is None:
            hub = self._hubs[session.id] = SessionHub(session.id, session.last_seq)
            hub.incarnation = _incarnation(session)
        return hub

    def _drop_hub_if_unused(self, hub: SessionHub) -> None:
        if (
            not hub.followers
            and not hub.active_run_id
            and hub.session_id not in self._unsettled
            and self._hubs.get(hub.session_id) is hub
        ):
            del self._hubs[hub.session_id]

    # -- several replicas -----------------------------------------------------------

    def _on_signal(self, signal: Signal) -> None:
        """What another replica (or this one, through the store) says about a session."""
        session_id = signal.session_id
        if signal.kind is SignalKind.INTERRUPT:
            self.interrupt_now(session_id, signal.run_id)
            return
        turn = self._turns.get(session_id)
        if turn is not None:
            if (
                signal.kind is SignalKind.ENDED
                and signal.run_id == turn.run_id
                and turn.final is None
                and not turn.lost_at
            ):
                # Our run, ended by someone else: another replica took it over when our
                # lease lapsed (a stalled loop, a partition). Stop without writing more.
                log.warning(
                    "run %s of session %s was closed by another replica; stopping it here",
                    turn.run_id,
                    session_id,
                )
                turn.lose(signal.last_seq)
            return  # our own run
        hub = self._hubs.get(session_id)
        if hub is None:
            return  # nobody here follows it
        active = hub.active_run_id
        if signal.kind is SignalKind.BEGUN:
            if signal.last_seq < hub.last_seq:
                return  # late news of a run whose events were already seen (ours, ended)
            active = signal.run_id
        elif signal.kind is SignalKind.ENDED and active == signal.run_id:
            active = ""
        self._catch_up(hub, signal.last_seq, active)

    def _catch_up(self, hub: SessionHub, last_seq: int, active_run_id: str) -> None:
        """Point a hub that follows another replica's runs at the store's state."""
        if hub.last_seq < last_seq:
            if hub.first_seq <= hub.last_seq:  # a buffer of an earlier local run
                if hub.flushed_seq != hub.last_seq:
                    return  # not stored yet: the local settle comes first
                hub.release()
            hub.resync(last_seq)
        hub.active_run_id = active_run_id
        hub.notify()

    def _leases_lost(self) -> None:
        for turn in list(self._turns.values()):
            turn.interrupt()

    async def subscribe(
        self, caller: Caller, thread_id: str, after_seq: int, *, until_idle: bool = False
    ) -> AsyncIterator[ev.Event]:
        """Stored events after ``after_seq``, then live ones: no gap, no duplicate.

        With ``until_idle`` the stream ends once it has caught up and no run is active.
        """
        if after_seq < 0:
            raise InvalidInput("after_seq must not be negative")
        session = await self._session(caller, thread_id, "session_id")
        events = self._follow(thread_id, after_seq, until_idle=until_idle, session=session)
        async for event in events:
            yield event

    async def _same_session(self, hub: SessionHub) -> bool:
        """Whether ``hub`` still stands for the session stored under its id.

        A delete here drops the hub. With a shared store the delete may happen on another
        replica, and the id be taken again by anyone: ask the store.
        """
        if self._hubs.get(hub.session_id) is not hub:
            return False
        if not self.store.shared:
            return True
        current = await self.store.get_session(hub.session_id)
        return _incarnation(current) == hub.incarnation and self._hubs.get(hub.session_id) is hub

    async def _follow(
        self, thread_id: str, after_seq: int, *, until_idle: bool, session: Session | None = None
    ) -> AsyncIterator[ev.Event]:
        if session is None:
            session = await self.store.get_session(thread_id)
        hub = self._hub(session)
        if self.store.shared and thread_id not in self._turns:
            self._catch_up(hub, session.last_seq, session.active_run_id)
        hub.followers += 1
        last = after_seq
        batch = STORE_BATCH
        limit = self.limits.turn.max_event_bytes
        try:
            while True:
                if self._hubs.get(thread_id) is not hub:
                    return  # the session was deleted
                if last + 1 < hub.first_seq:
                    stored = await self.store.read_events(thread_id, last, batch)
                    if not await self._same_session(hub):
                        return  # deleted meanwhile: what was read may be the id's next owner's
                    stored = [e for e in stored if e.seq < hub.first_seq]
                    if not stored:
                        last = hub.first_seq - 1  # retention removed them
                        continue
                    # A reader holds at most one event's worth of big events while it
                    # is not read (``core.bounds``); what is left is read again later.
                    read = len(stored)
                    stored = bounded_events(stored, limit, limit)
                    # Read about what fits next time: a batch of big events is never
                    # much more than max_event_bytes, even for a moment.
                    batch = len(stored) if len(stored) < read else min(batch * 2, READ_BATCH)
                    for event in stored:
                        yield event
                    last = stored[-1].seq
                    del stored
                    continue
                live = hub.since(last, LIVE_BATCH)
                if live:
                    # What a reader holds while its client does not read: one event's
                    # worth of bytes (or one event), as for stored events.
                    live = live[: fit_bytes((body_size(e.body) for e in live), limit)]
                    for event in live:
                        yield event
                    last = live[-1].seq
                    continue
                if until_idle and not hub.active_run_id and not hub.unseen:
                    return
                if not self._accepting and not hub.active_run_id:
                    return
                # Shielded: one follower going away must not cancel the others' wait.
                if not self.store.shared or thread_id in self._turns:
                    await asyncio.shield(hub.changed())
                    continue
                # Another replica's run: its signals wake us; a missed one costs a poll.
                try:
                    async with asyncio.timeout(REMOTE_POLL_INTERVAL):
                        await asyncio.shield(hub.changed())
                except TimeoutError:
                    if thread_id not in self._turns and self._hubs.get(thread_id) is hub:
                        polled = await self.store.get_session(thread_id)
                        if _incarnation(polled) != hub.incarnation:
                            return  # deleted, and its id taken again
                        self._catch_up(hub, polled.last_seq, polled.active_run_id)
        finally:
            hub.followers -= 1
            self._drop_hub_if_unused(hub)


def _first_title(session: Session, incoming: Sequence[Message]) -> str:
    """The title a conversation's first run gives it, when it has none: the start of its
    first user message's text (a client's own title is never replaced)."""
    if session.title or session.message_count:
        return ""
    for message in incoming:
        if message.role is Role.USER:
            text = " ".join(p.text for p in message.content if isinstance(p, TextPart))
            return title_from(text)
    return ""
