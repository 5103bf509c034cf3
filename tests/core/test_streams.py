"""``core.streams``: the event streams open on an engine, counted in all and per principal."""

from __future__ import annotations

import pytest

from engine_service.core.errors import Overloaded, RateLimited
from engine_service.core.streams import StreamSlots


def test_a_principal_over_its_own_limit_is_rate_limited_naming_the_setting() -> None:
    slots = StreamSlots(most=10, per_caller=2)
    slots.take("alice")
    slots.take("alice")
    with pytest.raises(RateLimited) as caught:
        slots.take("alice")
    assert caught.value.message.startswith("you (alice) have 2 event streams open")
    assert "[auth] max_streams_per_caller (AGENTIK_MAX_STREAMS_PER_CALLER)" in caught.value.message
    assert caught.value.retry_after >= 1
    slots.take("bob")  # another principal has its own
    assert (len(slots), slots.held("alice"), slots.held("bob")) == (3, 2, 1)


def test_the_engine_over_its_limit_is_overloaded_for_everyone_naming_the_setting() -> None:
    slots = StreamSlots(most=2)
    slots.take("alice")
    slots.take("bob")
    with pytest.raises(Overloaded) as caught:
        slots.take("carol")
    assert "2 event streams open, the most [engine] max_streams (AGENTIK_MAX_STREAMS)" in (
        caught.value.message
    )


def test_a_slot_given_back_is_free_again_and_giving_it_back_twice_changes_nothing() -> None:
    slots = StreamSlots(most=1, per_caller=1)
    give_back = slots.take("alice")
    give_back()
    give_back()
    assert (len(slots), slots.held("alice")) == (0, 0)
    slots.take("alice")
    with pytest.raises(Overloaded):
        slots.take("bob")


def test_no_limit_of_its_own_leaves_a_principal_the_engine_s() -> None:
    slots = StreamSlots(most=3, per_caller=0)
    for _ in range(3):
        slots.take("")
    with pytest.raises(Overloaded):
        slots.take("")


def test_streams_that_only_follow_cannot_crowd_out_the_runs() -> None:
    """A run's own stream counts, but the engine-wide limit does not refuse it (the run
    slots bound runs): idle subscriptions filling the engine leave runs possible. The
    caller's own limit still holds for runs."""
    slots = StreamSlots(most=2, per_caller=3)
    slots.take("alice")
    slots.take("bob")
    with pytest.raises(Overloaded):
        slots.take("carol")
    give_back = slots.take("carol", run=True)
    assert (len(slots), slots.held("carol")) == (3, 1)
    give_back()
    slots.take("alice", run=True)
    slots.take("alice", run=True)
    with pytest.raises(RateLimited):
        slots.take("alice", run=True)
