"""Server-sent events over a gRPC event stream.

A sync gRPC stream cannot be read with a timeout, and a client that left is noticed
only when a write fails. So a relay thread reads the stream into a queue, and the
response generator waits on the queue with a timeout: when nothing came for the
heartbeat interval it writes an SSE comment, which keeps proxies from timing out and
makes a vanished client show up within one interval. When the generator is closed —
the client went away, or the stream ended — the gRPC call is cancelled.

Frames are ``id: <seq>\\nevent: <name>\\ndata: <json>\\n\\n`` with LF line ends only.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import grpc
from flask import Response

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.errors import from_rpc_error

__all__ = [
    "DRAINING",
    "HEARTBEAT",
    "SSE_HEADERS",
    "EventRelay",
    "event_stream",
    "frame",
    "sse_response",
]

log = logging.getLogger(__name__)

HEARTBEAT: Final = b": keep-alive\n\n"
RETRY_MS: Final = 1000
"""What ``retry:`` tells EventSource clients to wait before reconnecting, in ms."""

SSE_HEADERS: Final[Mapping[str, str]] = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}

DRAINING = threading.Event()
"""Set when the worker shuts down gracefully: open streams end at the next frame
boundary (clients resume with ``Last-Event-ID``) instead of being cut mid-frame."""

_POLL: Final = 0.25
"""How often a waiting stream looks at :data:`DRAINING`, in seconds."""
_QUEUE_SIZE: Final = 4096
"""Events read ahead of a slow HTTP client before the relay stops reading gRPC."""
_BATCH: Final = 256
"""Most events written in one chunk when they are already waiting."""


class _End:
    """Queue marker: the gRPC stream ended normally."""


_END: Final = _End()

FrameOf = Callable[[pb.Event], bytes | None]
"""Turns an engine event into an SSE frame, or None to skip it."""


def frame(seq: int | None, name: str, data: Mapping[str, Any]) -> bytes:
    """One SSE frame. ``json.dumps`` escapes newlines, so ``data`` is a single line."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {name}\ndata: {body}\n\n".encode()


class EventRelay:
    """Reads a gRPC event stream on its own thread into a bounded queue."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._queue: queue.Queue[pb.Event | grpc.RpcError | _End] = queue.Queue(_QUEUE_SIZE)
        self._cancelled = threading.Event()
        self._held: pb.Event | grpc.RpcError | _End | None = None
        self._thread = threading.Thread(target=self._pump, name="agentik-sse-relay", daemon=True)
        self._thread.start()

    def _put(self, item: pb.Event | grpc.RpcError | _End) -> bool:
        while not self._cancelled.is_set():
            try:
                self._queue.put(item, timeout=_POLL)
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
        self._put(_END)

    def get(self, timeout: float) -> pb.Event | grpc.RpcError | _End | None:
        """The next item, or None when nothing came within ``timeout`` seconds."""
        item, self._held = self._held, None
        if item is not None:
            return item
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def get_nowait(self) -> pb.Event | grpc.RpcError | _End | None:
        """The next item if one is waiting, else None."""
        return self.get(0) if self._held is not None else self._get_nowait()

    def _get_nowait(self) -> pb.Event | grpc.RpcError | _End | None:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            return None

    def peek(self, timeout: float) -> pb.Event | grpc.RpcError | _End | None:
        """Like :meth:`get`, but the item stays first in line."""
        if self._held is None:
            self._held = self.get(timeout)
        return self._held

    def cancel(self) -> None:
        """Cancel the gRPC call; the relay thread ends soon after."""
        self._cancelled.set()
        self._call.cancel()

    def join(self, timeout: float) -> bool:
        """Wait for the relay thread to end; True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _collect(
    relay: EventRelay, item: pb.Event | grpc.RpcError | _End | None, frame_of: FrameOf
) -> tuple[list[bytes], bool]:
    """Frames for ``item`` and the items already waiting behind it; True when the stream ended."""
    chunk: list[bytes] = []
    while item is not None:
        if isinstance(item, _End):
            return chunk, True
        if isinstance(item, grpc.RpcError):
            error = from_rpc_error(item)
            data = {"type": "error", "code": error.code, "message": error.message}
            chunk.append(frame(None, "error", data))
            return chunk, True
        encoded = frame_of(item)
        if encoded is not None:
            chunk.append(encoded)
        if len(chunk) >= _BATCH:
            break  # take nothing more: an item taken now would not be written
        item = relay.get_nowait()
    return chunk, False


def event_stream(relay: EventRelay, frame_of: FrameOf, heartbeat: float) -> Iterator[bytes]:
    """The SSE body: frames for the relayed events, heartbeats while idle.

    Ends when the gRPC stream ends, with an ``error`` frame (no id) when it broke, or
    when the worker drains. Closing the generator cancels the call.
    """
    try:
        # Write at once (the events already waiting, if any) so the client gets headers.
        chunk, done = _collect(relay, relay.get_nowait(), frame_of)
        yield f"retry: {RETRY_MS}\n\n".encode() + b"".join(chunk)
        quiet_since = time.monotonic()
        while not done and not DRAINING.is_set():
            item = relay.get(min(_POLL, heartbeat))
            if item is None:
                if time.monotonic() - quiet_since >= heartbeat:
                    quiet_since = time.monotonic()
                    yield HEARTBEAT
                continue
            chunk, done = _collect(relay, item, frame_of)
            if chunk:
                yield b"".join(chunk)
                quiet_since = time.monotonic()
    finally:
        relay.cancel()


def sse_response(body: Iterator[bytes]) -> Response:
    """A ``text/event-stream`` response that no proxy should buffer or cache."""
    return Response(
        body,
        status=200,
        mimetype="text/event-stream",
        headers=dict(SSE_HEADERS),
        direct_passthrough=True,
    )
