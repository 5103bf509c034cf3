"""The facade's one streaming layer, shared by every protocol.

:mod:`~web_facade.stream.relay` reads an engine call on its own thread (or
:mod:`~web_facade.stream.aio_relay` on the worker's asyncio loop, as
:mod:`~web_facade.stream.reader` picks);
:mod:`~web_facade.stream.event_stream` turns what it relays into a response body with
heartbeats, batching without loss, draining and disconnect handling. A protocol adds one
:class:`EventStream` subclass that encodes its events.
"""

from __future__ import annotations

from web_facade.stream.event_stream import (
    BATCH,
    DRAINING,
    HEARTBEAT,
    SSE_HEADERS,
    EventStream,
    sse_response,
)
from web_facade.stream.reader import follow, open_run
from web_facade.stream.relay import (
    END,
    OPEN_WAIT,
    POLL,
    End,
    EventRelay,
    Item,
    Relay,
    Resume,
    admitted,
    open_relay,
    opened,
)

__all__ = [
    "BATCH",
    "DRAINING",
    "END",
    "HEARTBEAT",
    "OPEN_WAIT",
    "POLL",
    "SSE_HEADERS",
    "End",
    "EventRelay",
    "EventStream",
    "Item",
    "Relay",
    "Resume",
    "admitted",
    "follow",
    "open_relay",
    "open_run",
    "opened",
    "sse_response",
]
