"""Child processes that stop when the process that started them dies.

A parent (``agentik serve``, the test stacks, the benchmarks) puts its pid in the child's
environment; the child, first thing, asks Linux for SIGTERM when its parent goes. Done in
the child rather than in a ``preexec_fn``: running Python between fork and exec in a parent
with gRPC threads can deadlock or abort the child.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Mapping

__all__ = ["PARENT_ENV", "env_for_child", "stop_with_parent"]

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
