"""What the memory store's parts share (``engine_service.stores.memory.dicts``): the signals
to its watchers, and calls from one part to another made through ``self``, so a subclass
that overrides one method sees every call of it (the engine's tests count writes so)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery
from engine_service.core.models import Message, Role, RunStatus, TextPart
from engine_service.core.store import RunHold, Signal, SignalKind
from engine_service.stores.memory import MemorySessionStore

T0 = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
WAIT = 5.0


def _event(seq: int) -> ev.Event:
    return ev.Event(seq, 1_700_000_000.0 + seq, "s1", "r1", ev.TextMessageContent("m", "w"))


class _Counting(MemorySessionStore):
    """Notes each call of the methods the other parts call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    async def append_messages(
        self,
        session_id: str,
        messages: Sequence[Message],
        *,
        title: str = "",
        now: datetime | None = None,
        hold: RunHold | None = None,
    ) -> None:
        self.calls.append(f"append_messages {len(messages)}")
        await super().append_messages(session_id, messages, title=title, now=now, hold=hold)

    async def append_events(
        self, session_id: str, events: Sequence[ev.Event], *, reserve_through: int = 0
    ) -> None:
        self.calls.append(f"append_events {len(events)}")
        await super().append_events(session_id, events, reserve_through=reserve_through)

    async def add_delivery(self, delivery: Delivery) -> None:
        self.calls.append(f"add_delivery {delivery.id}")
        await super().add_delivery(delivery)


async def test_a_shared_store_tells_each_watcher_of_a_run_in_the_order_it_happened() -> None:
    store = MemorySessionStore(shared=True)
    heard: list[Signal] = []
    ended = asyncio.Event()

    def on_signal(signal: Signal) -> None:
        heard.append(signal)
        if signal.kind is SignalKind.ENDED:
            ended.set()

    await store.watch(on_signal)
    await store.begin_run("s1", "r1", T0, create=True)
    await store.append_events("s1", [_event(1), _event(2)])
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, T0, events=[_event(3)])
    await asyncio.wait_for(ended.wait(), WAIT)

    assert store.shared
    assert heard == [
        Signal(SignalKind.BEGUN, "s1", "r1", 0),
        Signal(SignalKind.EVENTS, "s1", "r1", 2),
        Signal(SignalKind.ENDED, "s1", "r1", 3),
    ]


async def test_the_parts_call_each_other_through_the_store_a_subclass_overrides() -> None:
    store = _Counting()
    await store.begin_run("s1", "r1", T0, create=True)
    said = Message(id="m1", role=Role.USER, content=[TextPart("hi")], created_at=T0)
    await store.append_messages_and_events("s1", [said], [_event(1)])
    delivery = Delivery("d1", "https://hooks.example/", "{}", T0, T0)
    await store.finish_run("s1", "r1", RunStatus.SUCCEEDED, T0, deliveries=[delivery])

    assert store.calls == ["append_messages 1", "append_events 1", "add_delivery d1"]
    assert await store.get_delivery("d1") == replace(delivery, session_id="s1")
