"""The engine's event stream, read on its own thread into a bounded queue.

A sync gRPC stream cannot be read with a timeout, and a client that left is noticed only
when a write fails. So a relay thread reads the call into a queue, and the response body
waits on the queue with a timeout: that is what lets it write heartbeats, notice a
draining worker, and batch the events that are already waiting. Cancelling the relay
cancels the gRPC call.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Final

import grpc

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb

__all__ = ["END", "OPEN_WAIT", "POLL", "QUEUE_SIZE", "End", "EventRelay", "Item", "open_relay"]

log = logging.getLogger(__name__)

POLL: Final = 0.25
"""How often a waiting reader looks up (draining, cancelled), in seconds."""
QUEUE_SIZE: Final = 4096
"""Events read ahead of a slow HTTP client before the relay stops reading gRPC."""
OPEN_WAIT: Final = 10.0
"""How long a new stream waits for the engine to accept its call, in seconds: a refusal
(404, 409, ...) within this time is answered as an error response, not in the stream."""


class End:
    """Queue marker: the gRPC stream ended normally."""


END: Final = End()

Item = pb.Event | grpc.RpcError | End
"""What the relay hands on: an event, the error that broke the stream, or its end."""


class EventRelay:
    """Reads a gRPC event stream on its own thread into a bounded queue."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._queue: queue.Queue[Item] = queue.Queue(QUEUE_SIZE)
        self._cancelled = threading.Event()
        self._held: Item | None = None
        self._thread = threading.Thread(target=self._pump, name="agentik-relay", daemon=True)
        self._thread.start()

    def _put(self, item: Item) -> bool:
        while not self._cancelled.is_set():
            try:
                self._queue.put(item, timeout=POLL)
            except queue.Full:
                continue
            return True
        return False

    def _pump(self) -> None:
        try:
            for event in self._call:
                if not self._put(event):
                    return
        except grpc.RpcError as exc:
            if not self._cancelled.is_set():
                self._put(exc)
            return
        except Exception:  # never leave the consumer waiting on a dead relay
            log.exception("reading the engine's event stream failed")
        self._put(END)

    def get(self, timeout: float) -> Item | None:
        """The next item, or None when nothing came within ``timeout`` seconds."""
        item, self._held = self._held, None
        if item is not None:
            return item
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def get_nowait(self) -> Item | None:
        """The next item if one is waiting, else None."""
        item, self._held = self._held, None
        if item is not None:
            return item
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def peek(self, timeout: float) -> Item | None:
        """Like :meth:`get`, but the item stays first in line."""
        if self._held is None:
            self._held = self.get(timeout)
        return self._held

    def cancel(self) -> None:
        """Cancel the gRPC call; the relay thread ends soon after. Safe to repeat."""
        self._cancelled.set()
        self._call.cancel()

    def join(self, timeout: float) -> bool:
        """Wait for the relay thread to end; True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


def open_relay(call: Any, wait: float = OPEN_WAIT) -> EventRelay:
    """Relay ``call`` once the engine has taken it.

    The engine refuses a run (busy, unknown thread, overloaded) as the call's first
    answer. Waiting up to ``wait`` for that answer lets the route raise the refusal as an
    error response, before any stream is open; the ``grpc.RpcError`` is raised as is, for
    each protocol's error table. An event, the stream's end, or silence opens the stream.
    """
    relay = EventRelay(call)
    first = relay.peek(wait)
    if isinstance(first, grpc.RpcError):
        relay.cancel()
        raise first
    return relay
