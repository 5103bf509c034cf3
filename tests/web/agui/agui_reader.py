"""Reading ``POST /agui`` streams in tests: strict frames, every event parsed by ``ag_ui.core``.

A frame is ``data: <json>\\n\\n`` (LF only) or an SSE comment (heartbeat). Each event is
validated as the ``ag_ui.core.Event`` union, so a field the models do not describe or a
wrong shape fails the test. :func:`assert_well_formed` holds a run's events to the order
rules ``@ag-ui/client`` enforces.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ag_ui.core import BaseEvent, Event, EventType
from pydantic import TypeAdapter

from tests.web.conftest import WAIT

EVENT: TypeAdapter[Any] = TypeAdapter(Event)
TERMINAL = (EventType.RUN_FINISHED, EventType.RUN_ERROR)


def parse_event(data: str) -> BaseEvent:
    """One ``data:`` payload as its ``ag_ui.core`` event; unknown fields are an error."""
    raw = json.loads(data)
    event: BaseEvent = EVENT.validate_python(raw)
    assert not event.model_extra, f"fields the protocol does not describe: {event.model_extra}"
    assert json.loads(event.model_dump_json(by_alias=True)) == raw, "the event does not round-trip"
    return event


class FrameParser:
    """Feeds on raw bytes; yields the events of complete frames and counts heartbeats."""

    def __init__(self) -> None:
        self.pending = b""
        self.heartbeats = 0

    def feed(self, chunk: bytes) -> Iterator[BaseEvent]:
        assert b"\r" not in chunk, "frames must use LF line ends only"
        self.pending += chunk
        while b"\n\n" in self.pending:
            block, self.pending = self.pending.split(b"\n\n", 1)
            lines = block.decode("utf-8").split("\n")
            if all(line.startswith(":") for line in lines):
                self.heartbeats += 1
                continue
            assert len(lines) == 1 and lines[0].startswith("data: "), f"bad frame {block!r}"
            yield parse_event(lines[0][len("data: ") :])


class AguiReader:
    """Pulls the events of a streamed response (Flask test client or httpx) with deadlines."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._parser = FrameParser()
        self.events: list[BaseEvent] = []
        self.ended = False

    def _pull(self) -> bool:
        try:
            chunk = next(self._chunks)
        except StopIteration:
            self.ended = True
            return False
        self.events.extend(self._parser.feed(chunk))
        return True

    def read_until(
        self, done: Callable[[list[BaseEvent]], bool], within: float = WAIT
    ) -> list[BaseEvent]:
        deadline = time.monotonic() + within
        while not done(self.events):
            assert time.monotonic() < deadline, f"timed out; got {types(self.events)}"
            assert self._pull(), f"stream ended; got {types(self.events)}"
        return self.events

    def read_to_end(self, within: float = WAIT) -> list[BaseEvent]:
        deadline = time.monotonic() + within
        while self._pull():
            assert time.monotonic() < deadline, "the stream did not end in time"
        assert self._parser.pending == b"", "the stream ended mid-frame"
        return self.events


def types(events: Iterable[BaseEvent]) -> list[str]:
    return [EventType(e.type).value for e in events]


def types_merged(events: Iterable[BaseEvent]) -> list[str]:
    """``types``, with a run of the same content type as one: how many content events a
    stream makes depends on how the LLM's tokens arrive (those read together are one)."""
    out: list[str] = []
    for name in types(events):
        if not (out and out[-1] == name and name.endswith(("_CONTENT", "_ARGS"))):
            out.append(name)
    return out


def has(kind: EventType) -> Callable[[list[BaseEvent]], bool]:
    return lambda events: any(e.type == kind for e in events)


def of(events: Iterable[BaseEvent], kind: EventType) -> list[Any]:
    """The events of one type (typed Any: the tests read the fields of that type)."""
    return [e for e in events if e.type == kind]


def text(events: Iterable[BaseEvent]) -> str:
    return "".join(e.delta for e in of(events, EventType.TEXT_MESSAGE_CONTENT))


def assert_well_formed(events: list[BaseEvent]) -> None:
    """The rules of ``@ag-ui/client``'s verifier for one run, plus a terminal last event."""
    assert events, "no events"
    first = events[0]
    assert first.type in (EventType.RUN_STARTED, EventType.RUN_ERROR), types(events)
    if first.type == EventType.RUN_STARTED:
        assert getattr(first, "protocol_version", None) == "1.0"
    assert events[-1].type in TERMINAL, f"no terminal event: {types(events)}"
    assert all(e.type not in TERMINAL for e in events[:-1]), types(events)
    assert all(e.type != EventType.RUN_STARTED for e in events[1:]), types(events)
    open_ids: dict[str, set[str]] = {"text": set(), "tool": set(), "span": set(), "reason": set()}
    brackets = {
        EventType.TEXT_MESSAGE_START: ("text", "message_id", True),
        EventType.TEXT_MESSAGE_CONTENT: ("text", "message_id", None),
        EventType.TEXT_MESSAGE_END: ("text", "message_id", False),
        EventType.TOOL_CALL_START: ("tool", "tool_call_id", True),
        EventType.TOOL_CALL_ARGS: ("tool", "tool_call_id", None),
        EventType.TOOL_CALL_END: ("tool", "tool_call_id", False),
        EventType.REASONING_START: ("span", "message_id", True),
        EventType.REASONING_END: ("span", "message_id", False),
        EventType.REASONING_MESSAGE_START: ("reason", "message_id", True),
        EventType.REASONING_MESSAGE_CONTENT: ("reason", "message_id", None),
        EventType.REASONING_MESSAGE_END: ("reason", "message_id", False),
    }
    for event in events:
        rule = brackets.get(EventType(event.type))
        if rule is None:
            continue
        kind, key, opens = rule
        ident = getattr(event, key)
        if opens is True:
            assert ident not in open_ids[kind], f"{event.type} reopens {ident}"
            open_ids[kind].add(ident)
        else:
            assert ident in open_ids[kind], f"{event.type} for {ident}, which is not open"
            if opens is False:
                open_ids[kind].discard(ident)
    if events[-1].type == EventType.RUN_FINISHED:
        assert not any(open_ids.values()), f"RUN_FINISHED with open {open_ids}"
