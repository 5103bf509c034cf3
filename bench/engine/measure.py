"""What the engine bench measures with: CPU and memory from /proc, quantiles, samples and phases."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0
"""Upper bound for any single wait (start-up, one stream), in seconds."""

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# -- /proc ------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process (all its threads) has used so far, in seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_busy_seconds() -> float:
    """CPU seconds all processes on the machine have used (``/proc/stat``), summed over CPUs."""
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    # guest time is already counted in user/nice.
    return (sum(ticks[:8]) - idle) / CLOCK_TICKS


def status_kib(pid: int, key: str) -> int:
    """A ``/proc/<pid>/status`` field in KiB (``VmRSS``, ``VmHWM``); 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- statistics -------------------------------------------------------------------------


def quantile(values: list[float], q: float) -> float:
    """Median for 0.5, else nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    if q == 0.5:
        return statistics.median(values)
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return "n/a" if seconds != seconds else f"{seconds * 1000:.2f}"


@dataclass
class Sample:
    """One stream, times in seconds from the request being sent."""

    first_event: float = 0.0
    first_token: float = 0.0
    total: float = 0.0
    started_stamp: float = 0.0
    """When the engine stamped RUN_STARTED (its ``Event.time``): the engine-side start."""
    token_stamp: float = 0.0
    """When the engine stamped the first TEXT_MESSAGE_CONTENT."""
    events: int = 0
    tokens: int = 0
    outcome: str = ""


@dataclass
class Cpu:
    """CPU seconds used during a phase, per process."""

    engine: float = 0.0
    fake: float = 0.0
    client: float = 0.0
    machine: float = 0.0
    """Every process on the machine, ours included."""

    @property
    def others(self) -> float:
        """CPU other processes used meanwhile: they compete with the bench for the cores."""
        return max(0.0, self.machine - self.engine - self.fake - self.client)


@dataclass
class Phase:
    name: str
    concurrency: int
    samples: list[Sample] = field(default_factory=list)
    wall: float = 0.0
    errors: int = 0
    cpu: Cpu = field(default_factory=Cpu)
    note: str = ""

    def q(self, attribute: str, q: float) -> float:
        return quantile([float(getattr(s, attribute)) for s in self.samples], q)

    @property
    def events(self) -> int:
        return sum(s.events for s in self.samples)

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.samples)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall if self.wall else 0.0

    @property
    def engine_ms_per_event(self) -> float:
        return self.cpu.engine * 1000 / self.events if self.events else float("nan")

    @property
    def engine_ms_per_run(self) -> float:
        return self.cpu.engine * 1000 / len(self.samples) if self.samples else float("nan")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "concurrency": self.concurrency,
            "streams": len(self.samples),
            "errors": self.errors,
            "wall_s": round(self.wall, 3),
            "events": self.events,
            "tokens": self.tokens,
            "events_per_s": round(self.events_per_s, 1),
            "tokens_per_s": round(self.tokens / self.wall, 1) if self.wall else 0.0,
            "runs_per_s": round(len(self.samples) / self.wall, 1) if self.wall else 0.0,
            "cpu_s": {
                "engine": round(self.cpu.engine, 3),
                "fake_llm": round(self.cpu.fake, 3),
                "client": round(self.cpu.client, 3),
                "other_processes": round(self.cpu.others, 3),
            },
            "engine_cpu_share": round(self.cpu.engine / self.wall, 3) if self.wall else 0.0,
            "others_cores_busy": round(self.cpu.others / self.wall, 2) if self.wall else 0.0,
            "engine_cpu_ms_per_event": round(self.engine_ms_per_event, 4),
            "engine_cpu_ms_per_run": round(self.engine_ms_per_run, 3),
        }
        for attribute in ("first_event", "first_token", "total", "started_stamp", "token_stamp"):
            for label, q in (("p50", 0.5), ("p99", 0.99)):
                out[f"{attribute}_{label}_ms"] = round(self.q(attribute, q) * 1000, 3)
        return out


# -- report -----------------------------------------------------------------------------


def machine_notes() -> dict[str, str]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpus": str(os.cpu_count()),
        "cpu_model": model or platform.processor(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "kernel": platform.release(),
        "loadavg_at_start": "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
    }


def progress(label: str, phase: Phase) -> None:
    print(
        f"{label}: {len(phase.samples)} streams in {phase.wall:.1f} s"
        f"{f', {phase.errors} errors' if phase.errors else ''}",
        file=sys.stderr,
    )
