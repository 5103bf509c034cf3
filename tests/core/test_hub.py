"""The hub's named steps: what a run, the store and other replicas may tell it.

Its seqs are its own (``core/hub.py``): nothing outside can set them, so "followers see
only stored events" is kept by this one class.
"""

from __future__ import annotations

import asyncio

import pytest

from engine_service.core import events as ev
from engine_service.core.hub import SessionHub


def _publish(hub: SessionHub, count: int, run_id: str = "r") -> list[ev.Event]:
    return [hub.publish(run_id, ev.StepStarted("x")) for _ in range(count)]


@pytest.mark.parametrize(
    "name", ["flushed_seq", "reserved_seq", "active_run_id", "incarnation", "followers"]
)
def test_the_hub_s_seqs_and_run_cannot_be_set_from_outside(name: str) -> None:
    hub = SessionHub("s", 0)
    with pytest.raises(AttributeError):
        setattr(hub, name, 5)


def test_begin_drops_a_stored_buffer_follows_the_store_and_takes_the_run() -> None:
    hub = SessionHub("s", 0)
    hub.begin("r1", 0, reserved_seq=8)
    _publish(hub, 3, "r1")
    hub.stored(3)
    hub.end("r1")
    assert hub.active_run_id == "" and [e.seq for e in hub.since(0)] == [1, 2, 3]

    hub.begin("r2", 10, reserved_seq=20)  # another replica ran meanwhile: the store is at 10

    assert (hub.active_run_id, hub.first_seq, hub.last_seq) == ("r2", 11, 10)
    assert hub.since(10) == []
    assert hub.to_reserve(16) == 0  # 20 reserved: enough until 12 are used
    assert hub.publish("r2", ev.StepStarted("y")).seq == 11


def test_to_reserve_asks_for_a_block_once_half_of_it_is_used() -> None:
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=8)
    _publish(hub, 3)
    assert hub.to_reserve(8) == 0
    _publish(hub, 2)  # 5 used: 5 + 4 > 8
    assert hub.to_reserve(8) == 13
    hub.stored(5, reserved_through=13)
    assert hub.to_reserve(8) == 0


def test_the_end_is_shown_once_the_run_let_go_and_only_its_own_run_is_let_go() -> None:
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=8)
    _publish(hub, 2)
    hub.publish("r", ev.RunFinished(), hold=True)
    hub.stored(3)
    assert [e.seq for e in hub.since(0)] == [1, 2]  # stored, but held

    hub.end("other")
    assert hub.active_run_id == "r"
    hub.end("r")
    assert hub.active_run_id == "" and [e.seq for e in hub.since(0)] == [1, 2, 3]
    assert hub.unused


def test_catch_up_waits_for_a_local_buffer_to_be_stored() -> None:
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=8)
    _publish(hub, 2)
    hub.end("r")
    hub.catch_up(9, "remote")  # not stored yet: the local settle comes first
    assert (hub.last_seq, hub.active_run_id) == (2, "")

    hub.stored(2)
    hub.catch_up(9, "remote")
    assert (hub.first_seq, hub.last_seq, hub.active_run_id) == (10, 9, "remote")


def test_drop_unstored_forgets_what_another_replica_closed() -> None:
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=8)
    _publish(hub, 4)
    hub.stored(2)

    hub.drop_unstored(6)  # the other replica stored the run's end at 6

    assert hub.all_stored and hub.unflushed() == []
    assert (hub.first_seq, hub.last_seq) == (7, 6)


async def test_a_follower_that_stops_waiting_leaves_the_others_waiting() -> None:
    # Each follower waits on a future of its own: cancelling one (its client left, or
    # its poll timed out) never cancels another's wait, and a stored write wakes the rest.
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=8)
    hub.join()
    hub.join()
    gone = asyncio.ensure_future(hub.changed())
    staying = asyncio.ensure_future(hub.changed())
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.sleep(0)
    assert not staying.done()

    _publish(hub, 1)
    hub.stored(1)

    await asyncio.wait_for(staying, 1)
    assert gone.cancelled()


async def test_waits_that_time_out_do_not_pile_up() -> None:
    # A follower of another replica's run polls: its wait times out again and again with
    # nothing stored. The hub keeps at most one future per follower (plus the new one).
    hub = SessionHub("s", 0)
    hub.join()
    for _ in range(1000):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0):
                await hub.changed()
    assert len(hub._waiters) <= 2
    waiter = hub.changed()
    hub.notify()
    assert waiter.done() and not hub.waiting


def test_the_open_tail_is_the_last_event_until_a_write_takes_it_or_followers_may_see_it() -> None:
    """``core.flush`` appends a delta to the open tail: never to what a write holds,
    what followers may see, or the held end of a run."""
    hub = SessionHub("s", 0)
    hub.begin("r", 0, reserved_seq=10)
    first = hub.publish("r", ev.StepStarted("x"))
    assert hub.open_tail("r") is first
    assert hub.open_tail("another run") is None
    assert hub.take_unflushed() == [first]
    assert hub.open_tail("r") is None  # a write holds it, stored or not
    second = hub.publish("r", ev.StepStarted("y"))
    assert hub.open_tail("r") is second
    hub.stored(1)
    assert hub.open_tail("r") is second
    hub.show_unstored()
    assert hub.open_tail("r") is None  # followers may see it
    hub.publish("r", ev.RunFinished(), hold=True)
    assert hub.open_tail("r") is None  # the run's end, held
