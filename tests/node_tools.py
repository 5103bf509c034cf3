"""Finding node and the npm packages of tests/node for the tests that run Node clients."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parent / "node"


def node_or_skip(package: str) -> str:
    """The node binary, when node and ``package`` (installed in tests/node) are both there.

    Otherwise skip with the reason — or fail where ``AGENTIK_REQUIRE_NODE`` is set (CI), so
    these tests can never be skipped silently there.
    """
    node = shutil.which("node")
    if node and (NODE_DIR / "node_modules" / package).is_dir():
        return node
    reason = "node is not installed" if not node else "run `make node-deps` (npm ci in tests/node)"
    if os.environ.get("AGENTIK_REQUIRE_NODE"):
        pytest.fail(f"node client tests are required here but cannot run: {reason}")
    pytest.skip(reason)
