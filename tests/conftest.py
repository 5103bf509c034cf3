"""Fixtures shared by test directories that do not share a conftest."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest_plugins = ("tests.fakes.a2a_sdk_fixtures",)


@pytest.fixture
def json_dumps_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The values ``json.dumps`` is asked to write during the test, in order (it still
    writes them)."""
    calls: list[Any] = []
    real = json.dumps

    def counted(value: Any, **kwargs: Any) -> str:
        calls.append(value)
        return real(value, **kwargs)

    monkeypatch.setattr(json, "dumps", counted)
    return calls
