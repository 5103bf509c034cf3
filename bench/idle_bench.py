"""Idle memory of the whole ``agentik serve`` tree, as a user starts it.

Starts ``python -m agentik.cli serve`` on free ports (SQLite in a temp directory, the fake
OpenAI server as its LLM so the probe runs as it would against a real endpoint), waits for
``/health``, lets it settle, then reads every process of the tree: ``VmRSS`` from
``/proc/<pid>/status`` and ``Pss`` from ``/proc/<pid>/smaps_rollup``. Repeats ``--repeat``
times on fresh processes and prints the median per role (the serve process, which runs
the engine, and the web workers) and of the tree's totals.

Run: ``python -m bench.idle_bench`` (one web worker, five repetitions);
``--web-workers 2`` for the default ``serve``; ``--python /path/to/venv/bin/python`` to
measure another install (a runtime-only venv made by ``make install`` is what ``make run``
users have; the development venv has more packages that imports may pull in).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.facade_bench import _children, _free_port, _proc_kib
from tests.fakes.fake_openai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
ROLES = ("serve (engine)", "web worker", "engine", "gunicorn master")
"""``agentik serve`` runs the engine itself and starts the web workers; a separate engine and
a gunicorn master only with several engine workers (the supervisor's layout)."""


def _tree(pid: int) -> list[int]:
    found = [pid]
    for child in _children(pid):
        found += _tree(child)
    return found


def _role(pid: int, root: int) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if pid == root:
        return "serve (engine)"
    if b"engine" in argv:
        return "engine"
    if b"web_facade.serve_web" in argv:
        return "web worker"
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return "gunicorn master" if parent == root else "web worker"


def measure_once(python: str, web_workers: int, settle: float) -> dict[str, tuple[float, float]]:
    """Each role's (RSS MiB, PSS MiB), summed over its processes, and the ``total``."""
    with FakeOpenAI() as llm, tempfile.TemporaryDirectory() as tmp:
        web = f"127.0.0.1:{_free_port()}"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "AGENTIK_GRPC_ADDR": f"127.0.0.1:{_free_port()}",
            "AGENTIK_HTTP_ADDR": web,
            "AGENTIK_STORE": f"sqlite:///{Path(tmp) / 'agentik.db'}",
            "AGENTIK_WEB_WORKERS": str(web_workers),
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "bench",
        }
        env.pop("AGENTIK_CONFIG", None)
        serve = subprocess.Popen(
            [python, "-m", "agentik.cli", "serve"],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://{web}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or serve.poll() is not None:
                    raise SystemExit("agentik serve did not become healthy")
                time.sleep(0.3)
            time.sleep(settle)
            sums: dict[str, list[float]] = {role: [0.0, 0.0] for role in (*ROLES, "total")}
            for pid in _tree(serve.pid):
                role = _role(pid, serve.pid)
                rss = _proc_kib(pid, "VmRSS") / 1024
                pss = _proc_kib(pid, "Pss", "smaps_rollup") / 1024
                for key in (role, "total"):
                    sums[key][0] += rss
                    sums[key][1] += pss
            return {role: (rss, pss) for role, (rss, pss) in sums.items()}
        finally:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(60)
            except subprocess.TimeoutExpired:
                serve.kill()


def table(runs: list[dict[str, tuple[float, float]]]) -> str:
    """Markdown: the median RSS and PSS per role over ``runs``."""
    lines = ["| process | RSS MiB (median) | PSS MiB (median) |", "|---|---:|---:|"]
    for role in (*ROLES, "total"):
        if all(run[role] == (0.0, 0.0) for run in runs):
            continue  # not in this layout
        rss = statistics.median(run[role][0] for run in runs)
        pss = statistics.median(run[role][1] for run in runs)
        name = f"**{role}**" if role == "total" else role
        lines.append(f"| {name} | {rss:.1f} | {pss:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter to start")
    parser.add_argument("--web-workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after /health")
    args = parser.parse_args(argv)
    runs = [measure_once(args.python, args.web_workers, args.settle) for _ in range(args.repeat)]
    print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
