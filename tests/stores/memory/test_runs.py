"""The memory store's runs (``engine_service.stores.memory.runs``): a run's end and the
deliveries stored with it are both stored or neither, even when adding a delivery (through
``self``, which a subclass may override) fails."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery
from engine_service.core.models import RunStatus
from engine_service.stores.memory import MemorySessionStore

T0 = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)


class _NoOutbox(MemorySessionStore):
    """A memory store whose outbox refuses every delivery."""

    async def add_delivery(self, delivery: Delivery) -> None:
        raise OSError("the outbox is full")


async def test_a_run_whose_delivery_cannot_be_added_is_left_as_it_was() -> None:
    store = _NoOutbox()
    await store.begin_run("s1", "r1", T0, create=True)
    end = ev.Event(1, 1_700_000_000.0, "s1", "r1", ev.RunFinished())
    webhook = Delivery("run_r1", "https://hooks.example/", "{}", T0, T0)

    with pytest.raises(OSError):
        await store.finish_run(
            "s1", "r1", RunStatus.SUCCEEDED, T0, events=[end], deliveries=[webhook]
        )

    assert (await store.get_run("s1", "r1")).status is RunStatus.RUNNING
    session = await store.get_session("s1")
    assert session.active_run_id == "r1" and session.last_seq == 0
    assert await store.read_events("s1", 0, 0) == []
