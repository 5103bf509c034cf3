"""One asyncio event loop per web worker process, on its own thread.

``[web] stream_reader = "asyncio"`` reads every engine event stream of a worker on this
loop (:mod:`web_facade.stream.aio_relay`) instead of one relay thread per stream. Like
the gRPC channels, the loop is started lazily, on first use in a process, never at
import: gunicorn forks its workers from a master that must hold neither threads nor
gRPC channels. A process that forked after the loop started starts its own.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["event_loop", "run"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid = 0


def event_loop() -> asyncio.AbstractEventLoop:
    """This process's loop, started on first use."""
    global _loop, _pid
    loop = _loop
    if loop is not None and _pid == os.getpid():
        return loop
    with _lock:
        if _loop is None or _pid != os.getpid():
            # A loop inherited through fork has no thread; leave it unclosed.
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="agentik-aio-loop", daemon=True).start()
            _pid = os.getpid()
        return _loop


def run(coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coroutine`` on the loop and wait for its result (not from the loop's thread)."""
    return asyncio.run_coroutine_threadsafe(coroutine, event_loop()).result(timeout)
