"""The engine's event stream, read on its own thread into a bounded queue.

A sync gRPC stream cannot be read with a timeout, and a client that left is noticed only
when a write fails. So a relay thread reads the call into a queue, and the response body
waits on the queue with a timeout: that is what lets it write heartbeats, notice a
draining worker, and batch the events that are already waiting. Cancelling the relay
cancels the gRPC call.

With several engines behind the facade, the engine serving a stream may die under it: the
call then ends with UNAVAILABLE before the stream's end. And an engine cuts a stream whose
reader kept one write waiting past ``[engine] write_timeout`` (DEADLINE_EXCEEDED,
``agentik-error: write_timeout``), as the relay does when its HTTP client reads slowly
enough. A relay given a :class:`Resume` reopens the stream as ``Subscribe`` after the last
seq it relayed — on whichever engine the channel picks — a few times within
:data:`RESUME_WINDOW`, so the reader sees neither a gap nor a duplicate. A run's stream is
a follow of its session until it is idle, so a cut ``Run`` resumes as
``Subscribe(until_idle=True)``; the run itself goes on in the engines (or one of them ends
it once its lease lapsed) and its last event comes through the subscription. When the
stream cannot be resumed, the error is relayed as before.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from typing import Any, Final

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.engine_credentials import forwarded_metadata

__all__ = [
    "ADMIT_WAIT",
    "END",
    "MAX_RESUMES",
    "OPEN_WAIT",
    "POLL",
    "QUEUE_BYTES",
    "QUEUE_SIZE",
    "RESUME_BACKOFF",
    "RESUME_WINDOW",
    "End",
    "EventRelay",
    "Item",
    "Relay",
    "Resume",
    "admitted",
    "open_relay",
]

log = logging.getLogger(__name__)

POLL: Final = 0.25
"""How often a waiting reader looks up (draining, cancelled), in seconds."""
QUEUE_SIZE: Final = 4096
"""Engine messages (an event, or a batch of them) read ahead of a slow HTTP client before
the relay stops reading gRPC."""
QUEUE_BYTES: Final = 4 * 1024 * 1024
"""Bytes of events read ahead of a slow HTTP client before the relay stops reading gRPC
(at least one event is always let through): a client that does not read holds no more
here, and gRPC's flow control holds the rest back in the engine, which reads it from its
store when the client reads again."""
OPEN_WAIT: Final = 10.0
"""How long a new stream waits for the engine to accept its call, in seconds: a refusal
(404, 409, ...) within this time is answered as an error response, not in the stream."""
ADMIT_WAIT: Final = 2.0
"""How long a follow waits for the engine to admit it (its response headers), in seconds,
before its stream opens anyway (an engine that sends them only with the first event)."""


RESUME_WINDOW: Final = 10.0
"""How long a cut stream keeps trying to reopen before it gives up, in seconds."""
RESUME_BACKOFF: Final = (0.05, 1.0)
"""The first and the longest wait between two attempts to reopen, in seconds."""
MAX_RESUMES: Final = 20
"""Most reopenings of one stream: a stream cut again and again ends with the error."""
INTERRUPT_TIMEOUT: Final = 5.0
"""Deadline of the Interrupt sent for a resumed run whose client left, in seconds."""


_RUN_ENDS: Final = frozenset({"run_finished", "run_error"})


def _resumable(error: grpc.RpcError) -> bool:
    """Whether a stream ``error`` cut goes on in a new ``Subscribe``: its engine went away
    (UNAVAILABLE), or cut it because the facade read too slowly (``agentik-error:
    write_timeout``, ``[engine] write_timeout``: an HTTP client that reads slowly, which
    ``[web] write_timeout`` keeps, must not lose its stream to it)."""
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    if code != grpc.StatusCode.DEADLINE_EXCEEDED:
        return False
    trailing = getattr(error, "trailing_metadata", None)
    try:
        pairs = (trailing() if callable(trailing) else None) or ()
        return ("agentik-error", "write_timeout") in tuple(pairs)
    except Exception:  # a call that never started has no trailers
        return False


class Resume:
    """How a relay reopens its engine stream: ``Subscribe`` after the last relayed seq.

    Made while the request is handled (it keeps the request's ``Authorization``, and its
    trace context, for the relay thread, which has no request context). For a run the
    session and the seq to resume after are known from the run's first event; a run cut
    before it has none is not resumed.
    """

    def __init__(
        self,
        engine: Any,
        session_id: str,
        after_seq: int | None,
        *,
        until_idle: bool,
        run_id: str = "",
        interrupt_on_cancel: bool = False,
    ) -> None:
        self._engine = engine
        self.session_id = session_id
        self.after_seq = after_seq
        self.until_idle = until_idle
        self.run_id = run_id
        self.interrupt_on_cancel = interrupt_on_cancel
        self.resumed = 0
        """How many times the stream was reopened."""
        self.run_ended = False
        """Whether the run's last event (RUN_FINISHED or RUN_ERROR) was relayed."""
        self._metadata = forwarded_metadata()

    @classmethod
    def of_run(cls, engine: Any, request: pb.RunRequest) -> Resume:
        """For the stream of ``engine.Run(request)``."""
        return cls(
            engine,
            request.session_id,
            None,
            until_idle=True,
            run_id=request.run_id,
            interrupt_on_cancel=request.cancel_on_disconnect,
        )

    @classmethod
    def of_subscription(cls, engine: Any, request: pb.SubscribeRequest) -> Resume:
        """For the stream of ``engine.Subscribe(request)``."""
        return cls(engine, request.session_id, request.after_seq, until_idle=request.until_idle)

    @property
    def possible(self) -> bool:
        """Whether the stream knows where to resume."""
        return bool(self.session_id) and self.after_seq is not None

    def take(self, event: pb.Event) -> bool:
        """Note a relayed event; False for one already relayed before a reopening."""
        if event.seq > 0:
            if self.resumed and self.after_seq is not None and event.seq <= self.after_seq:
                return False
            self.after_seq = event.seq
        if not self.session_id:
            self.session_id = event.session_id
        if not self.run_id:
            self.run_id = event.run_id
        if event.run_id == self.run_id and event.WhichOneof("kind") in _RUN_ENDS:
            self.run_ended = True
        return True

    @property
    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        """The forwarded metadata of the request that opened the stream."""
        return self._metadata

    def subscription(self) -> pb.SubscribeRequest:
        """The ``Subscribe`` request of the next reopening (counted as one)."""
        self.resumed += 1
        return pb.SubscribeRequest(
            session_id=self.session_id,
            after_seq=self.after_seq or 0,
            until_idle=self.until_idle,
            batch_events=True,
        )

    def reopen(self) -> Any:
        """A new ``Subscribe`` call after the last relayed seq."""
        return self._engine.Subscribe(self.subscription(), metadata=self._metadata)

    @property
    def interrupt_request(self) -> pb.InterruptRequest:
        """The ``Interrupt`` that stops the run (see :meth:`interrupt`)."""
        return pb.InterruptRequest(session_id=self.session_id, run_id=self.run_id)

    def interrupt(self) -> None:
        """Stop the run: its client left, and the call whose cancel would have stopped it
        (``cancel_on_disconnect``) was replaced by a subscription."""
        try:
            self._engine.Interrupt(
                self.interrupt_request, timeout=INTERRUPT_TIMEOUT, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            log.warning("could not interrupt run %s after its client left: %s", self.run_id, exc)

    def should_interrupt(self) -> bool:
        """Whether a reader that left must stop the run itself: the stream was resumed
        (so cancelling it no longer cancels the run), the client asked for that, and the
        run has not ended."""
        return bool(self.resumed) and self.interrupt_on_cancel and not self.run_ended


class End:
    """Queue marker: the gRPC stream ended normally."""


END: Final = End()

Item = pb.Event | grpc.RpcError | End
"""What the relay hands on: an event, the error that broke the stream, or its end."""


class Relay(ABC):
    """The reader's side of a relayed engine stream: a bounded queue of what the engine
    sent, filled by :class:`EventRelay` (a thread per stream) or
    :class:`~web_facade.stream.aio_relay.AioRelay` (the worker's asyncio loop).

    What one engine message brought (an event, or a batch of events ready together) goes
    through the queue as one list: one hand-over, and one wake-up of the reader, per
    message; the reader then takes its events one by one without locking.
    """

    def __init__(self, resume: Resume | None, queue_size: int, admission: bool = False) -> None:
        """``queue_size``: messages the queue holds, at most; 0: it is unbounded (its
        filler bounds it), a ``SimpleQueue``, which hands an item to a waiting reader in
        C (a ``Queue`` notifies it through a Python condition: 10 % of a web worker's GIL
        time at 64 AG-UI clients). ``admission``: the engine's response headers say it
        admitted the call (``Subscribe`` sends them at once; see :func:`admitted`)."""
        self._resume = resume
        self._queue: (
            queue.Queue[tuple[int, list[Item]]] | queue.SimpleQueue[tuple[int, list[Item]]]
        ) = queue.Queue(queue_size) if queue_size else queue.SimpleQueue()
        self._ready: deque[Item] = deque()
        self._room = threading.Condition()
        self._queued_bytes = 0
        self._cancelled = threading.Event()
        self._held: Item | None = None
        self._deadline: float | None = None
        self._delay = RESUME_BACKOFF[0]
        self._admission = admission
        self._took = threading.Event()
        """Set once the engine took the call (its response headers came, with
        ``admission``), or anything was queued (an event, the end, a refusal)."""

    def taken(self, wait: float) -> bool:
        """Wait (at most ``wait`` seconds) until the engine took the call or answered."""
        return self._took.wait(wait)

    def _headers_came(self, call: Any) -> None:
        """The call's response headers came (``initial_metadata`` returned): the engine took
        it, unless they are the end of a refused call (its error is queued next)."""
        if not call.done() or call.code() == grpc.StatusCode.OK:
            self._took.set()

    def _received(self, message: pb.Event) -> list[Item]:
        """The events of one engine message still to relay (a resumed stream's repeats
        left out)."""
        # A batch (``batch_events``) is the events that were ready together.
        received: list[pb.Event] = list(message.batch or (message,))
        if self._resume is not None:
            received = [event for event in received if self._resume.take(event)]
            if received:
                self._deadline = None  # progress: a later cut gets a new window
        return list(received)

    def _resume_wait(self, error: grpc.RpcError) -> float | None:
        """How long to wait before reopening the stream ``error`` cut; None: do not."""
        resume = self._resume
        if (
            resume is None
            or not _resumable(error)
            or not resume.possible
            or resume.resumed >= MAX_RESUMES
        ):
            return None
        now = time.monotonic()
        if self._deadline is None:
            self._deadline = now + RESUME_WINDOW
            self._delay = RESUME_BACKOFF[0]
        wait = min(self._delay, self._deadline - now)
        if wait <= 0:
            return None
        self._delay = min(self._delay * 2, RESUME_BACKOFF[1])
        return wait

    def _log_resume(self, error: grpc.RpcError) -> None:
        assert self._resume is not None
        log.info(
            "the engine stream of session %s broke (%s); resuming after seq %s",
            self._resume.session_id,
            error.code().name,
            self._resume.after_seq,
        )

    def _freed(self, size: int) -> None:
        """The reader took a queued message of ``size`` bytes."""
        if size:
            with self._room:
                self._queued_bytes -= size
                self._room.notify()

    def get(self, timeout: float) -> Item | None:
        """The next item, or None when nothing came within ``timeout`` seconds."""
        item, self._held = self._held, None
        if item is not None:
            return item
        if self._ready:
            return self._ready.popleft()
        try:
            return self._taken(self._queue.get(timeout=timeout))
        except queue.Empty:
            return None

    def get_nowait(self) -> Item | None:
        """The next item if one is waiting, else None."""
        item, self._held = self._held, None
        if item is not None:
            return item
        if self._ready:
            return self._ready.popleft()
        try:
            return self._taken(self._queue.get_nowait())
        except queue.Empty:
            return None

    def _taken(self, entry: tuple[int, list[Item]]) -> Item:
        """The first item of one queued message; the others wait in ``_ready``."""
        size, items = entry
        self._freed(size)
        self._ready.extend(items[1:])
        return items[0]

    def peek(self, timeout: float) -> Item | None:
        """Like :meth:`get`, but the item stays first in line."""
        if self._held is None:
            self._held = self.get(timeout)
        return self._held

    @abstractmethod
    def cancel(self, finished: bool = False) -> None:
        """Cancel the gRPC call; the relay ends soon after. Safe to repeat. ``finished``:
        the reader saw the stream's last event (the engine ends the call itself)."""

    @abstractmethod
    def join(self, timeout: float) -> bool:
        """Wait for the relay to end; True when it has."""


class EventRelay(Relay):
    """Reads a gRPC event stream on its own thread into a bounded queue."""

    def __init__(self, call: Any, resume: Resume | None = None, admission: bool = False) -> None:
        super().__init__(resume, QUEUE_SIZE, admission)
        self._call = call
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name="agentik-relay", daemon=True)
        self._thread.start()

    def _put(self, items: list[Item]) -> bool:
        size = sum(item.ByteSize() for item in items if isinstance(item, pb.Event))
        with self._room:
            while self._queued_bytes and self._queued_bytes + size > QUEUE_BYTES:
                if self._cancelled.is_set():
                    return False
                self._room.wait(POLL)
            self._queued_bytes += size
        while not self._cancelled.is_set():
            try:
                self._queue.put((size, items), timeout=POLL)
            except queue.Full:
                continue
            self._took.set()
            return True
        return False

    def _pump(self) -> None:
        call = self._call
        while True:
            try:
                if self._admission and not self._took.is_set():
                    call.initial_metadata()  # the engine's headers, or the call's end
                    self._headers_came(call)
                for message in call:
                    events = self._received(message)
                    if events and not self._put(events):
                        self._left()
                        return
            except grpc.RpcError as exc:
                if self._cancelled.is_set():
                    self._left()
                    return
                reopened = self._reopen(exc)
                if reopened is None:
                    self._put([exc])
                    return
                call = reopened
                continue
            except Exception:  # never leave the consumer waiting on a dead relay
                log.exception("reading the engine's event stream failed")
            self._put([END])
            return

    def _reopen(self, error: grpc.RpcError) -> Any:
        """A new call that goes on where ``error`` cut the stream, or None."""
        wait = self._resume_wait(error)
        if wait is None or self._cancelled.wait(wait):
            return None
        assert self._resume is not None
        with self._lock:
            if self._cancelled.is_set():
                return None
            self._log_resume(error)
            self._call = self._resume.reopen()
            return self._call

    def _left(self) -> None:
        """The reader cancelled: stop a resumed run if its client asked for that."""
        if self._resume is not None and self._resume.should_interrupt():
            self._resume.interrupt()

    def cancel(self, finished: bool = False) -> None:
        """Cancel the gRPC call; the relay thread ends soon after. Safe to repeat."""
        with self._lock:
            self._cancelled.set()
            self._call.cancel()

    def join(self, timeout: float) -> bool:
        """Wait for the relay thread to end; True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()


def open_relay(call: Any, wait: float = OPEN_WAIT, resume: Resume | None = None) -> EventRelay:
    """Relay ``call`` once the engine has taken it (see :func:`opened`)."""
    relay = EventRelay(call, resume)
    opened(relay, wait)
    return relay


def admitted(relay: Relay, wait: float = ADMIT_WAIT) -> None:
    """Wait for the engine to admit a relayed follow (``Subscribe``): its response headers,
    which it sends once the caller passed its checks (credentials, rate, open streams), not
    with the first event, which may be long in coming. A refusal before them is raised as
    the ``grpc.RpcError``, for each protocol's error table, before any stream is open; an
    engine that is silent for ``wait`` seconds opens the stream."""
    relay.taken(wait)
    first = relay.peek(0)
    if isinstance(first, grpc.RpcError):
        relay.cancel()
        raise first


def opened(relay: Relay, wait: float = OPEN_WAIT) -> None:
    """Wait for the engine to take the relayed call.

    The engine refuses a run (busy, unknown thread, overloaded) as the call's first
    answer. Waiting up to ``wait`` for that answer lets the route raise the refusal as an
    error response, before any stream is open; the ``grpc.RpcError`` is raised as is, for
    each protocol's error table. An event, the stream's end, or silence opens the stream.
    """
    first = relay.peek(wait)
    if isinstance(first, grpc.RpcError):
        relay.cancel()
        raise first
