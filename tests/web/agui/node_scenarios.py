"""Running one scenario of a tests/node script that drives ``@ag-ui/client``'s HttpAgent."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

from tests.node_tools import NODE_DIR, node_or_skip
from tests.web.e2e.conftest import WAIT, Stack


def run_scenario(
    script: Path, stack: Stack, name: str, thread_id: str = "", path: str = ""
) -> dict[str, Any]:
    """The script's summary of scenario ``name``; every run in it must pass the client, end
    with a terminal event, carry protocolVersion 1.0, and cause no client warning.
    ``path``: the AG-UI endpoint (the script's default: ``/agui``)."""
    node = node_or_skip("@ag-ui/client")
    done = subprocess.run(
        [
            node,
            str(script),
            stack.base_url,
            name,
            thread_id or f"node-{uuid.uuid4().hex}",
            *([path] if path else []),
        ],
        cwd=NODE_DIR,
        capture_output=True,
        text=True,
        timeout=WAIT * 2,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["warnings"] == []
    for run in summary["runs"]:
        assert run["error"] is None, run["error"]
        assert run["terminal"], f"the stream ended without a terminal event: {run['types']}"
        assert run["runStarted"]["protocolVersion"] == "1.0"
    return summary
