"""A session's live events in memory: numbering, the active run's buffer, followers.

The hub gives each event its ``seq`` and keeps every event of the active run until the
run has ended and its events are stored. A follower that knows the last seq it saw can
therefore always find what comes next: in the store (events before the buffer), in the
buffer, or by waiting for the next stored write. No queue per follower, no copy per event.

Followers see an event only once the store holds it: ``since`` stops at ``flushed_seq``,
the durable watermark the run advances after each write (``Turn.flush``). Whatever
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

from engine_service.core.events import Event, EventBody

__all__ = ["SessionHub"]


class SessionHub:
    """Live view of one session on this engine process."""

    __slots__ = (
        "_buffer",
        "_first_seq",
        "_held",
        "_next_seq",
        "_unstored_shown",
        "_waiter",
        "active_run_id",
        "flush_lock",
        "flushed_seq",
        "followers",
        "incarnation",
        "reserved_seq",
        "session_id",
    )

    def __init__(self, session_id: str, last_seq: int) -> None:
        self.session_id = session_id
        self._buffer: list[Event] = []
        self._first_seq = last_seq + 1
        self._next_seq = last_seq + 1
        self._waiter: asyncio.Future[None] | None = None
        self._held = 0
        """Seq of an event published with ``hold``: hidden from followers until ``reveal``."""
        self.active_run_id = ""
        self.flushed_seq = last_seq
        """The highest seq the store holds: followers see up to here, never further."""
        self.reserved_seq = last_seq
        """The highest seq the store has reserved: a crashed run's closing events come
        after it, so a seq handed out but never stored is never given to another event."""
        self._unstored_shown = 0
        """Seqs up to here are shown though not stored (``show_unstored``)."""
        self.followers = 0
        self.incarnation: tuple[object, ...] = ()
        """Which session of this id the hub is for (its creation time and owner): an id
        deleted on another replica and made again names another session."""
        self.flush_lock = asyncio.Lock()
        """Held while events are being stored, so they are stored in order."""

    @property
    def first_seq(self) -> int:
        """Seq of the oldest buffered event (or of the next event when none is buffered)."""
        return self._first_seq

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def resync(self, last_seq: int) -> None:
        """Follow the store's numbering (another replica may have run turns meanwhile)."""
        if self._buffer:
            raise RuntimeError("resync with buffered events")
        self._first_seq = self._next_seq = last_seq + 1
        self._held = 0
        self._unstored_shown = 0
        self.flushed_seq = last_seq
        self.reserved_seq = max(self.reserved_seq, last_seq)

    def publish(self, run_id: str, body: EventBody, *, hold: bool = False) -> Event:
        """Number the event and buffer it; followers see it once it is stored (``stored``).
        ``hold`` hides it even then, until ``reveal`` (the terminal event is shown once
        the run's end is stored and the run let go of the session)."""
        event = Event(self._next_seq, time.time(), self.session_id, run_id, body)
        self._next_seq += 1
        self._buffer.append(event)
        if hold:
            self._held = event.seq
        return event

    def stored(self, seq: int) -> None:
        """The store holds every event up to ``seq``: show them and wake the followers."""
        if seq > self.flushed_seq:
            self.flushed_seq = seq
            self.notify()

    def reveal(self) -> None:
        """Show the event held back by ``publish(hold=True)`` and wake the followers."""
        self._held = 0
        self.notify()

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
        visible = min(self.last_seq, max(self.flushed_seq, self._unstored_shown))
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
        if self.flushed_seq < self._first_seq - 1:
            return []
        return self._buffer[self.flushed_seq + 1 - self._first_seq :]

    def forget_stored(self) -> None:
        """Drop the stored events at the buffer's head (a run that publishes a lot):
        followers that are behind read them from the store."""
        drop = self.flushed_seq + 1 - self._first_seq
        if drop > 0:
            del self._buffer[:drop]
            self._first_seq += drop

    def release(self) -> None:
        """Drop the buffer once its events are stored and no run is active."""
        if self.flushed_seq != self.last_seq:
            raise RuntimeError("release before flush")
        self._buffer = []
        self._held = 0
        self._unstored_shown = 0
        self._first_seq = self._next_seq

    @property
    def waiting(self) -> bool:
        """Whether a follower is waiting for the next event."""
        return self._waiter is not None

    def notify(self) -> None:
        """Wake every follower waiting in ``changed``."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def changed(self) -> asyncio.Future[None]:
        """A future that completes at the next publish or state change."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter
