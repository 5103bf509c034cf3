"""Without chromium the browser tests skip on a dev machine and fail where CI requires them."""

from __future__ import annotations

import pytest

from tests.browser import chromium_or_skip


def test_a_missing_browser_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("AGENTIK_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium and chromedriver not installed"):
        chromium_or_skip()


def test_a_missing_browser_fails_where_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("AGENTIK_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="required here"):
        chromium_or_skip()
