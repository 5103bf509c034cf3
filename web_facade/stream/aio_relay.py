"""The engine's event stream, read on the worker's asyncio loop into a bounded queue.

With ``[web] stream_reader = "asyncio"`` no thread per stream reads the engine: each
stream's call is a task on the worker's one loop (:mod:`web_facade.aio_loop`) over a
``grpc.aio`` channel, and it hands what it reads to the response thread through the same
bounded queue as :class:`~web_facade.stream.relay.EventRelay`, with the same guarantees:
at most :data:`QUEUE_SIZE` messages and :data:`QUEUE_BYTES` bytes read ahead (the task
then waits for room, and gRPC's flow control holds the rest back in the engine), a cut
stream resumed with ``Subscribe`` after the last relayed seq, cancelling cancels the
call (and interrupts a resumed run whose client asked for that), and errors relayed as
``grpc.RpcError`` (``grpc.aio.AioRpcError`` is one) for each protocol's error table.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import grpc
import grpc.aio

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade import aio_loop
from web_facade.stream.relay import (
    END,
    INTERRUPT_TIMEOUT,
    QUEUE_BYTES,
    QUEUE_SIZE,
    Item,
    Relay,
    Resume,
)

__all__ = ["FINISH_GRACE", "AioRelay"]

log = logging.getLogger(__name__)

FINISH_GRACE = 5.0
"""Seconds a call whose reader saw its last event has to end by itself before it is
cancelled (``AioRelay.cancel``)."""

_background: set[asyncio.Task[None]] = set()
"""Interrupts sent after a reader left, kept until they are done."""


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class AioRelay(Relay):
    """Reads ``engine.<method>(request)`` (a ``grpc.aio`` stub's stream) on the worker's
    loop into a bounded queue."""

    def __init__(
        self,
        engine: Any,
        method: str,
        request: Any,
        resume: Resume | None = None,
        metadata: tuple[tuple[str, str], ...] | None = None,
        admission: bool = False,
    ) -> None:
        # The queue itself is unbounded: the task waits for room before it puts, and
        # the last item (the end, an error) never waits.
        super().__init__(resume, 0, admission)
        self._engine = engine
        self._method = method
        self._request = request
        self._metadata = metadata
        self._call: Any = None
        self._waiter: asyncio.Future[None] | None = None
        self._ended = threading.Event()
        self._stopping = False
        self._loop = aio_loop.event_loop()
        self._task: asyncio.Task[None] | None = None
        self._loop.call_soon_threadsafe(self._start)

    def _start(self) -> None:
        if self._cancelled.is_set():
            self._ended.set()
            return
        self._task = self._loop.create_task(self._pump())

    # -- on the loop ------------------------------------------------------------------

    async def _put(self, items: list[Item]) -> None:
        """Queue one message's items once there is room (at least one message always
        goes)."""
        size = sum(item.ByteSize() for item in items if isinstance(item, pb.Event))
        while True:
            with self._room:
                if (
                    not self._queued_bytes or self._queued_bytes + size <= QUEUE_BYTES
                ) and self._queue.qsize() < QUEUE_SIZE:
                    self._queued_bytes += size
                    break
                waiter = self._waiter = self._loop.create_future()
            await waiter
        self._queue.put_nowait((size, items))
        self._took.set()

    def _push(self, item: Item) -> None:
        """Queue the stream's last item."""
        self._queue.put_nowait((0, [item]))
        self._took.set()

    async def _pump(self) -> None:
        try:
            call: Any = None
            while True:
                try:
                    if call is None:
                        self._call = call = getattr(self._engine, self._method)(
                            self._request, metadata=self._metadata
                        )
                    if self._admission and not self._took.is_set():
                        await call.initial_metadata()  # the engine's headers, or the end
                        if not call.done() or await call.code() == grpc.StatusCode.OK:
                            self._took.set()
                    # ``read()`` rather than ``async for``: one async generator less per
                    # message.
                    while (message := await call.read()) is not grpc.aio.EOF:
                        events = self._received(message)
                        if events:
                            await self._put(events)
                except grpc.RpcError as exc:
                    if self._cancelled.is_set():
                        self._left()
                        return
                    reopened = await self._reopen(exc)
                    if reopened is None:
                        self._push(exc)
                        return
                    call = reopened
                    continue
                except asyncio.CancelledError:
                    raise
                except Exception:  # never leave the consumer waiting on a dead relay
                    log.exception("reading the engine's event stream failed")
                self._push(END)
                return
        except asyncio.CancelledError:
            if self._call is not None:
                self._call.cancel()
            self._left()
        finally:
            self._ended.set()

    async def _reopen(self, error: grpc.RpcError) -> Any:
        """A new call that goes on where ``error`` cut the stream, or None."""
        wait = self._resume_wait(error)
        if wait is None:
            return None
        await asyncio.sleep(wait)
        assert self._resume is not None
        self._log_resume(error)
        subscription = self._resume.subscription()
        self._call = self._engine.Subscribe(subscription, metadata=self._resume.metadata)
        return self._call

    def _left(self) -> None:
        """The reader cancelled: stop a resumed run if its client asked for that."""
        resume = self._resume
        if resume is not None and resume.should_interrupt():
            task = self._loop.create_task(self._interrupt(resume))
            _background.add(task)
            task.add_done_callback(_background.discard)

    async def _interrupt(self, resume: Resume) -> None:
        try:
            await self._engine.Interrupt(
                resume.interrupt_request, timeout=INTERRUPT_TIMEOUT, metadata=resume.metadata
            )
        except grpc.RpcError as exc:
            log.warning("could not interrupt run %s after its client left: %s", resume.run_id, exc)

    def _stop(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()

    # -- on the reader's thread -------------------------------------------------------

    def _freed(self, size: int) -> None:
        with self._room:
            self._queued_bytes -= size
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_wake, waiter)

    def cancel(self, finished: bool = False) -> None:
        """Cancel the gRPC call; the task ends soon after. Safe to repeat. ``finished``: the
        reader saw the stream's last event (its protocol's end), after which the engine ends
        the call itself: it is left to end, and cancelled only if it has not within
        :data:`FINISH_GRACE` seconds (cancelling each call as its stream ended was 2.7 % of
        a web worker's GIL time at 64 AG-UI clients)."""
        self._cancelled.set()
        if self._stopping or self._ended.is_set():
            return
        self._stopping = True
        self._loop.call_soon_threadsafe(self._stop_later if finished else self._stop)

    def _stop_later(self) -> None:
        self._loop.call_later(FINISH_GRACE, self._stop)

    def join(self, timeout: float) -> bool:
        """Wait for the task to end; True when it has."""
        return self._ended.wait(timeout)
