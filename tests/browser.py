"""Finding Debian's ``chromium`` and ``chromium-driver`` for the tests that drive the chat page."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium_or_skip() -> tuple[str, str]:
    """The chromium and chromedriver binaries, when both are installed.

    Otherwise skip with the reason — or fail where ``AGENTIK_REQUIRE_BROWSER`` is set (CI), so
    the browser tests can never be skipped silently there. ``make test`` installs them.
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    missing = " and ".join(
        name for name, found in (("chromium", chromium), ("chromedriver", driver)) if not found
    )
    reason = f"{missing} not installed (`make browser`: apt-get install chromium chromium-driver)"
    if os.environ.get("AGENTIK_REQUIRE_BROWSER"):
        pytest.fail(f"browser tests are required here but cannot run: {reason}")
    pytest.skip(reason)
