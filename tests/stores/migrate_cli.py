"""``agentik migrate`` as an operator runs it: a process of its own, given only the store URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

__all__ = ["migrate_cli"]

REPO = Path(__file__).resolve().parents[2]


def migrate_cli(store_url: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTIK_")}
    env["AGENTIK_STORE"] = store_url
    return subprocess.Popen(
        [sys.executable, "-m", "agentik.cli", "migrate"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
