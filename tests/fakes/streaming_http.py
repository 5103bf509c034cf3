"""The request handler both test HTTP servers build on (the fake OpenAI API, the hostile A2A
agent): one thread per connection, responses written straight to the socket, and a client
that leaves seen at once, also while the server waits between chunks."""

from __future__ import annotations

import abc
import contextlib
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Protocol, Self

__all__ = ["POLL_SLICE", "BackgroundServer", "Owner", "StreamingHandler"]

POLL_SLICE = 0.05
"""Seconds between looks at the socket (and at the owner's stop) while waiting."""


class Owner(Protocol):
    """The object that runs the server: it counts connections and clients that left."""

    _stopping: threading.Event

    def _track(self, sock: socket.socket, *, add: bool) -> None: ...

    def _note_closed(self) -> None: ...


class StreamingHandler(BaseHTTPRequestHandler, abc.ABC):
    """Serves one connection over HTTP/1.1; subclasses name their :class:`Owner`."""

    protocol_version = "HTTP/1.1"

    @property
    @abc.abstractmethod
    def owner(self) -> Owner:
        """The object that runs this handler's server."""

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


class BackgroundServer(abc.ABC):
    """Owns a threading HTTP server that serves in a daemon thread: ``start`` / ``stop``
    (which cuts every open connection, hanging streams included), or a context manager."""

    thread_name = "test-http"

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.connections = 0
        """How many TCP connections clients opened (keep-alive reuse shows as fewer)."""
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._sockets: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def _make_server(self) -> ThreadingHTTPServer:
        """A server bound to ``(host, port)`` whose handler knows this owner."""

    def start(self) -> Self:
        """Bind and serve in a daemon thread."""
        server = self._make_server()
        # A client that connects and resets before the accept (an engine shut down while its
        # probe connects) leaves the poll saying "ready" and a blocking accept() waiting for
        # the next connection, forever: stop() then hung. With a timeout accept() gives up
        # (an OSError the server ignores) and the accepted sockets are made blocking again.
        server.socket.settimeout(POLL_SLICE)
        self.port = int(server.server_address[1])
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": POLL_SLICE},
            name=f"{self.thread_name}-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and cut every open connection."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _track(self, sock: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self.connections += 1
                self._sockets.add(sock)
            else:
                self._sockets.discard(sock)
