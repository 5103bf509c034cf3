"""Fixtures for the AG-UI facade: the in-process app (from ``tests/web/conftest.py``) and the
whole stack under gunicorn (``Stack`` from the end-to-end fixtures) for the official client."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import Stack


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(llm, tmp_path_factory.mktemp("agui-stack"))
    yield running
    running.stop()


@pytest.fixture
def http(stack: Stack) -> Iterator[httpx.Client]:
    with stack.client() as client:
        yield client
