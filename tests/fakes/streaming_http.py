"""The request handler both test HTTP servers build on (the fake OpenAI API, the hostile A2A
agent): one thread per connection, responses written straight to the socket, and a client
that leaves seen at once, also while the server waits between chunks."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

__all__ = ["POLL_SLICE", "Owner", "StreamingHandler"]

POLL_SLICE = 0.05
"""Seconds between looks at the socket (and at the owner's stop) while waiting."""


class Owner(Protocol):
    """The object that runs the server: it counts connections and clients that left."""

    _stopping: threading.Event

    def _track(self, sock: socket.socket, *, add: bool) -> None: ...

    def _note_closed(self) -> None: ...


class StreamingHandler(BaseHTTPRequestHandler):
    """Serves one connection over HTTP/1.1; subclasses name their :class:`Owner`."""

    protocol_version = "HTTP/1.1"

    @property
    def owner(self) -> Owner:
        raise NotImplementedError

    def setup(self) -> None:
        super().setup()
        # Small SSE writes must not wait for delayed ACKs.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner._track(self.connection, add=True)

    def finish(self) -> None:
        self.owner._track(self.connection, add=False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests and benchmarks read stdout."""

    def _write(self, data: bytes) -> bool:
        """Write to the client; False (and the connection marked gone) if it went away."""
        try:
            self.wfile.write(data)
        except OSError:
            self._client_gone()
            return False
        return True

    def _client_gone(self) -> None:
        self.close_connection = True
        self.owner._note_closed()

    def _wait(self, seconds: float) -> bool:
        """Sleep, watching the socket: False as soon as the client closes or the server
        stops."""
        owner = self.owner
        deadline = time.monotonic() + seconds
        poller = select.poll()
        poller.register(self.connection, select.POLLIN)
        while (remaining := deadline - time.monotonic()) > 0:
            if owner._stopping.is_set():
                self.close_connection = True
                return False
            if poller.poll(min(remaining, POLL_SLICE) * 1000):
                try:
                    peeked = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    peeked = b""
                if not peeked:
                    self._client_gone()
                    return False
                time.sleep(min(remaining, POLL_SLICE))  # a pipelined request: not our business
        return True
