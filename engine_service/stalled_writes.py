"""Server streams whose client stopped reading: each is cut once one write has waited
longer than ``[engine] write_timeout``.

A server stream's ``yield`` returns once gRPC has taken the message. gRPC takes a few MB
for a client before its flow control holds the next write back (measured: 2 to 5 MB); past
that a client that does not read keeps the write waiting, with the stream's follower and
the batch it read, for as long as it stays connected. A client that reads lets the write
go through once it has read most of what gRPC holds for it: only one write waiting past the
timeout counts, however slowly the client reads otherwise. (A stream with less than that
to send has no write waiting, and is not cut: the stream slots bound what gRPC holds.)

Timing every write would put a timer on every event. Instead each stream counts its writes
(:attr:`WriteWatch.writes`: odd while one waits; two increments per event, nothing
allocated: measured +34 ns an event) and one sweeper task for all the server's streams
looks at the counts every ``tick`` seconds (a quarter of the timeout, at most 5 s): a
stream seen in the same write for ``timeout`` seconds is cut, between ``timeout`` and
``timeout + tick`` after that write began.

Cutting a stream: its status is queued first (``DEADLINE_EXCEEDED``, ``agentik-error:
write_timeout``, the message naming the setting and how to resume), then the call's task
is cancelled, as gRPC does when a client cancels: the stream's generator closes and its
follower is given back; a run it started goes on (unless it asked to be stopped when its
stream ends). gRPC sends the status after what it already holds for the client, so a client
that reads again gets those events, then the status, and resumes after the last seq it got.
``grpc.aio`` cannot reset one HTTP/2 stream from the server: what gRPC holds stays until
the client reads it or goes away, and so does the stream's slot (``core.streams``), given
back only then. Given back at the cut, the slots would no longer bound that memory: 200
cut streams whose clients stayed connected took an engine from 91 to 331 MB with none open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeAlias

import grpc

from agentik.collector import release as release_error

__all__ = ["WRITE_TIMEOUT_CODE", "StalledWrites", "WriteWatch"]

log = logging.getLogger(__name__)

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

WRITE_TIMEOUT_CODE = "write_timeout"
"""The ``agentik-error`` trailer of a stream cut for not reading."""
MAX_TICK = 5.0
"""The longest wait between two looks at the streams, in seconds."""


class WriteWatch:
    """One stream's writes, watched while it is entered (``with``): the servicer adds 1 to
    :attr:`writes` before each ``yield`` of a message and 1 after it, so an odd count is a
    write gRPC has not taken yet. :meth:`release` gives the stream's slot back."""

    __slots__ = (
        "_give_back",
        "_seen",
        "_since",
        "_stalls",
        "context",
        "cut",
        "method",
        "task",
        "writes",
    )

    def __init__(
        self, stalls: StalledWrites, context: Context, method: str, give_back: Callable[[], None]
    ) -> None:
        self.writes = 0
        self.cut = False
        self.context = context
        self.method = method
        self.task: asyncio.Task[Any] | None = None
        self._stalls = stalls
        self._give_back = give_back
        self._seen = -1
        self._since = 0.0

    def __enter__(self) -> WriteWatch:
        self.task = asyncio.current_task()
        self._stalls.add(self)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stalls.discard(self)

    def release(self) -> None:
        """The stream ended: its slot is given back, unless it was cut (then once gRPC
        lets go of the call)."""
        if not self.cut:
            self._give_back()

    def stalled(self, now: float, timeout: float) -> bool:
        """Whether the write in progress has been seen waiting for ``timeout`` seconds."""
        writes = self.writes
        if not writes & 1:
            return False
        if writes != self._seen:  # a write seen for the first time
            self._seen, self._since = writes, now
            return False
        return now - self._since >= timeout


class StalledWrites:
    """The server's streams, watched for a write that waits past ``timeout`` seconds
    (0: none is cut, nothing is watched)."""

    def __init__(self, timeout: float, on_cut: Callable[[str], None] | None = None) -> None:
        """``on_cut(method)``: called as a stream is cut (the metrics count them)."""
        self.timeout = timeout
        self.tick = min(timeout / 4, MAX_TICK)
        self.on_cut = on_cut
        self.cut = 0
        """Streams cut so far."""
        self._watches: set[WriteWatch] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._cuts: dict[asyncio.Task[None], WriteWatch] = {}

    def __len__(self) -> int:
        return len(self._watches)

    def watch(self, context: Context, method: str, give_back: Callable[[], None]) -> WriteWatch:
        """The watch of the current call's stream, whose slot ``give_back`` returns."""
        return WriteWatch(self, context, method, give_back)

    def add(self, watch: WriteWatch) -> None:
        if not self.timeout or watch.task is None:
            return
        self._watches.add(watch)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def discard(self, watch: WriteWatch) -> None:
        self._watches.discard(watch)

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._watches:
                await asyncio.sleep(self.tick)
                now = loop.time()
                for watch in [w for w in self._watches if w.stalled(now, self.timeout)]:
                    self._watches.discard(watch)
                    watch.cut = True
                    task = loop.create_task(self._cut(watch))
                    self._cuts[task] = watch
                    task.add_done_callback(self._cut_done)
        finally:
            self._sweeper = None

    def _cut_done(self, task: asyncio.Task[None]) -> None:
        self._cuts.pop(task, None)

    async def _cut(self, watch: WriteWatch) -> None:
        self.cut += 1
        if self.on_cut is not None:
            self.on_cut(watch.method)
        log.info(
            "cut a %s stream: a write waited %g s for a client that does not read "
            "([engine] write_timeout)",
            watch.method,
            self.timeout,
        )
        status = asyncio.ensure_future(self._send_status(watch.context))
        await asyncio.sleep(0)  # the status is queued: the call ends with it, not another
        assert watch.task is not None
        watch.task.cancel()
        try:
            await status
        finally:
            watch._give_back()

    async def _send_status(self, context: Context) -> None:
        """The cut stream's status: sent after what gRPC already holds for the client, so
        this waits until the client reads that or goes away."""
        context.set_trailing_metadata((("agentik-error", WRITE_TIMEOUT_CODE),))
        message = (
            f"the stream was closed: an event waited more than {self.timeout:g} s for this "
            "client to read ([engine] write_timeout, AGENTIK_ENGINE_WRITE_TIMEOUT); "
            "resume with Subscribe after the last seq received"
        )
        try:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, message)
        except grpc.aio.AbortError as aborted:
            release_error(aborted)  # the call's state keeps it: let it go of this frame
        except Exception:  # the call ended first (its client left): nothing to tell
            log.debug("the status of a cut stream was not sent", exc_info=True)

    async def close(self) -> None:
        """Stop watching (the server stopped): the sweeper ends, and the cuts waiting for
        their clients give their slots back."""
        tasks = [*self._cuts, *([self._sweeper] if self._sweeper else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._watches.clear()
