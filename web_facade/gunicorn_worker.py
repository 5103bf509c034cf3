"""gunicorn's ``gthread`` worker, with an edge that slow or idle clients cannot starve.

**Request heads are read in the event loop.** gthread hands a new connection to a pool
thread, which then blocks reading the request head for as long as the client takes: twenty
clients sending one header line a second held twenty threads, and ``/health`` hung. Here the
worker's event loop (gunicorn's own selector loop) reads each head without blocking, a piece
at a time, and submits the connection to a thread only once the head is whole
(:mod:`web_facade.request_heads`); a head that is not whole within ``web_header_timeout``
seconds is answered 408 and closed. A kept-alive connection goes through the same reading
for its next request.

**The body has a deadline.** A small body (a plain ``Content-Length`` of at most 64 KiB) is
read by the loop too, before a thread is taken; it must arrive within ``web_body_timeout``
seconds of the end of its head, or the loop answers 408. A larger or chunked body is read by
its thread against the same deadline: every read of the socket waits at most until then
(:class:`DeadlineUnreader`), and the app answers 408 (``web_facade.errors``).

**Health and metrics have their own lane.** ``/health`` and ``/metrics`` are served by a
small pool of their own (:data:`RESERVED_THREADS`), so open SSE streams, which hold a thread
each for as long as they last, never make them wait.

**No thread free: 503, not a hang.** A whole request that finds every thread busy waits in the
event loop (holding no thread) for at most ``web_queue_timeout`` seconds, then is answered
``503`` with ``Retry-After`` in the facade's JSON error shape.

**Closing does not block the loop.** A connection that ends is half-closed and drained in
the loop; gthread's own ``close_graceful`` waits up to 2 s for the client's FIN in the loop's
thread, so clients that never close stalled the whole worker.

TLS and HTTP/2 connections (not configured by agentik) keep gunicorn's own handling.

**An answer given before its request's body was read keeps the connection usable, and no
thread waits for that body.** A route may answer without reading the body (404, 405, the
host check, 413). The answer goes out at once and the thread goes back to its pool; then the
event loop reads and drops the rest of the body (:mod:`web_facade.body_rest`), up to
``[web] discard_body_bytes``, before it reads the next request's head, so that head starts
where it should. The thread used to drop it: clients that held their bodies back after an
answer on ``/health`` held the reserved lane until the body's deadline. A body announced
longer than the bound is not read: its answer says ``Connection: close``, as does a chunked
body the app read in part (where its rest starts is not known here; its connection is
drained for as long as a body may take, then closed). One that does not arrive within the
body's timeout of the answer, turns out longer or is broken has the connection closed. A body
the app refuses as too large is not read in the loop either, so its 413 is not held back
until the body arrived.
gunicorn drops hop-by-hop headers an application sets, so an answer of the app's with
``Connection: close`` (a body timed out) is made to close here too.

gunicorn's own parse refusals are answered in the facade's JSON shape
(:mod:`web_facade.gunicorn_refusals`), by overriding ``handle_error``.

**Connections are spread over the workers.** Every worker waits on the same listening
socket, and when many clients connect at once the one that is awake accepts nearly all of
them (kept alive for all their requests) while the others idle. Each worker writes its
open-connection count (``nr_conns``) to its slot of a small shared array
(:mod:`web_facade.conn_balance`) once per loop iteration and after each accept; after an
accept that leaves it holding more than the least loaded other running worker plus
``conn_balance.SLACK``, it stops accepting for ``conn_balance.PAUSE`` (1 ms) so that the
others take the next connections, then accepts again whatever the others do (a stuck or
dead peer slows its accepts, never stops them). With one worker, no array or no other
running worker, it accepts as gthread does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from concurrent import futures
from functools import partial
from typing import Any, TypeAlias

# gunicorn ships no type information.
from gunicorn import glogging, util  # type: ignore[import-untyped]
from gunicorn.http.unreader import SocketUnreader  # type: ignore[import-untyped]
from gunicorn.workers.gthread import (  # type: ignore[import-untyped]
    STOP_KEEPALIVE_LINGER,
    TConn,
    ThreadWorker,
)

from agentik.config import load_settings
from web_facade import conn_balance
from web_facade.body_rest import BodyRest, RestNotDropped, must_close, read_in_part, rest_of
from web_facade.gunicorn_refusals import error_bytes, parse_error
from web_facade.request_heads import (
    DROPPED_AFTER_ANSWER,
    BodyTimeout,
    HeadLimits,
    body_to_read,
    head_state,
    request_path,
    unread_length,
)

if not hasattr(ThreadWorker, "wait_for_and_dispatch_events"):  # pragma: no cover
    raise ImportError("agentik's web worker needs gunicorn 27 (pip install 'gunicorn>=27,<28')")

__all__ = [
    "RESERVED_PATHS",
    "RESERVED_THREADS",
    "DeadlineUnreader",
    "EdgeThreadWorker",
    "QuietAccessLogger",
]

_Wsgi: TypeAlias = Callable[[dict[str, Any], Callable[..., Any]], Any]


class QuietAccessLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger, without the access line's work while its logger is off. Given a
    ``logconfig_dict``, gunicorn gathers every request's atoms (times, headers, a formatted
    date) and hands them to ``gunicorn.access``, which agentik's config turns off (the
    access log is the app's: ``web_facade.observe``): 1.7 % of a web worker's GIL time at
    64 AG-UI clients."""

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)


RESERVED_PATHS = frozenset({"/health", "/metrics"})
"""Paths served by the reserved lane, never behind the request pool."""
RESERVED_THREADS = 2
"""Threads of the reserved lane, per worker."""
RESERVED_BACKLOG = 64
"""Requests the reserved lane may hold beyond its threads before it answers 503."""
RETRY_AFTER = 1
"""Seconds a client refused for want of a thread is told to wait."""
HEAD_CHUNK = 65536
LINGER_SECONDS = 2.0
"""How long a connection being closed is drained for (gunicorn's ``close_graceful``)."""
LINGER_BYTES = 65536


class DeadlineUnreader(SocketUnreader):  # type: ignore[misc]
    """gunicorn's socket reader, with one deadline for the rest of a request: every read
    waits at most until it, then raises :class:`BodyTimeout`."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.deadline = float("inf")
        self.timeout = 0.0

    def chunk(self, size_hint: int | None = None) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise BodyTimeout(self._message())
        previous = self.sock.gettimeout()
        self.sock.settimeout(remaining if previous is None else min(previous, remaining))
        try:
            data: bytes = super().chunk(size_hint)
        except TimeoutError:
            if self.deadline - time.monotonic() > 0:
                raise  # a shorter timeout of gunicorn's own (draining a body)
            raise BodyTimeout(self._message()) from None
        finally:
            self.sock.settimeout(previous)
        return data

    def _message(self) -> str:
        return f"the request body did not arrive within {self.timeout:g} seconds"


class _Head:
    """A request read in the event loop: its bytes so far, how many it needs in all (0
    until its head is whole) and its deadline; before it, what is left of the previous
    request's body to drop (``rest``), if any."""

    __slots__ = ("data", "deadline", "need", "rest")

    def __init__(self, deadline: float, rest: BodyRest | None = None) -> None:
        self.data = bytearray()
        self.deadline = deadline
        self.need = 0
        self.rest = rest


class _Closing:
    """A connection being closed in the event loop: its deadline, the bytes drained, and
    the most it drains."""

    __slots__ = ("deadline", "drained", "most")

    def __init__(self, deadline: float, most: int) -> None:
        self.deadline = deadline
        self.drained = 0
        self.most = most


class EdgeThreadWorker(ThreadWorker):  # type: ignore[misc]
    """``gthread`` with heads read in the event loop, a reserved lane for health and
    metrics, a 503 when no thread is free, and its parse refusals as JSON (see the module
    doc). Built on gthread's own methods: ``enqueue_req`` (where a connection with a
    request to read goes), ``wait_for_and_dispatch_events`` (the loop's wait) and
    ``finish_request`` (a thread's result)."""

    wsgi: _Wsgi
    """The application (gunicorn's ``load_wsgi`` sets it)."""
    balance: conn_balance.Slots | None = None
    """The workers' shared connection counts (set before the worker runs), if any."""
    balance_slot = -1
    """This worker's slot in :attr:`balance`."""
    accept_paused_until = 0.0
    """Monotonic time until which this worker does not accept (see the module doc)."""

    def init_process(self) -> None:
        settings = load_settings(None, os.environ, mcp=False)
        self.header_timeout = settings.web.header_timeout
        self.body_timeout = settings.web.body_timeout
        self.queue_timeout = settings.web.queue_timeout
        self.write_timeout = settings.web.write_timeout
        self.discard_bytes = settings.discard_body_bytes
        self.max_body_bytes = settings.web.max_body_bytes
        self.head_limits = HeadLimits(self.cfg)
        # TLS handshakes and HTTP/2 prefaces are gthread's to read (agentik sets neither).
        self.edge = not self.cfg.is_ssl and "h2" not in (self.cfg.http_protocols or ())
        self.heads: dict[Any, _Head] = {}
        """Connections whose head is being read, oldest deadline first."""
        self.bodies: dict[Any, _Head] = {}
        """Connections whose small body is being read, oldest deadline first."""
        self.dropping: dict[Any, _Head] = {}
        """Connections whose answer is sent, dropping the rest of its request's body before
        the next head, oldest deadline first."""
        self.rests: dict[Any, BodyRest] = {}
        """What a thread left of a body it answered without reading, for the loop to drop."""
        self.unread: set[Any] = set()
        """Connections a thread closes with a body read in part: drained longer."""
        self.lingering: dict[Any, _Closing] = {}
        """Connections closing: written, half-closed, drained until the client closes."""
        self.lingering_long: dict[Any, _Closing] = {}
        """The same, for answers to bodies read in part: drained for as long as a body."""
        self.waiting: dict[Any, _Head] = {}
        """Connections with a whole head waiting for a thread, oldest deadline first."""
        self.busy = 0
        self.lane_busy = 0
        self.lane = futures.ThreadPoolExecutor(RESERVED_THREADS, "agentik-reserved")
        # Imported in the worker, not the master: metrics files are per worker process.
        from web_facade.observe import count_refusal

        self.count_refusal = count_refusal
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        if self.edge:
            self.wsgi = _closing_when_unread(self.wsgi, self.discard_bytes)

    def run(self) -> None:
        try:
            super().run()
        finally:
            self.lane.shutdown(wait=False)
            self._publish(stopped=True)

    # --- spreading connections over the workers -----------------------------------------

    def _publish(self, *, stopped: bool = False) -> None:
        """Say this worker's open connections in its slot (-1 once it stops accepting)."""
        if self.balance is not None and self.balance_slot >= 0:
            running = self.alive and not stopped
            self.balance[self.balance_slot] = max(self.nr_conns, 0) if running else -1

    def accept(self, listener: Any) -> None:
        """gthread's, then a short pause when this worker holds more than its share."""
        super().accept(listener)
        if self.balance is None or self.balance_slot < 0:
            return
        self._publish()
        least = self.balance.least_other(self.balance_slot)
        if least is not None and self.nr_conns > least + conn_balance.SLACK:
            self.accept_paused_until = time.monotonic() + conn_balance.PAUSE
            self.set_accept_enabled(False)

    def set_accept_enabled(self, enabled: bool) -> None:
        """gthread's, but accepting resumes only once the pause is over."""
        if enabled and time.monotonic() < self.accept_paused_until:
            return
        super().set_accept_enabled(enabled)

    def handle_quit(self, sig: int, frame: Any) -> None:
        self.lane.shutdown(wait=False)
        super().handle_quit(sig, frame)

    # --- reading heads in the event loop ------------------------------------------------

    def enqueue_req(self, conn: TConn) -> None:
        """Read the connection's next request head in the loop (gthread: submit it)."""
        if not self.edge:
            super().enqueue_req(conn)
            return
        self._read_next(conn, None)

    def _read_next(self, conn: TConn, rest: BodyRest | None) -> None:
        """Read the connection's next request head, after dropping ``rest`` (what is left of
        the body of the request just answered) within the body's deadline."""
        if rest is None:
            self.heads[conn] = _Head(time.monotonic() + self.header_timeout)
        else:
            self.dropping[conn] = _Head(time.monotonic() + self.body_timeout, rest)
        # Kept alive: what it read ahead of the next request (or of the body's rest).
        buffered = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._read_head, conn))
        self._read_head(conn, buffered=buffered)

    def _read_head(self, conn: TConn, _sock: Any = None, buffered: bytes = b"") -> None:
        head = self.heads.get(conn) or self.bodies.get(conn) or self.dropping.get(conn)
        if head is None:
            return
        try:
            data = conn.sock.recv(HEAD_CHUNK)
        except (BlockingIOError, InterruptedError):
            data = None
        except OSError:
            data = b""
        if data == b"":
            self._stop_reading(conn)
            self._close(conn)
            return
        data = buffered + data if data else buffered
        if head.rest is not None:
            self._drop(conn, head.rest, data)
            return
        if data:
            head.data += data
        if not head.need:
            state = head_state(head.data, self.head_limits)
            if state == "partial":
                return
            if isinstance(state, tuple):
                self._stop_reading(conn)
                self._refuse(conn, "too_large", *state)
                return
            self._head_whole(conn, head)
        if len(head.data) >= head.need:
            self._stop_reading(conn)
            self._route(conn, head)

    def _head_whole(self, conn: TConn, head: _Head) -> None:
        """A small body is read here too, against its own deadline: a client that sends it
        slowly then holds no thread either."""
        end = head.data.find(b"\r\n\r\n")
        if end < 0:  # broken (a bare LF): gunicorn refuses it at once
            head.need = len(head.data)
            return
        head.need = end + 4 + body_to_read(head.data, self.max_body_bytes)
        if len(head.data) < head.need:
            del self.heads[conn]
            head.deadline = time.monotonic() + self.body_timeout
            self.bodies[conn] = head

    def _stop_reading(self, conn: TConn) -> None:
        for reading in (self.heads, self.bodies, self.dropping):
            if reading.pop(conn, None) is not None:
                break
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)

    # --- dropping what an answer left of its body ------------------------------------------

    def _drop(self, conn: TConn, rest: BodyRest, data: bytes) -> None:
        """Drop the rest's bytes in ``data``; once the body has ended, read the next request
        (what followed the body), or keep the connection alive as gthread does. A rest
        that cannot be dropped (broken, too long) closes the connection."""
        try:
            after = rest.feed(data)
        except RestNotDropped:
            self._stop_reading(conn)
            self._linger(conn)
            return
        if after is None:
            return
        self._stop_reading(conn)
        if after:
            conn.parser.unreader.unread(after)
            self._read_next(conn, None)
        else:
            self._keep_alive(conn)

    def _keep_alive(self, conn: TConn) -> None:
        """Wait in the loop for the next request, as gthread does after an answer."""
        conn.set_timeout()
        if not self.alive:
            conn.timeout = min(conn.timeout, time.monotonic() + STOP_KEEPALIVE_LINGER)
        self.keepalived_conns.append(conn)
        self.poller.register(
            conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn)
        )

    # --- handing whole requests to threads ------------------------------------------------

    def _route(self, conn: TConn, head: _Head) -> None:
        if request_path(head.data) in RESERVED_PATHS:
            if self.lane_busy >= RESERVED_THREADS + RESERVED_BACKLOG:
                self._refuse_busy(conn)
            else:
                self._submit(conn, head, lane=True)
        elif self.busy < self.cfg.threads and not self.waiting:
            self._submit(conn, head, lane=False)
        elif self.queue_timeout > 0:
            head.deadline = time.monotonic() + self.queue_timeout
            self.waiting[conn] = head
        else:
            self._refuse_busy(conn)

    def _submit(self, conn: TConn, head: _Head, *, lane: bool) -> None:
        try:
            conn.init()  # plain HTTP/1: makes the parser, reads nothing
        except OSError:
            self._close(conn)
            return
        unreader = conn.parser.unreader
        if not isinstance(unreader, DeadlineUnreader):
            unreader = conn.parser.unreader = DeadlineUnreader(conn.sock)
        unreader.unread(bytes(head.data))
        unreader.timeout = self.body_timeout
        unreader.deadline = time.monotonic() + self.body_timeout
        conn.data_ready = True  # gthread's handle() must not wait for data again
        if lane:
            self.lane_busy += 1
        else:
            self.busy += 1
        done = self.lane.submit(self.handle, conn) if lane else self.tpool.submit(self.handle, conn)
        done.add_done_callback(lambda fut: self.method_queue.defer(self._finished, conn, fut, lane))

    def _finished(self, conn: TConn, fut: futures.Future[Any], lane: bool) -> None:
        if lane:
            self.lane_busy -= 1
        else:
            self.busy -= 1
        self.finish_request(conn, fut)
        while self.waiting and self.busy < self.cfg.threads:
            waiting = next(iter(self.waiting))
            self._submit(waiting, self.waiting.pop(waiting), lane=False)

    def handle_request(self, req: Any, conn: TConn) -> bool:
        """gthread's, with a send timeout: a client that stops reading while its answer (an
        SSE stream, a long page) waits to be sent is cut after ``web_write_timeout``, and the
        thread goes back to the pool instead of blocking in ``send`` for as long as the
        client stays connected. The body's own deadline (``DeadlineUnreader``) is shorter
        where it applies."""
        conn.sock.settimeout(self.write_timeout)
        try:
            keep: bool = super().handle_request(req, conn)
        except TimeoutError:
            # The answer is cut mid-way: nothing more can be written; gthread closes the
            # connection (and gunicorn has closed the answer's iterator, so its stream).
            self.count_refusal("write_timeout", 0, _remote(conn))
            raise StopIteration() from None
        return keep if not self.edge else self._after_answer(conn, req, keep)

    def _after_answer(self, conn: TConn, req: Any, keep: bool) -> bool:
        """Whether the connection is kept: what the app left unread of the body is handed
        to the loop to drop (:attr:`rests`), so that no thread waits for a body its answer
        did not need. A body that cannot be dropped closes."""
        if not keep:
            if read_in_part(req.body):
                self.unread.add(conn)
            return False
        try:
            rest = rest_of(req.body, self.discard_bytes)
        except RestNotDropped:
            return False
        if rest is not None:
            conn.parser.mesg = None  # gunicorn must not read this body (``finish_body``)
            self.rests[conn] = rest
        return True

    # --- deadlines and refusals ---------------------------------------------------------

    def wait_for_and_dispatch_events(self, timeout: float) -> None:
        """gthread's wait, cut short by the next head or queue deadline or the end of an
        accept pause, then expiries."""
        self._publish()
        queues = (
            self.heads,
            self.bodies,
            self.dropping,
            self.waiting,
            self.lingering,
            self.lingering_long,
        )
        deadlines = [queue[next(iter(queue))].deadline for queue in queues if queue]
        if self.accept_paused_until > time.monotonic():
            deadlines.append(self.accept_paused_until)
        if deadlines:
            timeout = max(0.0, min(timeout, min(deadlines) - time.monotonic()))
        super().wait_for_and_dispatch_events(timeout)
        self._expire()

    def _expire(self) -> None:
        now = time.monotonic()
        for reading, what, timeout in (
            (self.heads, "head", self.header_timeout),
            (self.bodies, "body", self.body_timeout),
        ):
            while reading:
                conn, head = next(iter(reading.items()))
                if head.deadline > now:
                    break
                self._stop_reading(conn)
                message = f"the request {what} did not arrive within {timeout:g} seconds"
                self._refuse(conn, f"{what}_timeout", 408, "request_timeout", message)
        while self.dropping:  # answered already: closed without a word
            conn, head = next(iter(self.dropping.items()))
            if head.deadline > now:
                break
            self._stop_reading(conn)
            self._linger(conn)
        while self.waiting:
            conn, head = next(iter(self.waiting.items()))
            if head.deadline > now:
                break
            del self.waiting[conn]
            self._refuse_busy(conn)
        for lingering in (self.lingering, self.lingering_long):
            while lingering:
                conn, closing = next(iter(lingering.items()))
                if closing.deadline > now:
                    break
                self._stop_lingering(conn)

    def _refuse_busy(self, conn: TConn) -> None:
        message = "every thread of this server is busy; try again shortly"
        self._refuse(conn, "busy", 503, "overloaded", message, RETRY_AFTER)

    def _refuse(
        self,
        conn: TConn,
        reason: str,
        status: int,
        code: str,
        message: str,
        retry_after: int = 0,
    ) -> None:
        """Answer from the loop (a few hundred bytes: the socket buffer takes them whole,
        so this never blocks), count it and close."""
        self.count_refusal(reason, status, _remote(conn))
        try:
            conn.sock.setblocking(False)
            conn.sock.send(error_bytes(status, code, message, retry_after))
        except OSError:
            self._close(conn)
            return
        self._linger(conn)

    # --- closing without blocking the loop -------------------------------------------------

    def finish_request(self, conn: TConn, fut: futures.Future[Any]) -> None:
        """gthread's, but a connection that ends is closed from the loop without blocking:
        gthread's ``close_graceful`` waits up to 2 s for the client's FIN in the loop's own
        thread, so clients that never close stalled every connection of the worker."""
        rest = self.rests.pop(conn, None)
        unread = conn in self.unread
        self.unread.discard(conn)
        ends = self.edge and not fut.cancelled() and fut.exception() is None
        if ends and fut.result() and rest is not None:
            self._read_next(conn, rest)
        elif not ends or fut.result():
            super().finish_request(conn, fut)
        else:
            self._linger(conn, long=unread)

    def _linger(self, conn: TConn, *, long: bool = False) -> None:
        """Half-close, then read and drop what the client still sends until it closes (or
        for :data:`LINGER_SECONDS`, or :data:`LINGER_BYTES`), so the kernel does not reset
        the connection over unread bytes and cut the answer short (RFC 9112, section 9.6).
        ``long``: after a body read in part, which a client may be sending whole before it
        reads (a 413 of a chunked body), for the body's deadline and up to
        ``discard_body_bytes``."""
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        if long:
            closing = _Closing(time.monotonic() + self.body_timeout, self.discard_bytes)
            self.lingering_long[conn] = closing
        else:
            self.lingering[conn] = _Closing(time.monotonic() + LINGER_SECONDS, LINGER_BYTES)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn))

    def _drain(self, conn: TConn, _sock: Any = None) -> None:
        closing = self.lingering.get(conn) or self.lingering_long.get(conn)
        if closing is None:
            return
        try:
            data = conn.sock.recv(HEAD_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        closing.drained += len(data)
        if not data or closing.drained >= closing.most:
            self._stop_lingering(conn)

    def _stop_lingering(self, conn: TConn) -> None:
        if self.lingering.pop(conn, None) is None:
            del self.lingering_long[conn]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        self._close(conn)

    def _close(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    # --- gunicorn's parse refusals as JSON ------------------------------------------------

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        refusal = parse_error(exc, self.cfg)
        if refusal is None:
            super().handle_error(req, client, addr, exc)
            return
        ip = addr[0] if addr else ""
        self.log.warning("Invalid request from ip=%s: %s", ip, exc)
        try:
            util.write_nonblock(client, error_bytes(*refusal))
        except OSError:
            self.log.debug("Failed to send error message.")


def _closing_when_unread(app: _Wsgi, bound: int) -> _Wsgi:
    """``app``, told that what it leaves unread of a body is dropped after its answer
    (:data:`DROPPED_AFTER_ANSWER`), whose answers close the connection when they say
    ``Connection: close``, when that rest is announced longer than ``bound`` (it is not
    read), or when it cannot be dropped (a chunked body read in part: ``body_rest``).
    Nothing here waits for the body: the answer goes out at once."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        environ[DROPPED_AFTER_ANSWER] = True

        def starting(status: str, headers: list[tuple[str, str]], *exc_info: Any) -> Any:
            response = getattr(start_response, "__self__", None)  # gunicorn's Response
            if response is not None and (
                _says_close(headers)
                or _rest_too_long(environ, bound)
                or must_close(getattr(response.req, "body", None))
            ):
                response.force_close()
            return start_response(status, headers, *exc_info)

        return app(environ, starting)

    return wrapped


def _says_close(headers: list[tuple[str, str]]) -> bool:
    return any(name.lower() == "connection" and "close" in value.lower() for name, value in headers)


def _rest_too_long(environ: dict[str, Any], bound: int) -> bool:
    """Whether the request's body is announced longer than ``bound`` and the app left some
    of it unread (known without a read: a client that holds its body back is not waited
    for)."""
    stream = environ.get("wsgi.input")
    length = environ.get("CONTENT_LENGTH")
    if stream is None or not length or not length.isdigit() or int(length) <= bound:
        return False
    left = unread_length(stream)
    if left is not None:
        return left > 0
    try:  # a body the app read and put back in memory (``/mcp``): one byte tells
        return bool(stream.read(1))
    except Exception:
        return True


def _remote(conn: TConn) -> str:
    return conn.client[0] if isinstance(conn.client, tuple) else ""
