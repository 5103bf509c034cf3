"""A session's live events in memory: numbering, the active run's buffer, followers.

The hub gives each event its ``seq`` and keeps every event of the active run until the
run has ended and its events are stored. A follower that knows the last seq it saw can
therefore always find what comes next: in the store (events before the buffer), in the
buffer, or by waiting for the next stored write. No queue per follower, no copy per event.

Followers see an event only once the store holds it: ``since`` stops at the durable
watermark the run advances after each write (``stored``, called by ``core.flush``). This
file alone keeps that promise: nothing outside it writes the hub's seqs, only its methods
named for what happened (``begin``, ``reserved``, ``stored``, ``end``, ``catch_up``,
``drop_unstored``). Whatever
happens to this engine afterwards — a crash, a stall long enough for another replica to
take its run over, a write the store refuses — what a client saw is what a replay of the
store shows. Publishing does not wake followers; a stored flush does.

The one exception is the end of a run whose store failed, with a store no other engine
shares: ``show_unstored`` lets followers see the closing events from memory while the
engine retries storing them (see ``docs/reliability.md``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from engine_service.core.events import Event, EventBody

__all__ = ["SessionHub"]


class SessionHub:
    """Live view of one session on this engine process."""

    __slots__ = (
        "_active_run_id",
        "_buffer",
        "_first_seq",
        "_flushed_seq",
        "_followers",
        "_held",
        "_incarnation",
        "_next_seq",
        "_reserved_seq",
        "_taken_seq",
        "_unstored_shown",
        "_waiters",
        "_write_lock",
        "session_id",
    )

    def __init__(
        self, session_id: str, last_seq: int, incarnation: tuple[object, ...] = ()
    ) -> None:
        self.session_id = session_id
        self._buffer: list[Event] = []
        self._first_seq = last_seq + 1
        self._next_seq = last_seq + 1
        self._waiters: list[asyncio.Future[None]] = []
        """One future per waiting follower: a follower that stops waiting (cancelled, timed
        out) cancels its own, never the others'; awaited directly, a wake-up costs one turn
        of the loop (a shared future behind ``asyncio.shield`` took two)."""
        self._held = 0
        """Seq of an event published with ``hold``: hidden from followers until ``end``."""
        self._active_run_id = ""
        self._flushed_seq = last_seq
        """The highest seq the store holds: followers see up to here, never further."""
        self._reserved_seq = last_seq
        """The highest seq the store has reserved: a crashed run's closing events come
        after it, so a seq handed out but never stored is never given to another event."""
        self._unstored_shown = 0
        """Seqs up to here are shown though not stored (``show_unstored``)."""
        self._taken_seq = last_seq
        """Seqs up to here were handed to a write (``take_unflushed``): never changed again."""
        self._followers = 0
        self._incarnation = incarnation
        """Which session of this id the hub is for (its creation time and owner): an id
        deleted on another replica and made again names another session."""
        self._write_lock = asyncio.Lock()
        """Held while events are being stored, so they are stored in order."""

    # -- what is known -------------------------------------------------------------

    @property
    def first_seq(self) -> int:
        """Seq of the oldest buffered event (or of the next event when none is buffered)."""
        return self._first_seq

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def active_run_id(self) -> str:
        """The run that holds the session, here or (as its signals say) on another replica."""
        return self._active_run_id

    @property
    def incarnation(self) -> tuple[object, ...]:
        return self._incarnation

    @property
    def unused(self) -> bool:
        """No follower and no run: the hub may go."""
        return not self._followers and not self._active_run_id

    @property
    def all_stored(self) -> bool:
        """Whether the store holds every event published."""
        return self._flushed_seq == self.last_seq

    # -- a local run ---------------------------------------------------------------

    def begin(
        self, run_id: str, last_seq: int, reserved_seq: int, opened: Sequence[Event] = ()
    ) -> None:
        """A run of this engine took the session, whose store was at ``last_seq`` with seqs
        reserved through ``reserved_seq``; ``opened``: the run's first events, stored with
        it (``SessionStore.begin_run``'s opening), numbered from ``last_seq + 1``. The
        previous run's buffer (kept for followers still reading it) goes if it is stored."""
        if self.all_stored:
            self.release()
        if self.last_seq != last_seq:
            self.resync(last_seq)
        self._reserved_seq = reserved_seq
        self._active_run_id = run_id
        for event in opened:
            if event.seq != self._next_seq or event.run_id != run_id:
                raise RuntimeError(f"opened event {event.seq} does not follow {self.last_seq}")
            self._buffer.append(event)
            self._next_seq += 1
        if opened:  # stored: shown to the followers already waiting (a second client)
            self._taken_seq = self._flushed_seq = self.last_seq
            self.notify()

    def writing(self) -> asyncio.Lock:
        """Held while events are being stored (``async with hub.writing():``), so they are
        stored in order."""
        return self._write_lock

    def to_reserve(self, block: int) -> int:
        """The seq through which to reserve with the next write (a block ahead once half
        the reserved seqs are used), or 0: enough are reserved."""
        last = self.last_seq
        return last + block if last + block // 2 > self._reserved_seq else 0

    def stored(self, seq: int, reserved_through: int = 0) -> None:
        """The store holds every event up to ``seq`` (and has reserved seqs through
        ``reserved_through``): show them and wake the followers."""
        self._reserved_seq = max(self._reserved_seq, reserved_through)
        if seq > self._flushed_seq:
            self._flushed_seq = seq
            self.notify()

    def end(self, run_id: str) -> None:
        """Run ``run_id`` let go of the session: show the event held back by
        ``publish(hold=True)`` (its end) and wake the followers."""
        if self._active_run_id == run_id:
            self._active_run_id = ""
        self._held = 0
        self.notify()

    def drop_unstored(self, last_seq: int) -> None:
        """Another replica closed the hub's run, its end stored at ``last_seq``: the events
        not stored here never will be. Followers read the rest (that replica's closing
        events) from the store."""
        self._flushed_seq = self.last_seq
        self.release()
        if self.last_seq < last_seq:
            self.resync(last_seq)

    # -- another replica's runs ------------------------------------------------------

    def catch_up(self, last_seq: int, active_run_id: str) -> None:
        """Point a hub that follows another replica's runs at the store's state."""
        if self.last_seq < last_seq:
            if self._first_seq <= self.last_seq:  # a buffer of an earlier local run
                if not self.all_stored:
                    return  # not stored yet: the local settle comes first
                self.release()
            self.resync(last_seq)
        self._active_run_id = active_run_id
        self.notify()

    def resync(self, last_seq: int) -> None:
        """Follow the store's numbering (another replica may have had runs meanwhile)."""
        if self._buffer:
            raise RuntimeError("resync with buffered events")
        self._first_seq = self._next_seq = last_seq + 1
        self._held = 0
        self._unstored_shown = 0
        self._flushed_seq = self._taken_seq = last_seq
        self._reserved_seq = max(self._reserved_seq, last_seq)

    # -- events ----------------------------------------------------------------------

    def publish(self, run_id: str, body: EventBody, *, hold: bool = False) -> Event:
        """Number the event and buffer it; followers see it once it is stored (``stored``).
        ``hold`` hides it even then, until ``end`` (the terminal event is shown once
        the run's end is stored and the run let go of the session)."""
        event = Event(self._next_seq, time.time(), self.session_id, run_id, body)
        self._next_seq += 1
        self._buffer.append(event)
        if hold:
            self._held = event.seq
        return event

    def open_tail(self, run_id: str) -> Event | None:
        """The last event published, if run ``run_id`` published it and no one has it yet:
        not handed to a write, not shown, not held. Its body may still change (``core.flush``
        appends a delta to the delta before it): no follower and no store ever sees both."""
        if not self._buffer:
            return None
        last = self._buffer[-1]
        seq = last.seq
        if (
            last.run_id != run_id
            or seq <= self._taken_seq
            or seq <= self._flushed_seq
            or seq <= self._unstored_shown
            or seq == self._held
        ):
            return None
        return last

    def show_unstored(self) -> None:
        """Show every buffered event though the store does not hold them yet: only for
        the end of a run whose store failed, when no other engine shares the store (this
        one stores it once the store writes again)."""
        self._unstored_shown = self.last_seq
        self.notify()

    @property
    def visible_seq(self) -> int:
        """The last seq followers may see: stored (or shown by ``show_unstored``), and
        not held back."""
        visible = min(self.last_seq, max(self._flushed_seq, self._unstored_shown))
        return min(visible, self._held - 1) if self._held else visible

    @property
    def unseen(self) -> bool:
        """Whether buffered events wait to be stored before followers may see them (the
        end of a run whose store failed, with a shared store)."""
        return self.visible_seq < self.last_seq

    def since(self, after_seq: int, most: int | None = None) -> list[Event]:
        """Visible buffered events with ``seq > after_seq`` (``after_seq >= first_seq - 1``),
        at most ``most`` of them."""
        start = after_seq + 1 - self._first_seq
        end = self.visible_seq + 1 - self._first_seq
        if most is not None:
            end = min(end, start + most)
        return self._buffer[start:end] if start < end else []

    def unflushed(self) -> list[Event]:
        """Buffered events not stored yet, visible or not."""
        if self._flushed_seq < self._first_seq - 1:
            return []
        return self._buffer[self._flushed_seq + 1 - self._first_seq :]

    def take_unflushed(self) -> list[Event]:
        """The events to store now (``unflushed``): from here on they never change."""
        pending = self.unflushed()
        if pending:
            self._taken_seq = max(self._taken_seq, pending[-1].seq)
        return pending

    def forget_stored(self) -> None:
        """Drop the stored events at the buffer's head (a run that publishes a lot):
        followers that are behind read them from the store."""
        drop = self._flushed_seq + 1 - self._first_seq
        if drop > 0:
            del self._buffer[:drop]
            self._first_seq += drop

    def release(self) -> None:
        """Drop the buffer once its events are stored and no run is active."""
        if not self.all_stored:
            raise RuntimeError("release before flush")
        self._buffer = []
        self._held = 0
        self._unstored_shown = 0
        self._first_seq = self._next_seq

    # -- followers -------------------------------------------------------------------

    def join(self) -> None:
        """A follower starts reading (the hub stays while it does)."""
        self._followers += 1

    def leave(self) -> None:
        self._followers -= 1

    @property
    def followers(self) -> int:
        """Followers reading the hub now."""
        return self._followers

    @property
    def waiting(self) -> bool:
        """Whether a follower is waiting for the next event."""
        return bool(self._waiters)

    def notify(self) -> None:
        """Wake every follower waiting in ``changed``."""
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def changed(self) -> asyncio.Future[None]:
        """A future of the caller's own that completes at the next stored write or state
        change (cancelling it leaves the other followers waiting)."""
        waiters = self._waiters
        if len(waiters) > self._followers:
            # Some followers stopped waiting (each waits on one at most): drop theirs.
            waiters[:] = [waiter for waiter in waiters if not waiter.done()]
        waiter = asyncio.get_running_loop().create_future()
        waiters.append(waiter)
        return waiter
