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
"""

from __future__ import annotations

import gc

__all__ = ["settle"]


def settle(threshold: int) -> None:
    """Freeze what start-up made, and collect the youngest generation every ``threshold``
    new container objects; 0 leaves Python's collector as it is."""
    if threshold <= 0:
        return
    gc.collect()  # the start-up's own garbage is freed, not frozen
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(threshold, middle, oldest)
