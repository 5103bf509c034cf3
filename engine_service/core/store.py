"""The ``SessionStore`` interface: durable sessions, messages, runs and the event log.

The rule "one active run per session" lives here (``begin_run``), not in process
memory, so that several engine replicas can share one database.

A store several engines may share (``shared``) also carries what they tell each other
(:class:`Signal`, delivered to every engine's ``watch`` callback, its own included) and
the leases by which each replica holds its RUNNING runs: a replica renews its leases, and
a run whose lease expired (its replica died) is claimed by another and closed.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import TYPE_CHECKING

from engine_service.core.events import Event, EventBody, MessageStored, Usage
from engine_service.core.models import JSON, Interrupt, Message, RunRecord, RunStatus, Session

if TYPE_CHECKING:
    from engine_service.core.deliveries import Delivery, PushConfig

__all__ = [
    "Checkpoint",
    "Lease",
    "Opening",
    "RunBegun",
    "RunContext",
    "RunHold",
    "SessionStore",
    "Signal",
    "SignalKind",
]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A compaction of the oldest part of a session's history (``core.context``): what the
    LLM is sent instead of the messages up to ``through_id``. The messages stay stored."""

    through_id: str
    """The last message it covers."""
    summary: str = ""
    """What replaces them; empty when they were trimmed."""
    tokens: int = 0
    """The summary's size in tokens (estimated)."""
    covered: int = 0
    """How many messages, from the first, it covers (set by the store)."""


@dataclass(frozen=True, slots=True)
class Opening:
    """A run's first write, which ``begin_run`` may store in its own transaction: the
    client's new messages, the title they give the conversation and the run's first events
    (RUN_STARTED, then each message's MESSAGE_STORED). A run that brings them then waits
    for one commit before its LLM answer instead of two (three for a later run, which
    reads what it starts from as well: ``RunBegun.context``)."""

    messages: Sequence[Message]
    """Stamped already (``created_at``, ``run_id``): stored as they are."""
    events: Sequence[EventBody]
    title: str = ""
    """Names the conversation when it has no title."""

    @staticmethod
    def fits(*, has_state: bool, has_interrupts: bool, session_agent: str, agent: str) -> bool:
        """Whether a store stores an opening with the run that takes a session (as it is
        before the run): only a conversation of the run's ``agent`` with no state and no
        pending interrupts (whose answers, even expired ones, the run stores before the
        client's new messages), so that nothing the engine checks after ``begin_run``
        depends on what the conversation held, and the run's first events are exactly
        the opening's. One with messages takes ``after`` the ids it holds, and the store
        hands back what it read (``RunBegun.context``); a store that does not read it
        there declines those."""
        return not has_state and not has_interrupts and session_agent == agent

    def after(self, known: set[str]) -> Opening:
        """The opening of a run of a conversation that holds the messages ``known`` (an
        AG-UI client sends the whole history every run): its new messages and their
        MESSAGE_STORED, no title (a conversation is named by its first run)."""
        return Opening(
            [m for m in self.messages if m.id not in known],
            [
                body
                for body in self.events
                if not (isinstance(body, MessageStored) and body.message.id in known)
            ],
        )

    def numbered(self, session_id: str, run_id: str, after_seq: int, now: datetime) -> list[Event]:
        """The opening's events as stored: seqs from ``after_seq + 1``, stamped ``now``."""
        stamp = now.timestamp()
        return [
            Event(after_seq + 1 + index, stamp, session_id, run_id, body)
            for index, body in enumerate(self.events)
        ]


RunContext = tuple[Checkpoint | None, list[Message], set[str]]
"""What a new run of a conversation with messages starts from (``SessionStore.run_context``):
its checkpoint, the messages after it, and which of the client's message ids it holds."""


@dataclass(slots=True)
class RunBegun:
    """What ``begin_run`` hands back: the session as it was when the run took it."""

    session: Session
    created: bool
    """True when the session was created by this call."""
    opened: list[Event] = field(default_factory=list)
    """The run's first events, stored with it from its ``Opening`` (the session then
    holds them and the opening's messages); empty when the store did not take one."""
    context: RunContext | None = None
    """What the run starts from, read in the begin's transaction before the opening's
    messages were stored (as ``run_context`` reads it, for the opening's message ids),
    when the store took an opening to a conversation with messages; None otherwise."""

    @property
    def start_after(self) -> int:
        """The seq after which the run's events come (its first is ``start_after + 1``)."""
        return self.opened[0].seq - 1 if self.opened else self.session.last_seq


@dataclass(frozen=True, slots=True)
class RunHold:
    """Who makes a write of a run: run ``run_id`` on replica ``replica`` ("" for a store of
    one engine, whose runs are begun without a lease). A write given one (``hold=``) is
    stored only while the run is RUNNING and held by that replica, checked in the write's
    own transaction; else it stores nothing and raises ``InvalidInput``, as an append of
    events whose seqs no longer follow the session's last one does.

    A run's events need no hold: they are refused by their seqs. Every seq a run hands out
    is within the seqs reserved for it (``reserved_seq``); another replica that claims the
    run moves the session's last seq past them (``claim_expired_runs``), and every close of
    a run stores its closing events after them. The messages stored with events go under
    the same condition (``append_messages_and_events``). So a replica that stalled past its
    lease (a pause, a stopped process) and wakes after another took its run over or closed
    it stores nothing more for the run: no event, no message, no state, no checkpoint, no
    usage, no end (``core.flush``)."""

    run_id: str
    replica: str = ""


@dataclass(frozen=True, slots=True)
class Lease:
    """A replica's hold on a RUNNING run, valid until ``until``."""

    replica: str
    until: datetime


class SignalKind(enum.StrEnum):
    EVENTS = "events"
    """Events up to ``last_seq`` are stored."""
    BEGUN = "begun"
    """Run ``run_id`` took the session."""
    ENDED = "ended"
    """Run ``run_id`` ended (its end and last events are stored, up to ``last_seq``)."""
    STOP = "interrupt"
    """Someone asked run ``run_id`` of the session to stop (the value is the one replicas
    of earlier versions send)."""


@dataclass(frozen=True, slots=True)
class Signal:
    """What one engine sharing a store tells the others about a session."""

    kind: SignalKind
    session_id: str
    run_id: str = ""
    last_seq: int = 0


class SessionStore(abc.ABC):
    """Where sessions live. Every method raises ``SessionNotFound`` for an unknown id.

    Times are timezone-aware UTC datetimes. Implementations must be safe to call from
    one asyncio loop with many runs interleaved.
    """

    @abc.abstractmethod
    async def create_session(
        self, session_id: str, title: str, now: datetime, *, owner: str = "", agent: str = ""
    ) -> Session:
        """Create a session belonging to ``owner``; ``AlreadyExists`` when the id is taken."""

    @abc.abstractmethod
    async def get_session(self, session_id: str) -> Session:
        """One session with its message count, last seq and active run."""

    @abc.abstractmethod
    async def list_sessions(
        self,
        offset: int,
        limit: int,
        *,
        owner: str | None = None,
        agents: Sequence[str] | None = None,
    ) -> tuple[list[Session], int]:
        """A page of sessions, most recently updated first, and the total count; only
        ``owner``'s when it is not None, only those whose stored agent is one of
        ``agents`` when it is not None."""

    async def count_sessions(self, owner: str) -> int:
        """How many sessions ``owner`` has (``core.quota``); a store counts them by its
        index on the owner."""
        return (await self.list_sessions(0, 1, owner=owner))[1]

    @abc.abstractmethod
    async def rename_session(self, session_id: str, title: str, now: datetime) -> Session:
        """Set the title; returns the updated session."""

    @abc.abstractmethod
    async def set_session_webhook(self, session_id: str, url: str, now: datetime) -> Session:
        """Set the session's default run webhook ("" clears it); the updated session."""

    @abc.abstractmethod
    async def delete_session(self, session_id: str) -> None:
        """Delete the session and all it holds, its webhook deliveries in the outbox too
        (pending, failed or delivered), in one transaction; ``SessionBusy`` while a run is
        active."""

    @abc.abstractmethod
    async def list_messages(
        self, session_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        """Messages after ``after_id`` (all when empty), oldest first, and whether more follow.

        ``InvalidInput`` when ``after_id`` is not a message of the session.
        """

    @abc.abstractmethod
    async def all_messages(self, session_id: str) -> list[Message]:
        """The whole history, oldest first."""

    @abc.abstractmethod
    async def save_checkpoint(
        self, session_id: str, checkpoint: Checkpoint, *, hold: RunHold | None = None
    ) -> Checkpoint:
        """Make ``checkpoint`` the session's (replacing the one it had); returns it with
        ``covered`` set. ``InvalidInput`` when ``through_id`` is not a message of the session,
        or when the run of ``hold`` no longer holds it (see :class:`RunHold`).
        ``replace_messages`` drops the checkpoint; deleting the session deletes it."""

    @abc.abstractmethod
    async def context_messages(self, session_id: str) -> tuple[Checkpoint | None, list[Message]]:
        """The session's checkpoint (None without one) and the messages after it, oldest
        first (all of them without one): what a run needs, read without the history's
        older part, so its cost follows the messages after the checkpoint."""

    @abc.abstractmethod
    async def list_run_messages(
        self, session_id: str, run_id: str, after_id: str, limit: int
    ) -> tuple[list[Message], bool]:
        """The messages of run ``run_id`` after its message ``after_id`` (all when empty),
        oldest first, at most ``limit``, and whether more follow; found by index, so the
        work follows the page, not the history. ``InvalidInput`` when ``after_id`` is not a
        message of the run."""

    @abc.abstractmethod
    async def recent_messages(self, session_id: str, limit: int) -> list[Message]:
        """The last ``limit`` messages, oldest first, read from the end of the history (by
        index): the work follows ``limit``, not the history's length."""

    @abc.abstractmethod
    async def known_message_ids(self, session_id: str, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` that are messages of the session (found by index)."""

    async def run_context(self, session_id: str, ids: Sequence[str]) -> RunContext:
        """What a new run of a conversation with messages reads before it starts:
        :meth:`context_messages` and which of ``ids`` :meth:`known_message_ids` knows. A
        store that can read both in one round trip (one snapshot) says so by overriding
        this; here, the two calls."""
        checkpoint, history = await self.context_messages(session_id)
        return checkpoint, history, await self.known_message_ids(session_id, ids)

    @abc.abstractmethod
    async def run_messages(
        self, session_id: str, run_ids: Sequence[str], last: int
    ) -> tuple[list[Message], bool]:
        """The last ``last`` messages of the runs ``run_ids``, oldest first, and whether
        they have earlier ones; read from the end of the history back, so the work is
        bounded by the messages after the earliest one returned, not by the history."""

    @abc.abstractmethod
    async def begin_run(
        self,
        session_id: str,
        run_id: str,
        now: datetime,
        *,
        create: bool,
        reserve: int = 0,
        owner: str = "",
        require_owner: bool = False,
        lease: Lease | None = None,
        parent_run_id: str = "",
        admit: Callable[[list[Interrupt]], None] | None = None,
        agent: str = "",
        kept: str = "",
        opening: Opening | None = None,
    ) -> RunBegun:
        """Atomically mark ``run_id`` as the session's active run and record it as RUNNING.

        ``kept``: what the run keeps of its request for a resume (``core.kept_input``),
        read back by ``kept_input``.

        ``opening``: stored in the same transaction when it ``Opening.fits`` the session
        as it was: its messages appended, the session named by its title when untitled,
        its events numbered from the run's ``start_seq`` (``RunBegun.opened``), the seqs
        reserved covering them; the session returned holds them. To a conversation with
        messages, what the run starts from is read first (``RunBegun.context``, as
        ``run_context`` with the opening's ids) and ``Opening.after`` the ids it holds is
        stored. A store may decline any opening (``opened`` empty, ``context`` None): the
        run then reads its context and stores its input itself, in later calls.

        ``admit`` is called, inside the transaction, with the session's pending
        interrupts; what it raises refuses the run and writes nothing. A store may call it
        with no interrupts first (to learn whether the run needs any answered, before
        writing it in a batch gated on the session waiting for nobody): the last call is
        the one that counts.

        The run's ``start_seq`` is the session's ``last_seq + 1``; the session's
        ``reserved_seq`` becomes ``last_seq + reserve``: the seqs the run may hand out
        before it stores or reserves more (see ``append_events``).

        Raises ``SessionBusy`` when another run is active, ``SessionNotFound`` when the
        session does not exist and ``create`` is false (with ``create`` it is made, owned by
        ``owner``) or, with ``require_owner``, when it belongs to another owner,
        The run is held under ``lease`` when one is given (a shared store signals
        ``BEGUN`` on commit),
        ``AlreadyExists`` when the run id was used before, in any session (run ids are
        unique in the store; the message does not say where it was used).
        """

    async def kept_input(self, session_id: str, run_id: str) -> str:
        """What ``begin_run`` kept of the run's request ("" for nothing)."""
        return ""

    @abc.abstractmethod
    async def finish_run(
        self,
        session_id: str,
        run_id: str,
        status: RunStatus,
        now: datetime,
        error_code: str = "",
        error_message: str = "",
        pending_tool_call_ids: Sequence[str] = (),
        events: Sequence[Event] = (),
        interrupts: Sequence[Interrupt] = (),
        usage: Usage | None = None,
        hold: RunHold | None = None,
        deliveries: Sequence[Delivery] = (),
    ) -> None:
        """Store the run's last ``events``, record how it ended and clear the active run.

        ``deliveries`` (the outbox rows of the run's end: its webhook, its A2A push
        updates) are added in the same transaction, as deliveries of the run's session,
        when the run ends here (it was still running, and held when ``hold`` is given; one
        whose id is there already is kept): a crash between the end and its webhooks
        cannot lose them, and a write that does not end the run adds none.

        With ``hold``, only while the run is held (:class:`RunHold`): else nothing is
        written and ``InvalidInput`` raised.

        ``interrupts`` (a run that ends waiting for a person) are kept on the run and
        become the session's pending interrupts. ``usage`` (the tokens the LLM reported
        for the run) is kept on the run and added to the session's totals.

        All in one transaction: whoever sees the run ended also finds all its events. A
        shared store signals ``ENDED`` (with the session's last seq) on commit.
        """

    @abc.abstractmethod
    async def fork_session(
        self,
        source_id: str,
        up_to_message_id: str,
        new_id: str,
        now: datetime,
        *,
        owner: str = "",
        source_owner: str | None = None,
        title: str = "",
    ) -> Session:
        """A new session ``new_id`` owned by ``owner`` holding a copy of ``source_id``'s
        messages up to and including ``up_to_message_id``, and its state.

        The copy has no runs, events or pending interrupts, and its token totals start at
        zero; the source is untouched. A run in progress in the source does not stop the
        fork: the messages stored so far are copied. ``SessionNotFound`` when the source
        does not exist (or, with ``source_owner`` not None, belongs to another owner),
        ``InvalidInput`` when ``up_to_message_id`` is not one of its messages,
        ``AlreadyExists`` when ``new_id`` is taken.
        """

    @abc.abstractmethod
    async def add_tokens(self, principal: str, day: date, tokens: int) -> int:
        """Count ``tokens`` more against ``principal`` on ``day`` (UTC); the day's total.

        Atomic: engines sharing the store count into the same total."""

    @abc.abstractmethod
    async def tokens_used(self, principal: str, day: date) -> int:
        """The tokens counted against ``principal`` on ``day`` (0 when none)."""

    @abc.abstractmethod
    async def resolve_interrupts(self, session_id: str, run_id: str, *, replica: str = "") -> None:
        """The session's pending interrupts were carried out by ``run_id``: clear them,
        and mark the runs that asked them as resumed by it. Only while ``run_id`` is
        RUNNING and held by ``replica`` (``RunHold``): else nothing is written and
        ``InvalidInput`` raised."""

    @abc.abstractmethod
    async def cancel_interrupts(self, session_id: str) -> list[str]:
        """Stop waiting for a person: clear the pending interrupts of an idle session and
        mark the runs that asked them INTERRUPTED. The ids of those runs; none when the
        session waits for nothing or has a run in flight."""

    @abc.abstractmethod
    async def get_run(self, session_id: str, run_id: str) -> RunRecord:
        """One run; ``RunNotFound`` when the session has no such run."""

    @abc.abstractmethod
    async def list_runs(self, session_id: str) -> list[RunRecord]:
        """The session's runs, oldest first."""

    @abc.abstractmethod
    async def find_run(self, run_id: str, *, owner: str | None = None) -> RunRecord:
        """A run by id alone, whatever its session (of ``owner``'s sessions when it is not
        None); ``RunNotFound`` when none has it.

        When several sessions used the same id the most recent run wins.
        """

    @abc.abstractmethod
    async def page_runs(
        self,
        session_id: str,
        offset: int,
        limit: int,
        *,
        owner: str | None = None,
        agents: Sequence[str] | None = None,
    ) -> tuple[list[RunRecord], int]:
        """A page of runs, newest first, of one session (or all when empty; then only of
        ``owner``'s sessions when it is not None), and the total; only runs of sessions
        whose stored agent is one of ``agents`` when it is not None."""

    @abc.abstractmethod
    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        """Append messages at the end of the history (ids must be new to the session); with
        ``title``, name the session too (``updated_at`` ``now``), in the same write. With
        ``hold``, only while the run is held (:class:`RunHold`)."""

    async def append_messages_and_events(
        self,
        session_id: str,
        messages: Sequence[Message],
        events: Sequence[Event],
        *,
        reserve_through: int = 0,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        """``append_messages`` and ``append_events`` in one transaction: a run's input with
        the events it published before it (RUN_STARTED), so that a run's start waits for
        one write, not two. What refuses the events (their seqs no longer follow the last
        stored one: another replica took the run over or closed it, see ``RunHold``)
        refuses the messages too: nothing is stored. Without events, the messages are
        stored under ``hold``, as ``append_messages`` stores them. This default does them
        in turn, the messages first (a store whose writes cannot be refused may use it):
        when the events' write fails, none of them is stored, and they are written again
        later."""
        if messages or title:
            await self.append_messages(
                session_id, messages, title=title, now=now, hold=None if events else hold
            )
        if events or reserve_through:
            await self.append_events(session_id, events, reserve_through=reserve_through)

    @abc.abstractmethod
    async def replace_messages(
        self, session_id: str, messages: Sequence[Message], *, hold: RunHold | None = None
    ) -> None:
        """Make ``messages`` the whole history; with ``hold``, only while the run is held
        (:class:`RunHold`)."""

    @abc.abstractmethod
    async def set_state(self, session_id: str, state: JSON, *, hold: RunHold | None = None) -> None:
        """Replace the session's shared state; with ``hold``, only while the run is held
        (:class:`RunHold`)."""

    @abc.abstractmethod
    async def append_events(
        self, session_id: str, events: Sequence[Event], *, reserve_through: int = 0
    ) -> None:
        """Store events (ascending seq, after ``last_seq``) and advance ``last_seq``;
        ``InvalidInput`` (nothing stored) when they do not follow it (so a run's events once
        another replica took it over or closed it: :class:`RunHold`).

        In the same transaction ``reserved_seq`` grows to ``reserve_through`` when that is
        higher: a crash never lets an engine reuse a seq a client may have seen. A shared
        store signals ``EVENTS`` (with the new last seq) on commit.
        """

    @abc.abstractmethod
    async def read_events(self, session_id: str, after_seq: int, limit: int) -> list[Event]:
        """Stored events with ``seq > after_seq``, ascending, at most ``limit``."""

    @abc.abstractmethod
    async def prune_events(self, before: datetime) -> int:
        """Delete events older than ``before`` (retention); returns how many went. Delivered
        webhook deliveries made before ``before`` go too (not counted); failed ones stay."""

    @abc.abstractmethod
    async def running_runs(self) -> list[RunRecord]:
        """Every run stored as RUNNING, by session then start.

        At start-up a single-replica engine closes them: their engine died.
        """

    # -- several engines on one store ----------------------------------------------

    @property
    def shared(self) -> bool:
        """Whether several engine processes may use this store at once."""
        return False

    async def watch(self, on_signal: Callable[[Signal], None]) -> None:  # noqa: B027
        """Deliver every signal (other engines' and this one's) to ``on_signal``, from now
        until ``close``. A store that is not shared has nothing to deliver."""

    async def signal(self, signal: Signal) -> None:  # noqa: B027
        """Send ``signal`` to every engine watching this store (INTERRUPT requests)."""

    async def note_usage(  # noqa: B027
        self, session_id: str, run_id: str, usage: Usage, *, replica: str = ""
    ) -> None:
        """Record the tokens a RUNNING run used so far (a checkpoint after an LLM round):
        an engine that resumes the run goes on counting from them (``core.resume``). The
        session's totals grow at ``finish_run`` only. Only while the run is held by
        ``replica`` (``RunHold``): else nothing is written and ``InvalidInput`` raised (a
        store that keeps no usage checks nothing)."""

    async def renew_leases(self, replica: str, until: datetime) -> int:
        """Extend the lease of every RUNNING run ``replica`` holds; how many it holds."""
        return 0

    async def claim_expired_runs(
        self, replica: str, now: datetime, until: datetime
    ) -> list[RunRecord]:
        """Take over RUNNING runs whose lease expired before ``now`` (their replica died):
        each is leased to ``replica`` until ``until`` and returned, to exactly one caller.

        A run taken from another replica has its session's last seq moved past the seqs
        reserved for it (``last_seq`` becomes ``reserved_seq`` when lower), in the same
        transaction: every event its old replica may still try to store is refused, and the
        messages with them (``RunHold``). A run whose session a write is storing meanwhile
        may be taken at a later call, once that write is committed: what the claimer then
        reads of the run holds it."""
        return []

    async def note_alive(self, replica: str, until: datetime) -> None:  # noqa: B027
        """Record that ``replica`` is alive until ``until`` (renewed with its leases); a
        time in the past says it is gone. A store of one engine keeps nothing."""

    async def replicas_alive(self, now: datetime) -> list[str]:
        """The replicas noted alive past ``now`` (``note_alive``)."""
        return []

    # -- the delivery outbox (core.deliveries) ----------------------------------------

    @abc.abstractmethod
    async def add_delivery(self, delivery: Delivery) -> None:
        """Store a delivery to make; one whose id is stored already is left as it is
        (adding is idempotent), and one whose ``session_id`` names a session that is gone
        is not stored (a run's updates written just after its end, when the conversation
        was deleted in between)."""

    @abc.abstractmethod
    async def claim_deliveries(
        self, replica: str, now: datetime, until: datetime, limit: int
    ) -> list[Delivery]:
        """Take up to ``limit`` PENDING deliveries due by ``now`` whose lease (if any)
        expired, oldest due first, leasing each to ``replica`` until ``until``: with
        several engines on one store each is handed to exactly one caller. The claim
        counts the attempt it is for (``attempts`` grows by one, stored and returned): an
        attempt cut short by a crash counts too."""

    @abc.abstractmethod
    async def settle_delivery(self, replica: str, delivery: Delivery, now: datetime) -> bool:
        """Store the outcome of an attempt of ``replica``'s: ``delivery``'s status,
        attempts, next attempt time and last error; its lease ends. Only while ``replica``
        holds it (its lease may have lapsed, if nobody claimed it since): False, and
        nothing stored, when another replica claimed it meanwhile or it was settled."""

    @abc.abstractmethod
    async def get_delivery(self, delivery_id: str) -> Delivery | None:
        """One delivery by id; None when there is none."""

    @abc.abstractmethod
    async def failed_deliveries(self, offset: int, limit: int) -> tuple[list[Delivery], int]:
        """A page of FAILED deliveries, most recent first, and their total."""

    @abc.abstractmethod
    async def add_push_config(self, config: PushConfig, limit: int) -> PushConfig:
        """Store a task's push config, replacing the task's config of the same id;
        ``InvalidInput`` when the task holds ``limit`` others already. Deleted with the
        session."""

    @abc.abstractmethod
    async def push_configs(self, task_id: str) -> list[PushConfig]:
        """A task's push configs, oldest first."""

    @abc.abstractmethod
    async def session_push_configs(self, session_id: str) -> list[PushConfig]:
        """The push configs of every task of a session, oldest first."""

    @abc.abstractmethod
    async def delete_push_config(self, task_id: str, config_id: str) -> bool:
        """Delete one; whether it was there."""

    @abc.abstractmethod
    async def check_writable(self) -> None:
        """Write something small and durable; ``StorageUnavailable`` when that fails."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections."""
