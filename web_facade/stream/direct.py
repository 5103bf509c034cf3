"""A stream's frames written by the worker's asyncio loop, straight to the client's socket.

With the asyncio reader (``[web] stream_reader = "asyncio"``) every engine message reaches
the worker's loop first (:class:`~web_facade.stream.aio_relay.AioRelay`). Handing it to the
response thread to write costs a thread wake-up and a GIL hand-over per message: 0.46 ms of
one client's first token, and a wake-up per message of every open stream under load. So
once the response's head and first chunk are written (by gunicorn, on the response thread),
a stream whose hooks never block (AG-UI, ``/agentik``) is written by the loop itself
(:class:`DirectWriter`): each message is encoded and written as it arrives, with a
non-blocking write of the socket. The response thread only waits, and keeps the clock: it
asks for a heartbeat when the stream was quiet, and for the drain's last frames when the
worker shuts down.

Nothing else changes for the client, or for the bounds:

- each message is one HTTP chunk, framed as gunicorn frames its own (HTTP/1.1 chunked);
  when the stream ends normally the response thread returns and gunicorn writes the last
  chunk, and a kept-alive connection goes on;
- a socket that takes only part of a chunk holds the rest, and the relay reads no more
  from the engine until it is written (gRPC's flow control holds the rest back in the
  engine, as with a full queue); the rest must be written within the socket's timeout,
  the worker's ``web_write_timeout``, or the client is dropped exactly as a blocked
  ``send`` drops it (``TimeoutError`` out of the body: counted, connection closed);
- a client that left (a failed write) ends the body with ``EPIPE``, which gunicorn takes
  quietly, closing the connection; the engine call is cancelled as before.

Plain sockets over HTTP/1.1 only: TLS, HTTP/1.0 and ``HEAD`` keep the thread's writes, as
do streams outside gunicorn (the test client) and the thread reader.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from web_facade.stream.relay import POLL, Item

if TYPE_CHECKING:
    from web_facade.stream.aio_relay import AioRelay
    from web_facade.stream.event_stream import EventStream

__all__ = ["ENDED", "GONE", "TIMED_OUT", "DirectWriter", "direct_socket", "failure"]

log = logging.getLogger(__name__)

ENDED: Final = "ended"
"""The stream's last frames are written: the response ends normally."""
GONE: Final = "gone"
"""A write failed: the client left."""
TIMED_OUT: Final = "timed_out"
"""A chunk was not taken within the write timeout: the client stopped reading."""


def direct_socket(environ: dict[str, Any] | None) -> socket.socket | None:
    """The client's socket when the loop may write this response to it: a plain socket
    under gunicorn, with the worker's write timeout, answering an HTTP/1.1 request whose
    body gunicorn frames as chunks (not ``HEAD``); else None."""
    if environ is None or environ.get("SERVER_PROTOCOL") != "HTTP/1.1":
        return None
    if environ.get("REQUEST_METHOD") == "HEAD":
        return None
    sock = environ.get("gunicorn.socket")
    if type(sock) is not socket.socket:  # TLS (an SSLSocket), or not gunicorn
        return None
    timeout = sock.gettimeout()
    if timeout is None or timeout <= 0:
        return None
    return sock


class DirectWriter:
    """Writes ``stream``'s frames for what ``relay`` reads, on the relay's loop, to
    ``sock`` (see the module doc). :meth:`run` is the response thread's side."""

    def __init__(
        self,
        stream: EventStream,
        relay: AioRelay,
        sock: socket.socket,
        heartbeat: float,
        heartbeat_frame: bytes,
        draining: Callable[[], bool],
    ) -> None:
        self.stream = stream
        self.relay = relay
        self.loop = relay.loop
        self.heartbeat = heartbeat
        self._heartbeat_frame = heartbeat_frame
        self._draining = draining
        # A descriptor of its own: once the response thread has returned, gunicorn closes
        # its own, and a number it closed may be a new connection's by the time a late
        # write of the loop's would use it.
        self._fd = os.dup(sock.fileno())
        timeout = sock.gettimeout()
        assert timeout is not None
        self.write_timeout = timeout
        self.outcome = ""
        """``ENDED``, ``GONE`` or ``TIMED_OUT`` once the writer is done; "" until then."""
        self.last_write = time.monotonic()
        """When the loop last wrote (``time.monotonic()``): the heartbeat's clock."""
        self._backlog: deque[memoryview] = deque()
        """What the socket has not taken yet, oldest first."""
        self._closing = False
        """The stream's last frames are written or in the backlog."""
        self._room: asyncio.Future[None] | None = None
        """The relay waits on it while there is a backlog."""
        self._deadline: asyncio.TimerHandle | None = None
        self._done = threading.Event()

    # -- the response thread ----------------------------------------------------------

    def run(self) -> str:
        """Hand the stream to the loop and wait until it is written or cut; the outcome.

        The thread wakes every ``POLL`` seconds (at most every ``heartbeat``) to ask the
        loop for a heartbeat when nothing was written for ``heartbeat`` seconds, and for
        the drain's last frames once the worker shuts down. A loop that does not finish
        the drain within the write timeout leaves the client cut (``GONE``).
        """
        call = self.loop.call_soon_threadsafe
        call(self._install)
        drain_by: float | None = None
        while not self._done.wait(min(POLL, self.heartbeat)):
            now = time.monotonic()
            if self._draining():
                if drain_by is None:
                    drain_by = now + self.write_timeout + POLL
                    call(self._drain)
                elif now > drain_by:
                    log.warning("a stream's last frames were not written as the worker drained")
                    call(self._end, GONE)
                    return GONE
            elif now - self.last_write >= self.heartbeat:
                call(self._beat)
        return self.outcome

    # -- the loop -----------------------------------------------------------------------

    def _install(self) -> None:
        """Write what the relay already holds, then take each message as it comes."""
        waiting = self.relay.attach(self._feed)
        if waiting:
            self._feed(waiting)

    def _feed(self, items: list[Item]) -> asyncio.Future[None] | None:
        """Encode and write one message's items; a future the relay awaits before it
        reads on while the socket has not taken them all."""
        if self.outcome or self._closing:
            return None  # nothing more is written
        stream = self.stream
        parts: list[bytes] = []
        try:
            for item in items:
                parts.append(stream.encode_item(item))
                if stream.done:
                    break  # anything after the protocol's end is not written
        except Exception as exc:
            log.exception("the %s stream failed", stream.name)
            if not stream.done:
                stream.done = True
                parts.append(stream.on_failure(exc))
        data = b"".join(parts)
        if data:
            self._write(data)
        if stream.done:
            self._close()
        if self._backlog and not self.outcome:
            if self._room is None:
                self._room = self.loop.create_future()
            return self._room
        return None

    def _beat(self) -> None:
        if (
            not self.outcome
            and not self._closing
            and not self._backlog
            and time.monotonic() - self.last_write >= self.heartbeat
        ):
            self._write(self._heartbeat_frame)

    def _drain(self) -> None:
        if self.outcome or self._closing:
            return
        last = self.stream.on_drain()
        if last:
            self._write(last)
        self._close()

    def _close(self) -> None:
        """The last frames are written or in the backlog: end once they are sent."""
        self._closing = True
        if not self._backlog:
            self._end(ENDED)

    def _write(self, data: bytes) -> None:
        """Write ``data`` as one chunk; what the socket does not take now waits for it."""
        chunk = memoryview(b"%X\r\n%b\r\n" % (len(data), data))
        if self._backlog:
            self._backlog.append(chunk)
            return
        try:
            sent = os.write(self._fd, chunk)
        except BlockingIOError:
            sent = 0
        except OSError:
            self._end(GONE)
            return
        self.last_write = time.monotonic()
        if sent < len(chunk):
            self._backlog.append(chunk[sent:])
            self.loop.add_writer(self._fd, self._flush)
            self._deadline = self.loop.call_later(self.write_timeout, self._end, TIMED_OUT)

    def _flush(self) -> None:
        """The socket has room: write the backlog."""
        backlog = self._backlog
        while backlog:
            try:
                sent = os.write(self._fd, backlog[0])
            except BlockingIOError:
                return
            except OSError:
                self._end(GONE)
                return
            self.last_write = time.monotonic()
            if sent < len(backlog[0]):
                backlog[0] = backlog[0][sent:]
                return
            backlog.popleft()
        self._unwatch()
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)
        if self._closing:
            self._end(ENDED)

    def _unwatch(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
            self.loop.remove_writer(self._fd)

    def _end(self, outcome: str) -> None:
        if self.outcome:
            return
        self.outcome = outcome
        self._unwatch()
        self._backlog.clear()
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)
        os.close(self._fd)
        if outcome != ENDED:
            self.relay.cancel()  # read nothing more for a client that is gone
        self._done.set()


def failure(outcome: str) -> OSError | None:
    """The error that ends a body whose writer ended with ``outcome``, for gunicorn: a
    timeout (counted and closed by ``EdgeThreadWorker.handle_request``), a broken pipe
    (closed quietly); None for a stream that ended normally."""
    if outcome == TIMED_OUT:
        return TimeoutError(errno.ETIMEDOUT, "the client did not read the stream in time")
    if outcome == GONE:
        return BrokenPipeError(errno.EPIPE, "the client left")
    return None
