"""``agentik --version``."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from tests.web.e2e.conftest import ROOT, WAIT


def test_version_prints_the_installed_version_and_exits_0() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engine_service.cli", "--version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"agentik {version('agentik')}\n", "")
