"""The one loop that turns a relayed engine stream into an HTTP response body.

Every protocol streams the same way; only the bytes differ. :class:`EventStream` owns the
loop — write what is waiting at once (so the client gets its headers), batch events that
arrive together, write a heartbeat comment when nothing happened for the heartbeat
interval, end at a frame boundary when the worker drains, cancel the engine call when the
body is closed — and a protocol subclass says what to write through four hooks:
:meth:`~EventStream.encode_event`, :meth:`~EventStream.encode_error`,
:meth:`~EventStream.on_end` and :meth:`~EventStream.on_drain` (plus
:meth:`~EventStream.opening` and :meth:`~EventStream.on_failure`).

Nothing is lost between relay and client: the loop takes an item from the relay only when
it will write it in the chunk it is building, and it stops taking once the protocol says
its stream is done. The heartbeat comment also makes a vanished client show up within one
interval, since a client that left is noticed only when a write fails.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator, Mapping
from typing import Final

import grpc
from flask import Response

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.stream.relay import POLL, Item, Relay

__all__ = ["BATCH", "DRAINING", "HEARTBEAT", "SSE_HEADERS", "EventStream", "sse_response"]

log = logging.getLogger(__name__)

HEARTBEAT: Final = b": keep-alive\n\n"
"""An SSE comment: ignored by clients, it keeps proxies from timing the stream out."""
BATCH: Final = 256
"""Most relayed items written in one chunk when they are already waiting."""
SSE_HEADERS: Final[Mapping[str, str]] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}


class SignalFlag:
    """A flag that a signal handler may set. ``threading.Event.set`` takes a lock: a second
    signal handled while the first handler's ``set`` held it (or while the main thread was
    inside ``clear``) waited for that lock in the same thread, forever, and the worker never
    exited (a SIGTERM deadlock, seen once in a dozen kills of ``agentik serve``). Setting
    and reading a bool takes no lock."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def clear(self) -> None:
        self._value = False

    def is_set(self) -> bool:
        return self._value


DRAINING = SignalFlag()
"""Set when the worker shuts down gracefully (``web_facade.gunicorn_conf``): open streams
end at the next frame boundary, each as its protocol says (:meth:`EventStream.on_drain`),
instead of being cut mid-frame; clients resume or reload."""


def sse_response(body: Iterator[bytes] | EventStream) -> Response:
    """A ``text/event-stream`` response that no proxy should buffer or cache.

    Given an :class:`EventStream`, the server calls its ``close`` when it is done with the
    response, so the engine call is cancelled even when the body was never read.
    """
    return Response(
        body,
        status=200,
        mimetype="text/event-stream",
        headers=dict(SSE_HEADERS),
        direct_passthrough=True,
    )


class EventStream(ABC):
    """The body of one streamed response over one relayed engine call.

    Iterate it (once) for the chunks to write; close it when the client left. A subclass
    sets :attr:`done` when it encoded its protocol's last event (AG-UI's RUN_FINISHED, an
    A2A task's final state); the stream also ends when the engine's stream does.
    """

    name = "event"
    """Names the protocol in the log when the stream fails."""

    def __init__(self, relay: Relay, heartbeat: float) -> None:
        self.relay = relay
        self.heartbeat = heartbeat
        self.done = False
        self._body: Generator[bytes, None, None] | None = None

    # -- the hooks ------------------------------------------------------------------

    def opening(self) -> bytes:
        """Bytes written first, before the events already waiting (none by default)."""
        return b""

    @abstractmethod
    def encode_event(self, event: pb.Event) -> bytes:
        """The frames of one engine event; ``b""`` to skip it. Set :attr:`done` after
        the protocol's last event: nothing more is taken from the relay."""

    @abstractmethod
    def encode_error(self, error: grpc.RpcError) -> bytes:
        """The frames that end a stream the engine broke off (engine gone, cancelled)."""

    def on_end(self) -> bytes:
        """The frames that end a stream the engine ended before :attr:`done` (none)."""
        return b""

    def on_drain(self) -> bytes:
        """The frames that end a stream because the worker shuts down (none)."""
        return b""

    def on_failure(self, exc: Exception) -> bytes:
        """The frames that end a stream after a bug in the facade (none by default)."""
        return b""

    # -- the loop -------------------------------------------------------------------

    def _chunk(self, item: Item | None) -> bytes:
        """Frames for ``item`` and for the items already waiting behind it."""
        parts: list[bytes] = []
        taken = 0
        while item is not None:
            if isinstance(item, pb.Event):
                parts.append(self.encode_event(item))
            elif isinstance(item, grpc.RpcError):
                self.done = True
                parts.append(self.encode_error(item))
            else:
                self.done = True
                parts.append(self.on_end())
            taken += 1
            if self.done or taken >= BATCH:
                break  # take nothing more: an item taken now would not be written
            item = self.relay.get_nowait()
        return b"".join(parts)

    def _loop(self) -> Generator[bytes, None, None]:
        try:
            # Write at once, even if only a heartbeat, so the client gets the headers.
            yield self.opening() + self._chunk(self.relay.get_nowait()) or HEARTBEAT
            quiet_since = time.monotonic()
            while not self.done:
                if DRAINING.is_set():
                    last = self.on_drain()
                    if last:
                        yield last
                    return
                item = self.relay.get(min(POLL, self.heartbeat))
                if item is None:
                    if time.monotonic() - quiet_since >= self.heartbeat:
                        quiet_since = time.monotonic()
                        yield HEARTBEAT
                    continue
                chunk = self._chunk(item)
                if chunk:
                    yield chunk
                    quiet_since = time.monotonic()
        except Exception as exc:
            # A facade bug must still end the stream the way the protocol asks.
            log.exception("the %s stream failed", self.name)
            if not self.done:
                last = self.on_failure(exc)
                if last:
                    yield last
        finally:
            self.relay.cancel(finished=self.done)

    def __iter__(self) -> Iterator[bytes]:
        if self._body is None:
            self._body = self._loop()
        return self._body

    def close(self) -> None:
        """End the body: the engine call is cancelled (the run itself goes on unless the
        request asked to cancel it on disconnect)."""
        if self._body is not None:
            self._body.close()
        self.relay.cancel()

    def response(self) -> Response:
        """This stream as a ``text/event-stream`` response."""
        return sse_response(self)
