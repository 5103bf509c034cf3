"""A run's stream out of a session's follow: its events only, as they came together, up to
its terminal event; flattened back to single events for callers that take them one by one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from engine_service.core import events as ev
from engine_service.core.follow import flat, of_run


def _event(seq: int, run_id: str, body: ev.EventBody) -> ev.Event:
    return ev.Event(seq=seq, time=0.0, session_id="s", run_id=run_id, body=body)


def _text(seq: int, run_id: str) -> ev.Event:
    return _event(seq, run_id, ev.TextMessageContent(message_id="m", delta=str(seq)))


async def _lists(*lists: list[ev.Event]) -> AsyncIterator[list[ev.Event]]:
    for events in lists:
        yield events


async def _all(lists: AsyncIterator[list[ev.Event]]) -> list[list[int]]:
    return [[event.seq for event in events] async for events in lists]


def test_a_runs_stream_keeps_its_events_as_they_came_and_ends_at_its_terminal_event() -> None:
    session = _lists(
        [_text(1, "other"), _event(2, "r", ev.RunStarted()), _text(3, "r")],
        [_text(4, "other")],  # nothing of the run: no empty list
        [_text(5, "r"), _event(6, "r", ev.RunFinished()), _text(7, "r")],
        [_text(8, "r")],  # after its end: never read
    )
    assert asyncio.run(_all(of_run(session, "r"))) == [[2, 3], [5, 6]]


def test_flat_gives_the_events_of_the_lists_one_by_one_in_order() -> None:
    async def seqs() -> list[int]:
        return [e.seq async for e in flat(_lists([_text(1, "r"), _text(2, "r")], [_text(3, "r")]))]

    assert asyncio.run(seqs()) == [1, 2, 3]
