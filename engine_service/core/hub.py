"""A session's live events in memory: numbering, the active run's buffer, followers.

The hub gives each event its ``seq`` and keeps every event of the active run until the
run has ended and its events are stored. A follower that knows the last seq it saw can
therefore always find what comes next: in the store (events before the buffer), in the
buffer, or by waiting for the next publish. No queue per follower, no copy per event.

Followers see an event only once its seq is durable: stored, or inside the block of
seqs the store has reserved for the run (``reserved_seq``). After a crash the engine
continues after the reserved block, so no seq a client saw is ever given to another
event. The run keeps the reservation ahead of what it publishes; if it falls behind,
followers wait for the next reservation instead of seeing an id that could be reused.
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
        self.reserved_seq = last_seq
        """The highest seq the store holds or has reserved: followers see up to here."""
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
        self.flushed_seq = last_seq
        self.reserved_seq = max(self.reserved_seq, last_seq)

    def publish(
        self, run_id: str, body: EventBody, *, wake: bool = True, hold: bool = False
    ) -> Event:
        """Number the event and buffer it; ``wake=False`` does not wake followers, and
        ``hold`` hides the event from them until ``reveal`` (the terminal event is stored
        before anyone sees it)."""
        event = Event(self._next_seq, time.time(), self.session_id, run_id, body)
        self._next_seq += 1
        self._buffer.append(event)
        if hold:
            self._held = event.seq
        elif wake:
            self.notify()
        return event

    def reveal(self) -> None:
        """Show the event held back by ``publish(hold=True)`` and wake the followers."""
        self._held = 0
        self.notify()

    @property
    def visible_seq(self) -> int:
        """The last seq followers may see: stored or reserved, and not held back."""
        visible = min(self.last_seq, max(self.reserved_seq, self.flushed_seq))
        return min(visible, self._held - 1) if self._held else visible

    @property
    def overdrawn(self) -> bool:
        """Whether events wait for a reservation before followers may see them."""
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
