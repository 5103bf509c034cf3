"""The AG-UI SSE body: ``data: <json>`` frames encoded by ``ag_ui.encoder``.

Once the stream is open every failure is a RUN_ERROR, and the stream always ends with
RUN_FINISHED or RUN_ERROR — also when the engine connection breaks, the engine's stream
ends early, the worker shuts down mid-run, or the facade has a bug.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import grpc
from ag_ui.core import ActivityDeltaEvent, ActivitySnapshotEvent, BaseEvent
from ag_ui.encoder import EventEncoder

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agui.events import TEXT_ROLES, run_error, to_agui
from web_facade.errors import AGUI_WORDS, from_rpc_error
from web_facade.stream import EventStream, Relay

__all__ = ["AguiStream"]

_ENCODER: Final = EventEncoder()
_TERMINAL: Final = frozenset({"RUN_FINISHED", "RUN_ERROR"})


def _encoded(event: BaseEvent) -> bytes:
    return _ENCODER.encode(event).encode()


_dumps: Callable[[Any], bytes] | None = None


def _content_frame(event: pb.Event, content: pb.TextMessageContent) -> bytes:
    """TEXT_MESSAGE_CONTENT's frame, written directly: byte for byte what the SDK's model
    and encoder write (``tests/web/agui/test_events.py`` checks every code point), in 2 µs
    against their 20. Tokens that come apart are not joined, so it is most of a slow
    stream's frames (50 tokens 20 ms apart: ~50 a run, 0.9 ms of web CPU). orjson is
    imported by the first one (not held by an idle worker)."""
    return _frame(
        {
            "type": "TEXT_MESSAGE_CONTENT",
            "timestamp": _millis(event),
            "messageId": content.message_id,
            "delta": content.delta,
        }
    )


def _start_frame(event: pb.Event, start: pb.TextMessageStart) -> bytes:
    """TEXT_MESSAGE_START's frame, written directly as :func:`_content_frame` is (and
    checked the same way): once an answer, as the SDK writes it, with its role."""
    role = TEXT_ROLES.get(start.role, "assistant")
    return _frame(
        {
            "type": "TEXT_MESSAGE_START",
            "timestamp": _millis(event),
            "messageId": start.message_id,
            "role": role,
        }
    )


def _end_frame(event: pb.Event, end: pb.TextMessageEnd) -> bytes:
    """TEXT_MESSAGE_END's frame, written directly as :func:`_content_frame` is."""
    return _frame(
        {"type": "TEXT_MESSAGE_END", "timestamp": _millis(event), "messageId": end.message_id}
    )


def _millis(event: pb.Event) -> int:
    return event.time.seconds * 1000 + event.time.nanos // 1_000_000


def _frame(body: dict[str, Any]) -> bytes:
    global _dumps
    if _dumps is None:
        import orjson

        _dumps = orjson.dumps
    return b"data: " + _dumps(body) + b"\n\n"


def _patch(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations taking ``before`` to ``after``, key by key at the top level, in
    key order."""
    ops: list[dict[str, Any]] = []
    for key in sorted(before):  # sorted: the engine's JSON objects have no order
        if key not in after:
            ops.append({"op": "remove", "path": "/" + _pointer(key)})
    for key in sorted(after):
        value = after[key]
        if key not in before:
            ops.append({"op": "add", "path": "/" + _pointer(key), "value": value})
        elif before[key] != value:
            ops.append({"op": "replace", "path": "/" + _pointer(key), "value": value})
    return ops


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


class AguiStream(EventStream):
    """The AG-UI SSE body of one run, with its terminal event guaranteed: whatever ends
    the stream before the engine's RUN_FINISHED or RUN_ERROR writes a RUN_ERROR.

    (When the client sends no state, the engine itself follows RUN_STARTED with a
    STATE_SNAPSHOT of the thread's state, so the run's STATE_DELTAs apply.)
    """

    name = "AG-UI"

    def __init__(self, relay: Relay, heartbeat: float) -> None:
        super().__init__(relay, heartbeat)
        self.activities: dict[str, dict[str, Any]] = {}
        """The content of each activity this stream has shown, by message id: the next
        report of one is an ACTIVITY_DELTA against it."""

    def _activity(self, event: ActivitySnapshotEvent) -> BaseEvent:
        """The first report of an activity in this stream as a snapshot, a later one as the
        delta from what the client holds."""
        before = self.activities.get(event.message_id)
        self.activities[event.message_id] = event.content
        if before is None:
            return event
        patch: Any = _patch(before, event.content)  # validated into the SDK's operations
        return ActivityDeltaEvent(
            message_id=event.message_id,
            activity_type=event.activity_type,
            patch=patch,
            timestamp=event.timestamp,
        )

    def encode_event(self, event: pb.Event) -> bytes:
        kind = event.WhichOneof("kind")
        if kind == "text_message_content":
            return _content_frame(event, event.text_message_content)
        if kind == "text_message_start":
            return _start_frame(event, event.text_message_start)
        if kind == "text_message_end":
            return _end_frame(event, event.text_message_end)
        converted = to_agui(event)
        if converted is None:
            return b""
        if isinstance(converted, ActivitySnapshotEvent):
            converted = self._activity(converted)
        if converted.type in _TERMINAL:
            self.done = True
        return _encoded(converted)

    def encode_error(self, error: grpc.RpcError) -> bytes:
        mapped = from_rpc_error(error, AGUI_WORDS)
        return _encoded(run_error(mapped.code, mapped.message))

    def on_end(self) -> bytes:
        message = "the engine's event stream ended before the run did"
        return _encoded(run_error("engine_error", message))

    def on_drain(self) -> bytes:
        message = "the server is restarting; the run goes on, reload the thread"
        return _encoded(run_error("shutting_down", message))

    def on_failure(self, exc: Exception) -> bytes:
        return _encoded(run_error("internal", "internal error in the web facade"))
