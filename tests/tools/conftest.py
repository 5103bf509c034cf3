"""Fixtures of the tool tests that run whole turns."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.fakes.fake_openai import FakeOpenAI


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    """The fake OpenAI API, one per test (its script of replies is the test's own)."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture
def unused_port() -> Iterator[int]:
    """A loopback port bound (so no one else takes it) but not listening: connections to it
    are refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as reserved:
        reserved.bind(("127.0.0.1", 0))
        yield int(reserved.getsockname()[1])
