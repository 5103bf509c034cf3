"""Write-behind: a run's events from the hub into the store, then to its followers.

The run publishes each event into the session's hub (``emit``, bounded to
``max_event_bytes``); the :class:`Outbox` stores them continually, one write at a time,
each taking everything published while the previous one was in flight (group commit), and
tops up the seqs the store has reserved for the run. Followers see an event once a write
holding it committed (``SessionHub.stored``). ``settle`` stores the run's last events and
its end in one transaction.

One job, callbacks instead of imports (as ``core.leases``): a failed write is reported to
``on_failure``; a refused one, because another replica took the run over or closed it, to
``on_lost``. Once another replica took the run over or closed it (this one stalled past
its lease), the store refuses every write of the run (``RunHold``): its events by their
seqs, the messages stored with them whole with them, and its other writes, made under its
hold (messages alone, its end; through ``fenced``: its state, checkpoint, usage, the
answers carried out).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from engine_service.core import events as ev
from engine_service.core.bounds import MESSAGE_ROOM, body_size, bound_body, split_text
from engine_service.core.clock import utc_now
from engine_service.core.errors import InvalidInput, StorageUnavailable
from engine_service.core.hub import SessionHub
from engine_service.core.limits import RunLimits
from engine_service.core.models import Message, RunStatus
from engine_service.core.store import RunHold, SessionStore

if TYPE_CHECKING:
    from engine_service.core.deliveries import Delivery

__all__ = ["Elsewhere", "Outbox"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_DELTAS = (ev.TextMessageContent, ev.ReasoningMessageContent, ev.ToolCallArgs)
"""Bodies that are pieces of a longer text: split, never clipped, when too long."""
_Delta = ev.TextMessageContent | ev.ReasoningMessageContent | ev.ToolCallArgs
JOIN_CHARS = 4096
"""Deltas are joined up to this many characters (a bound on the copying)."""
_URGENT = ev.ANSWER_STARTS
"""The start of an answer: its first token, which a caller waits for, is stored at once."""
_PATIENT = ev.MessageStored
"""Published just after its message's write: it waits up to ``confirm_gap`` for the run's
next event, so that the two share a write (``flush_continually``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Elsewhere:
    """Where the store stood when another replica was found to have closed a run of this
    engine, or taken it over."""

    last_seq: int
    """The session's last stored seq then."""
    active_run_id: str = ""
    """The run holding the session there: the run itself while the replica that resumed
    it answers (``core.resume``); "" once it ended."""


class Outbox:
    """Publishes one run's events and stores them behind it."""

    def __init__(
        self,
        store: SessionStore,
        hub: SessionHub,
        run_id: str,
        limits: RunLimits,
        *,
        on_failure: Callable[[StorageUnavailable], None],
        on_lost: Callable[[Elsewhere], None],
        replica: str = "",
    ) -> None:
        self.store = store
        self.replica = replica
        """The replica running the run ("" with a store of one engine)."""
        self.hold = RunHold(run_id, replica)
        """What every write of the run is made under: stored only while the run is this
        replica's and RUNNING."""
        self.hub = hub
        self.session_id = hub.session_id
        self.run_id = run_id
        self.max_event_bytes = limits.max_event_bytes
        self.flush_interval = limits.flush_interval
        self.flush_gap = limits.flush_gap
        self.confirm_gap = limits.confirm_gap
        self.seq_block = limits.seq_block
        self.buffer_bytes = limits.buffer_bytes
        self._on_failure = on_failure
        self._on_lost = on_lost
        self._unflushed = asyncio.Event()
        """Set when an event is published: the flusher stores it (``flush_continually``)."""
        self._split_at = (limits.max_event_bytes - MESSAGE_ROOM) // 4
        """A delta of more characters than this may need splitting."""
        self._join_at = min(self._split_at, JOIN_CHARS)
        """Joined deltas stay this short: never split, and cheap to append to."""
        self._buffered = 0
        """Bytes published into the hub since it last forgot its stored events."""
        self._followers_woken = False
        self._urgent = asyncio.Event()
        """Set when an answer starts: the next write goes at once."""
        self._eager = asyncio.Event()
        """Set when an event that does not wait for company (not ``_PATIENT``) is published."""
        self._last_write = -self.flush_gap
        """When the run's last write of events (or of messages) started (``loop.time()``)."""

    # -- publishing -------------------------------------------------------------------

    def emit(self, body: ev.EventBody) -> ev.Event:
        """Publish ``body`` bounded to ``max_event_bytes`` (``core.bounds``): a longer
        delta goes out as several deltas (the last one is returned), anything else is
        clipped."""
        if isinstance(body, _DELTAS):
            delta = body.delta
            self._buffered += len(delta)
            if len(delta) > self._split_at:
                pieces = split_text(delta, self.max_event_bytes - MESSAGE_ROOM)
                for piece in pieces[:-1]:
                    self._publish(dataclasses.replace(body, delta=piece))
                body = dataclasses.replace(body, delta=pieces[-1])
            elif (tail := self._joinable(body)) is not None:
                return tail
        else:
            body = bound_body(body, self.max_event_bytes)
            self._buffered += body_size(body)
        return self._publish(body)

    def count_opened(self, events: Sequence[ev.Event]) -> None:
        """The run's first events, stored as it began (``SessionStore.begin_run``), are in
        the hub: they count towards ``buffer_bytes``."""
        if events:
            self._buffered += sum(body_size(event.body) for event in events)
            self._forget_if_over()

    def _joinable(self, body: _Delta) -> ev.Event | None:
        """The run's last event with ``body``'s delta appended, when it is a delta of the
        same text that no write, follower or client has yet (``SessionHub.open_tail``),
        else None. Tokens that come faster than they are stored (a burst, or a loaded
        engine) leave as fewer, longer deltas: fewer rows, messages and frames per token."""
        tail = self.hub.open_tail(self.run_id)
        if tail is None:
            return None
        last = tail.body
        if (
            not isinstance(last, _DELTAS)
            or type(last) is not type(body)
            or _block(last) != _block(body)
        ):
            return None
        joined = last.delta + body.delta
        if len(joined) > self._join_at:
            return None
        tail.body = dataclasses.replace(body, delta=joined)
        self._unflushed.set()
        self._eager.set()
        return tail

    def _publish(self, body: ev.EventBody) -> ev.Event:
        if self.hub.waiting:
            self._followers_woken = True
        if isinstance(body, _URGENT):
            self._urgent.set()
        event = self.hub.publish(self.run_id, body)
        self._unflushed.set()
        if type(body) is not _PATIENT:
            self._eager.set()
        return event

    def publish_end(self, final: ev.RunFinished | ev.RunError) -> ev.RunFinished | ev.RunError:
        """Publish the run's end (bounded), held from followers until the run lets go of
        the session (``SessionHub.end``)."""
        final = bound_body(final, self.max_event_bytes)  # type: ignore[assignment]
        self.hub.publish(self.run_id, final, hold=True)
        return final

    async def let_followers_send(self) -> None:
        """Give the flusher and woken followers their turn on the loop now.

        The LLM's chunks arrive in bursts that the loop could parse without pausing; a
        follower that is waiting would then see the first token only after the burst.
        """
        if self._followers_woken:
            self._followers_woken = False
            await asyncio.sleep(0)

    # -- storing ----------------------------------------------------------------------

    async def flush(self) -> None:
        """Store the events published so far, topping up the reserved seqs when half of
        the block is used; then followers may see them."""
        await self._write()

    async def store_messages(
        self, messages: Sequence[Message], *, title: str = "", now: datetime | None = None
    ) -> None:
        """Store ``messages`` (and name the session ``title``) in one write with the events
        published so far (a run's input with its RUN_STARTED, an answer with its end, a
        tool's result with its TOOL_CALL_RESULT); raises as :meth:`store_now`, and what
        ``append_messages`` raises. Their MESSAGE_STORED, published next, waits for the
        run's next event's write (``flush_continually``)."""
        self._last_write = asyncio.get_running_loop().time()
        try:
            await self._write(messages, title, now)
        except InvalidInput as exc:
            await self._refused(exc)
            raise asyncio.CancelledError from None

    async def _write(
        self,
        messages: Sequence[Message] | None = None,
        title: str = "",
        now: datetime | None = None,
        *,
        company: bool = False,
    ) -> None:
        """Store the events published so far, with ``messages`` when given (not None).
        ``company``: not when only ``_PATIENT`` events are left to store (another write
        took the rest while this one waited its turn); the flusher waits for more."""
        hub = self.hub
        async with hub.writing():
            if company and self.confirm_gap and not self._eager.is_set():
                if hub.unflushed():
                    self._unflushed.set()
                return
            pending = hub.take_unflushed()
            if pending:  # taken: what is published from now on wakes the flusher again
                self._unflushed.clear()
                self._urgent.clear()
                self._eager.clear()
                self._last_write = asyncio.get_running_loop().time()
            reserve = hub.to_reserve(self.seq_block)
            if messages is not None:
                write = asyncio.ensure_future(
                    self.store.append_messages_and_events(
                        self.session_id,
                        messages,
                        pending,
                        reserve_through=reserve,
                        title=title,
                        now=now,
                        hold=self.hold,
                    )
                )
            elif not pending and not reserve:
                return
            else:
                write = asyncio.ensure_future(
                    self.store.append_events(self.session_id, pending, reserve_through=reserve)
                )
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The periodic flusher is cancelled when the run ends, perhaps mid-write:
                # the write goes on (it may already be committed). Wait for it and record
                # what it stored before the lock goes, or the final store would write the
                # same events again.
                await asyncio.wait([write])
                if not write.cancelled() and write.exception() is None:
                    self._stored(pending, reserve)
                raise
            self._stored(pending, reserve)

    async def store_now(self) -> None:
        """Store what was published before going on (a tool call's start, before it runs):
        raises ``StorageUnavailable`` when the store fails, and ``CancelledError`` when it
        refuses the events because another replica closed the run (``on_lost`` told)."""
        try:
            await self.flush()
        except InvalidInput as exc:
            await self._refused(exc)
            raise asyncio.CancelledError from None

    async def send_now(self) -> None:
        """Store what was published and let the woken followers send it before going on
        (an answer's start: ``core.rounds``); raises as :meth:`store_now`."""
        await self.store_now()
        self._followers_woken = False
        await asyncio.sleep(0)  # the followers ``stored`` woke send it now

    def _stored(self, pending: list[ev.Event], reserve: int) -> None:
        self.hub.stored(pending[-1].seq if pending else 0, reserve)
        self._forget_if_over()

    async def flush_continually(self) -> None:
        """Store events as soon as they are published: one write at a time, each taking
        everything published meanwhile (group commit), so a token waits for about one
        write before followers see it, and a burst costs one write. While events keep
        coming, writes start at most every ``flush_gap`` seconds, unless an answer just
        started (``_URGENT``). A ``MESSAGE_STORED`` (``_PATIENT``), published just after its
        message's write, waits up to ``confirm_gap`` for the run's next event (the answer's
        start after the input's, the run's end after the answer's), so that the two share
        a write instead of one write each: under load a write of its own is a group commit
        more on the next event's way, and more work for the store."""
        unflushed, urgent, eager = self._unflushed, self._urgent, self._eager
        loop = asyncio.get_running_loop()
        while True:
            await unflushed.wait()
            if self.flush_interval:
                await asyncio.sleep(self.flush_interval)
            elif not urgent.is_set():
                wait = self._last_write + self.flush_gap - loop.time()
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(wait):
                            await urgent.wait()
            alone = False
            if not eager.is_set() and self.confirm_gap:
                if not unflushed.is_set():
                    continue  # another write took it all meanwhile
                try:
                    async with asyncio.timeout(self.confirm_gap):
                        await eager.wait()
                except TimeoutError:
                    alone = True  # nothing came: it goes alone
            unflushed.clear()
            urgent.clear()
            self._last_write = loop.time()
            try:
                await self._write(company=not alone)
            except StorageUnavailable as exc:
                self._on_failure(exc)
                return
            except InvalidInput as exc:
                await self._refused(exc)
                return

    async def fenced(self, write: Awaitable[T]) -> T:
        """Make one of the run's writes besides its events and messages (its usage so far,
        a state a tool set, a checkpoint, the answers carried out), made under ``hold``:
        refused because another replica took the run over or closed it, it stops the run
        here as a refusal of its events does (``on_lost``, then ``CancelledError``); a
        refusal for another reason is raised as it is."""
        try:
            return await write
        except InvalidInput:
            elsewhere = await self.closed_elsewhere()
            if elsewhere is None:
                raise
            self._lost(elsewhere)
            raise asyncio.CancelledError from None

    async def _refused(self, exc: InvalidInput) -> None:
        """The store refused the run's events (and the messages with them): the run is no
        longer this replica's (this engine stalled past its lease, another took the run
        over or closed it), or their seqs no longer follow the last stored one (that
        replica stored its events there). Stop without writing anything more: followers
        read that replica's events from the store, and never see the refused ones."""
        elsewhere = await self.closed_elsewhere()
        if elsewhere is None:
            log.error("run %s: the store refused its events: %s", self.run_id, exc.message)
            self._on_failure(
                StorageUnavailable("storage unavailable: the store refused the events")
            )
            return
        self._lost(elsewhere)

    def _lost(self, elsewhere: Elsewhere) -> None:
        log.warning(
            "run %s of session %s was taken over or closed by another replica;"
            " stopping it here, writing nothing more",
            self.run_id,
            self.session_id,
        )
        self._on_lost(elsewhere)

    async def closed_elsewhere(self) -> Elsewhere | None:
        """The store's state if another replica has closed this run or taken it over
        (resumed it: ``core.resume``), else None."""
        try:
            run = await self.store.get_run(self.session_id, self.run_id)
            if run.status is RunStatus.RUNNING and run.replica in ("", self.replica):
                return None
            session = await self.store.get_session(self.session_id)
            return Elsewhere(session.last_seq, session.active_run_id)
        except StorageUnavailable as exc:
            self._on_failure(exc)
            return None

    async def settle(
        self,
        status: RunStatus,
        final: ev.RunFinished | ev.RunError,
        usage: ev.Usage | None = None,
        deliveries: Sequence[Delivery] = (),
    ) -> None:
        """Store the run's last events and its end in one transaction, with
        ``deliveries`` (the outbox rows of its end: its webhook, its A2A push updates)."""
        error = final if isinstance(final, ev.RunError) else None
        finished = final if isinstance(final, ev.RunFinished) else None
        async with self.hub.writing():
            pending = self.hub.take_unflushed()
            await self.store.finish_run(
                self.session_id,
                self.run_id,
                status,
                utc_now(),
                error.code if error else "",
                error.message if error else "",
                finished.pending_tool_call_ids if finished else (),
                events=pending,
                interrupts=finished.interrupts if finished else (),
                usage=usage,
                hold=self.hold,
                deliveries=deliveries,
            )
            self._stored(pending, 0)

    def _forget_if_over(self) -> None:
        """Past ``buffer_bytes`` in the hub, drop its stored events: readers that are
        behind read them from the store, so one that does not read pins no more."""
        if self._buffered > self.buffer_bytes:
            self.hub.forget_stored()
            # What is left was published during the write, and is not stored yet.
            self._buffered = sum(body_size(e.body) for e in self.hub.unflushed())


def _block(body: _Delta) -> str:
    """The text a delta belongs to: its message or tool call."""
    return body.tool_call_id if isinstance(body, ev.ToolCallArgs) else body.message_id
