"""Child processes that stop when the process that started them dies.

A parent (``agentik serve``, ``agentik engine --workers N``, the test stacks, the
benchmarks) puts its pid in the child's environment; the child, first thing, asks Linux for
SIGTERM when its parent goes. Done in the child rather than in a ``preexec_fn``: running
Python between fork and exec in a parent with gRPC threads can deadlock or abort the child.

:func:`supervise` is the parent's side: start the children, forward SIGTERM/SIGINT, and
stop them all when one of them dies.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

__all__ = ["PARENT_ENV", "env_for_child", "stop_with_parent", "supervise"]

PARENT_ENV = "AGENTIK_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def env_for_child(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` plus this process's pid, so the child stops when this process dies."""
    return {**env, PARENT_ENV: str(os.getpid())}


def stop_with_parent() -> None:
    """If started by ``env_for_child``, get SIGTERM when the parent dies (Linux; elsewhere
    a no-op). A parent already gone means SIGTERM now."""
    expected = os.environ.pop(PARENT_ENV, "")
    if not expected.isdigit():
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(expected):
        os.kill(os.getpid(), signal.SIGTERM)


def supervise(
    commands: Sequence[Sequence[str]],
    env: Mapping[str, str],
    *,
    stop_timeout: float,
    together: bool = False,
    started: Callable[[], None] | None = None,
    stopping: Callable[[], None] | None = None,
) -> int:
    """Run ``commands`` as child processes until SIGTERM/SIGINT or until one of them exits,
    then stop them all; 0 when they stopped because we were told to and ended cleanly,
    else 1 (a child that died on its own, or one that failed to stop cleanly).

    Each child gets its own session (a Ctrl-C reaches it once, through us, as SIGTERM) and
    stops with this process (``env_for_child``). Stopping sends SIGTERM and waits up to
    ``stop_timeout`` seconds before SIGKILL: in reverse order, one after the other (the
    last started stops first), or with ``together`` all at once. ``started`` is called
    once every child has been started, ``stopping`` at the first signal. A second signal
    makes the children stop at once (SIGINT to each)."""
    children: list[subprocess.Popen[bytes]] = []
    signalled = threading.Event()
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        if signalled.is_set():
            # Told twice (a second Ctrl-C): the children stop now, not after their grace.
            # The engine takes a second signal as "interrupt the runs", gunicorn SIGINT as
            # its quick shutdown.
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGINT)
            return
        signalled.set()
        done.set()
        if stopping is not None:
            stopping()

    def watch(child: subprocess.Popen[bytes]) -> None:
        child.wait()
        done.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    codes: list[int] = []
    try:
        for argv in commands:
            child = subprocess.Popen(argv, env=env_for_child(env), start_new_session=True)
            children.append(child)
            threading.Thread(target=watch, args=(child,), daemon=True).start()
        if started is not None:
            started()
        done.wait()
    finally:
        codes = _stop_all(children, stop_timeout, together)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    clean = all(code in (0, -signal.SIGTERM) for code in codes)
    return 0 if signalled.is_set() and clean else 1


def _stop_all(children: list[subprocess.Popen[bytes]], timeout: float, together: bool) -> list[int]:
    """SIGTERM, then SIGKILL for a child still running after ``timeout`` seconds."""
    order = list(reversed(children))
    if together:
        for child in order:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    codes = []
    for child in order:
        if not together:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
        try:
            codes.append(child.wait(max(deadline - time.monotonic(), 0.0)))
        except subprocess.TimeoutExpired:
            child.kill()
            codes.append(child.wait())
    return codes
