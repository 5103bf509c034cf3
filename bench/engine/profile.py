"""py-spy sampling of the engine during one phase of the bench, and its hotspots."""

from __future__ import annotations

import argparse
import collections
import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.engine.measure import WAIT
from bench.engine.stack import Stack

# -- profiling --------------------------------------------------------------------------


class PySpy:
    """``py-spy record`` attached to the engine for the duration of a block."""

    def __init__(self, pid: int, output: Path, rate: int, native: bool) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        self.output = output
        self.process = subprocess.Popen(
            [
                *(exe, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate)),
                *(("--native",) if native else ("--nonblocking",)),
                *("--output", str(output)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # let it attach
        if self.process.poll() is not None:
            assert self.process.stderr is not None
            raise RuntimeError(f"py-spy failed: {self.process.stderr.read().decode()}")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def profiled(options: argparse.Namespace, stack: Stack, phase: str) -> Iterator[None]:
    """Sample the engine with py-spy during this block if ``--py-spy`` asked for ``phase``."""
    if not options.py_spy or options.py_spy_phase != phase:
        yield
        return
    profiler = PySpy(stack.engine.pid, options.py_spy, options.py_spy_rate, options.py_spy_native)
    try:
        yield
    finally:
        profiler.stop()


def _frame_name(frame: str) -> str:
    """``func (path/to/file.py:123)`` → ``func (file.py)``: line numbers merged."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(path).parts
    short = "/".join(parts[-2:]) if parts else path
    return f"{name} ({short})"


def hotspots(collapsed: Path, top: int) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """Total samples, and the top (frame, samples) by self time and by inclusive time."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            inclusive[name] += count
    return total, own.most_common(top), inclusive.most_common(top)


def print_hotspots(collapsed: Path, top: int) -> None:
    total, own, inclusive = hotspots(collapsed, top)
    if not total:
        print(f"\npy-spy: no samples in {collapsed}")
        return
    print(f"\n### Engine hotspots (py-spy, {total} non-idle samples)\n")
    for title, rows in (("self time", own), ("inclusive time", inclusive)):
        print(f"| {title} | % |\n|---|---:|")
        for name, count in rows:
            print(f"| `{name}` | {100 * count / total:.1f} |")
        print()
