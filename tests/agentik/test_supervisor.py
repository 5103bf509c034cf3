"""``agentik.supervisor``: what ``agentik serve`` becomes once its settings are checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTIK_SUPERVISE", None)
    return env


def test_the_supervisor_refuses_to_start_by_hand() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentik.supervisor"],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.returncode == 2
    assert "started by `agentik serve`" in done.stderr


def test_exec_supervisor_runs_the_commands_says_its_lines_and_fails_when_a_child_dies(
    tmp_path: Path,
) -> None:
    """The process execs into the supervisor (same pid): it starts every command, says its
    ``started`` line (JSON when the log format is), stops the others when one dies on its own,
    and exits 1; the children do not see its spec."""
    seen = tmp_path / "child-env"
    child = (
        "import os, sys, pathlib;"
        f"pathlib.Path({str(seen)!r}).write_text(str('AGENTIK_SUPERVISE' in os.environ));"
        "sys.exit(3)"
    )
    script = (
        "import os, sys\n"
        "from agentik.supervisor import exec_supervisor\n"
        f"exec_supervisor([[sys.executable, '-c', {child!r}]], os.environ, stop_timeout=5.0,"
        " started='both up', stopping='going down', log_format='json')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=WAIT
    )
    assert done.returncode == 1, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert [line["message"] for line in lines] == ["both up"]
    assert seen.read_text() == "False"
