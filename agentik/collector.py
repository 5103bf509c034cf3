"""The cyclic garbage collector, set for a long-lived server process.

After start-up an engine or a web worker holds some 90,000 objects that live as long as it
does (modules, classes, functions, settings), and CPython's collector scans them again in
each full collection: 30-45 ms with the process's loop held, several times a minute under
load. It also collects its youngest generation every 700 new container objects, which a
streaming server makes in a few milliseconds. Measured at 256 streaming AG-UI runs on two
cores (docs/performance.md): the collector took 14 % of the engine's CPU and 18 % of each
web worker's.

:func:`settle` is called once start-up is done: what start-up made is collected once and
then frozen (moved where the collector no longer looks), and the youngest generation is
collected every ``threshold`` new objects. Cycles made later are still found and freed,
only in larger, rarer passes.

Rarer passes make one kind of garbage costly: an exception whose traceback ends in a cycle
(gRPC keeps the error an abort raised; its interceptors return an error and raise it again
from a frame that holds it). Its frames hold their locals, a refused request among them, until
the collector runs. :func:`release` lets such an exception go of its frames once it has been
answered: after the hostile gRPC fuzz the engine had grown by 133 MiB, and by 20 with it.
"""

from __future__ import annotations

import gc
import traceback

__all__ = ["release", "settle"]


def settle(threshold: int) -> None:
    """Freeze what start-up made, and collect the youngest generation every ``threshold``
    new container objects; 0 leaves Python's collector as it is."""
    if threshold <= 0:
        return
    gc.collect()  # the start-up's own garbage is freed, not frozen
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(threshold, middle, oldest)


def release(error: BaseException) -> None:
    """``error``, and the errors it was raised while handling, let go of their tracebacks:
    the frames that have ended drop their locals. For an error that has been answered (and
    logged): nothing reads its traceback after this."""
    pending = [error]
    for _ in range(32):  # chains are short; a cycle of contexts must not loop for ever
        if not pending:
            return
        seen = pending.pop()
        if seen.__traceback__ is not None:
            traceback.clear_frames(seen.__traceback__)  # running frames are left as they are
        seen.__traceback__ = None
        pending.extend(e for e in (seen.__context__, seen.__cause__) if e is not None)
        seen.__context__ = seen.__cause__ = None
