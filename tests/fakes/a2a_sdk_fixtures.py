"""Module-scoped a2a-sdk agents for the tests that call one (loaded by tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.a2a_sdk_agent_process import SdkAgent

__all__ = ["SDK_TOKEN", "agent", "guarded_agent", "plain_agent"]

SDK_TOKEN = "a2a-sdk-agent-secret"
"""The bearer token ``guarded_agent`` wants on every A2A call."""


@pytest.fixture(scope="module")
def agent() -> Iterator[SdkAgent]:
    """A streaming a2a-sdk agent, open to anyone."""
    with SdkAgent() as running:
        yield running


@pytest.fixture(scope="module")
def plain_agent() -> Iterator[SdkAgent]:
    """An agent whose card says it does not stream."""
    with SdkAgent(streaming=False) as running:
        yield running


@pytest.fixture(scope="module")
def guarded_agent() -> Iterator[SdkAgent]:
    """An agent that wants ``Authorization: Bearer SDK_TOKEN``."""
    with SdkAgent(token=SDK_TOKEN) as running:
        yield running
