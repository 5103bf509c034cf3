"""gunicorn's workers and their open connections, read from Linux ``/proc``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = [
    "NEEDS_PROCFS",
    "NEEDS_SIGNALS",
    "engine_backlog",
    "established",
    "kill_busiest_worker",
    "pause_workers",
    "worker_pids",
]

NEEDS_PROCFS = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/self/net/tcp").exists(),
    reason="finds gunicorn's workers and their connections in Linux /proc",
)
NEEDS_SIGNALS = pytest.mark.skipif(
    not hasattr(signal, "SIGKILL"), reason="sends POSIX signals (SIGKILL, SIGTERM)"
)


def worker_pids(master: int) -> list[int]:
    """The pids of the gunicorn master's children: its workers."""
    try:
        text = Path(f"/proc/{master}/task/{master}/children").read_text()
    except OSError:
        return []
    return [int(pid) for pid in text.split()]


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _tcp_sockets(pid: int) -> Iterator[tuple[int, int, str, int]]:
    """(local port, remote port, state, receive queue bytes) of each TCP socket ``pid`` holds."""
    inodes = _socket_inodes(pid)
    for table in ("tcp", "tcp6"):  # gRPC's sockets are IPv6 (v4-mapped)
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[9]) not in inodes:
                continue
            local = int(fields[1].rpartition(":")[2], 16)
            remote = int(fields[2].rpartition(":")[2], 16)
            yield local, remote, fields[3], int(fields[4].partition(":")[2], 16)


def established(pid: int, port: int) -> int:
    """How many established TCP connections on local ``port`` process ``pid`` holds."""
    return sum(1 for local, _, state, _ in _tcp_sockets(pid) if local == port and state == "01")


def engine_backlog(pid: int, engine_port: int) -> int:
    """Bytes the engine sent to process ``pid`` that it has not read yet."""
    return sum(queued for _, remote, _, queued in _tcp_sockets(pid) if remote == engine_port)


def kill_busiest_worker(master: int, port: int) -> tuple[int, int]:
    """SIGKILL the worker holding the most client connections: (its pid, their number)."""
    loads = {pid: established(pid, port) for pid in worker_pids(master)}
    assert loads, f"gunicorn master {master} has no workers"
    pid = max(loads, key=lambda p: loads[p])
    os.kill(pid, signal.SIGKILL)
    return pid, loads[pid]


async def pause_workers(master: int, engine_port: int, within: float) -> int:
    """Stop every gunicorn worker (SIGSTOP) until the engine's events pile up unread in their
    sockets, then let them go on (SIGCONT); the bytes that piled up.

    A worker that stalls like this (a starved container, a long GC pause, a debugger) finds
    hundreds of events waiting behind each stream when it wakes up.
    """
    workers = worker_pids(master)
    assert workers, f"gunicorn master {master} has no workers"
    for pid in workers:
        os.kill(pid, signal.SIGSTOP)
    try:
        samples: list[int] = []
        deadline = time.monotonic() + within
        # The engine sends until HTTP/2 flow control stops it: wait until the pile stops growing.
        while len(samples) < 4 or samples[-1] == 0 or len(set(samples[-4:])) > 1:
            assert time.monotonic() < deadline, f"the engine's events did not pile up: {samples}"
            samples.append(sum(engine_backlog(pid, engine_port) for pid in workers))
            await asyncio.sleep(0.05)
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
    return samples[-1]
