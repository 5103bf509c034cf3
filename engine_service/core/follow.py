"""Following sessions: this engine's hubs, replica catch-up, and the follow loop.

:class:`Hubs` keeps one ``SessionHub`` per session that has a run or a follower here,
points the hubs of other replicas' runs at the store's state as their signals come (with a
poll as a safety net), and streams a session's events to each follower: stored events
from the store, then the hub's, with no gap and no duplicate.

One job, callbacks instead of imports (as ``core.leases``): ``is_local`` says whether a
run of this engine holds the session, ``is_unsettled`` whether its end waits for the
store, ``accepting`` whether the engine still takes runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from engine_service.core import events as ev
from engine_service.core.bounds import body_size, bounded_events, fit_bytes
from engine_service.core.hub import SessionHub
from engine_service.core.models import Session
from engine_service.core.store import SessionStore, Signal, SignalKind

__all__ = ["Hubs", "flat", "of_run"]

READ_BATCH = 500
STORE_BATCH = 8
"""Stored events a follower reads at first; it doubles while they are small (up to
``READ_BATCH``) and shrinks to what fits in ``max_event_bytes`` when they are big."""
LIVE_BATCH = 64
"""Most events a follower takes from the hub at once (and holds while it is not read)."""
REMOTE_POLL_INTERVAL = 1.0
"""Seconds a follower of another replica's run waits for a signal before it reads the store."""


def incarnation(session: Session) -> tuple[object, ...]:
    """What tells a session from a later one made under the same id."""
    return (session.created_at, session.owner)


class Hubs:
    """The hubs of one engine, by session id."""

    def __init__(
        self,
        store: SessionStore,
        *,
        max_event_bytes: int,
        is_local: Callable[[str], bool],
        is_unsettled: Callable[[str], bool],
        accepting: Callable[[], bool],
    ) -> None:
        self.store = store
        self.max_event_bytes = max_event_bytes
        self._hubs: dict[str, SessionHub] = {}
        self._is_local = is_local
        self._is_unsettled = is_unsettled
        self._accepting = accepting

    def hub(self, session: Session) -> SessionHub:
        """The session's hub, made if there is none."""
        hub = self._hubs.get(session.id)
        if hub is not None and hub.incarnation != incarnation(session):
            # The hub of a session deleted on another replica, whose id was taken again:
            # its followers end, as at a delete here, and never see the new session.
            del self._hubs[session.id]
            hub.notify()
            hub = None
        if hub is None:
            hub = SessionHub(session.id, session.last_seq, incarnation(session))
            self._hubs[session.id] = hub
        return hub

    @property
    def followers(self) -> int:
        """Followers of every hub: the follows open on this engine."""
        return sum(hub.followers for hub in self._hubs.values())

    def shown_seq(self, session: Session) -> int:
        """The last seq of ``session`` any follower may have been shown: the stored last,
        or past it, the end of a run this engine showed before it could store it
        (``SessionHub.show_unstored``)."""
        hub = self._hubs.get(session.id)
        if hub is None or hub.incarnation != incarnation(session):
            return session.last_seq
        return max(session.last_seq, hub.visible_seq)

    def running(self, session_id: str, run_id: str) -> bool:
        """Whether ``run_id`` is the active run of the session's hub here (which then holds
        every event of it)."""
        hub = self._hubs.get(session_id)
        return hub is not None and hub.active_run_id == run_id

    def drop(self, session_id: str) -> None:
        """The session was deleted: its followers end."""
        hub = self._hubs.pop(session_id, None)
        if hub is not None:
            hub.notify()

    def drop_if_unused(self, hub: SessionHub) -> None:
        """Drop ``hub`` once nothing here needs it: no follower, no run of this engine
        holding the session, no end of one waiting for the store. A hub that follows
        another replica's run goes with its last follower, that run still active or not:
        waiting for its end signal would keep it for ever if the signal were missed, and
        the next follower makes it again from the store."""
        session_id = hub.session_id
        if hub.followers or self._is_unsettled(session_id) or self._hubs.get(session_id) is not hub:
            return
        if self._is_local(session_id):
            return  # a run here publishes to this hub, whatever a follower last made of it
        del self._hubs[session_id]

    def wake_all(self) -> None:
        """Wake every follower (the engine shuts down: they end once no run is active)."""
        for hub in self._hubs.values():
            hub.notify()

    def on_signal(self, signal: Signal) -> None:
        """Another replica's run of a session followed here began, stored events or ended."""
        hub = self._hubs.get(signal.session_id)
        if hub is None:
            return  # nobody here follows it
        active = hub.active_run_id
        if signal.kind is SignalKind.BEGUN:
            if signal.last_seq < hub.last_seq:
                return  # late news of a run whose events were already seen (ours, ended)
            active = signal.run_id
        elif signal.kind is SignalKind.ENDED and active == signal.run_id:
            active = ""
        hub.catch_up(signal.last_seq, active)
        self.drop_if_unused(hub)

    def lost(self, hub: SessionHub, run_id: str, last_seq: int, active_run_id: str) -> None:
        """Run ``run_id`` of this engine was closed or taken over by another replica, the
        store then at ``last_seq`` with ``active_run_id`` holding the session (the run
        itself while the replica that resumed it answers). What the run did not store here
        never will be; the followers read the rest from the store, and follow a run still
        active there as another replica's run, to its end (``until_idle`` ones too)."""
        hub.drop_unstored(last_seq)
        hub.end(run_id)
        if not hub.unused:  # followers: point them at the store, as ``on_signal`` does
            hub.catch_up(last_seq, active_run_id)

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
        return incarnation(current) == hub.incarnation and self._hubs.get(hub.session_id) is hub

    async def follow(
        self, session_id: str, after_seq: int, *, until_idle: bool, session: Session | None = None
    ) -> AsyncIterator[ev.Event]:
        """Stored events after ``after_seq``, then live ones: no gap, no duplicate."""
        lists = self.follow_lists(session_id, after_seq, until_idle=until_idle, session=session)
        async for events in lists:
            for event in events:
                yield event

    async def follow_lists(
        self, session_id: str, after_seq: int, *, until_idle: bool, session: Session | None = None
    ) -> AsyncIterator[list[ev.Event]]:
        """As :meth:`follow`, the events that are ready together as one list (never empty;
        at most one event's worth of bytes, ``max_event_bytes``, or one event)."""
        if session is None:
            session = await self.store.get_session(session_id)
        hub = self.hub(session)
        if self.store.shared and not self._is_local(session_id):
            hub.catch_up(session.last_seq, session.active_run_id)
        hub.join()
        last = after_seq
        batch = STORE_BATCH
        limit = self.max_event_bytes
        try:
            while True:
                if self._hubs.get(session_id) is not hub:
                    return  # the session was deleted
                first = hub.first_seq
                if last + 1 < first:
                    # The store held every event before ``first`` when the read began (the
                    # hub moves past a seq only once it is stored or never will be); the hub
                    # may move further while the read is in flight, past events the store
                    # holds only now (another replica's next write): those are read next.
                    stored = await self.store.read_events(session_id, last, batch)
                    if not await self._same_session(hub):
                        return  # deleted meanwhile: what was read may be the id's next owner's
                    stored = [e for e in stored if e.seq < first]
                    if not stored:
                        last = first - 1  # retention removed them, or they were never stored
                        continue
                    # A reader holds at most one event's worth of big events while it
                    # is not read (``core.bounds``); what is left is read again later.
                    read = len(stored)
                    stored = bounded_events(stored, limit, limit)
                    # Read about what fits next time: a batch of big events is never
                    # much more than max_event_bytes, even for a moment.
                    batch = len(stored) if len(stored) < read else min(batch * 2, READ_BATCH)
                    last = stored[-1].seq
                    yield stored
                    del stored
                    continue
                live = hub.since(last, LIVE_BATCH)
                if live:
                    # What a reader holds while its client does not read: one event's
                    # worth of bytes (or one event), as for stored events.
                    live = live[: fit_bytes((body_size(e.body) for e in live), limit)]
                    last = live[-1].seq
                    yield live
                    continue
                if until_idle and not hub.active_run_id and not hub.unseen:
                    return
                if not self._accepting() and not hub.active_run_id:
                    return
                # Each follower waits on its own future: going away cancels only its own.
                if not self.store.shared or self._is_local(session_id):
                    await hub.changed()
                    continue
                # Another replica's run: its signals wake us; a missed one costs a poll.
                try:
                    async with asyncio.timeout(REMOTE_POLL_INTERVAL):
                        await hub.changed()
                except TimeoutError:
                    if not self._is_local(session_id) and self._hubs.get(session_id) is hub:
                        polled = await self.store.get_session(session_id)
                        if incarnation(polled) != hub.incarnation:
                            return  # deleted, and its id taken again
                        if not self._is_local(session_id):
                            # A run here may have taken the session while the read was
                            # in flight: the hub is then its, ahead of what was read.
                            hub.catch_up(polled.last_seq, polled.active_run_id)
        finally:
            hub.leave()
            self.drop_if_unused(hub)


async def of_run(
    lists: AsyncIterator[list[ev.Event]], run_id: str
) -> AsyncIterator[list[ev.Event]]:
    """The events of run ``run_id`` in ``lists``, up to its terminal event (a run's stream)."""
    async for events in lists:
        out = [event for event in events if event.run_id == run_id]
        for index, event in enumerate(out):
            if isinstance(event.body, ev.TERMINAL):
                yield out[: index + 1]
                return
        if out:
            yield out


async def flat(lists: AsyncIterator[list[ev.Event]]) -> AsyncIterator[ev.Event]:
    """The events of ``lists``, one by one."""
    async for events in lists:
        for event in events:
            yield event
