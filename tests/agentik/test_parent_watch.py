"""A child started with ``env_for_child`` stops when its parent dies."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WAIT = 15.0

PARENT = textwrap.dedent(
    """
    import os, subprocess, sys
    from agentik.parent_watch import env_for_child
    child = subprocess.Popen(
        [sys.executable, "-c",
         "from agentik.parent_watch import stop_with_parent; stop_with_parent();"
         "import signal; print('ready', flush=True); signal.pause()"],
        env=env_for_child(os.environ), stdout=subprocess.PIPE,
    )
    assert child.stdout.readline().strip() == b"ready"
    print(child.pid, flush=True)
    os._exit(0)  # the parent dies without stopping its child
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_a_child_started_with_env_for_child_stops_when_its_parent_dies() -> None:
    parent = subprocess.run(
        [sys.executable, "-c", PARENT],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        timeout=WAIT,
        check=True,
    )
    pid = int(parent.stdout.decode().split()[-1])
    deadline = time.monotonic() + WAIT
    while _alive(pid):
        assert time.monotonic() < deadline, f"child {pid} outlived its parent"
        time.sleep(0.05)
