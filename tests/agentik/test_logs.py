"""The engine's log: third-party request lines stay out of it at INFO."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest

from agentik.logs import QUIET_BELOW_DEBUG, configure_logging
from tests.fakes.fake_openai import FakeOpenAI


@pytest.fixture
def restored_levels() -> Iterator[None]:
    """configure_logging sets the libraries' loggers: put them back afterwards."""
    before = {name: logging.getLogger(name).level for name in QUIET_BELOW_DEBUG}
    yield
    for name, level in before.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("restored_levels")
def test_httpx_request_lines_stay_out_of_the_log_at_info_but_its_warnings_do_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    configure_logging("INFO")
    with FakeOpenAI() as llm, caplog.at_level(logging.INFO):
        assert httpx.get(f"{llm.base_url}/models", timeout=10).status_code < 500
        logging.getLogger("httpx").warning("a warning of httpx's")

    assert "HTTP Request:" not in caplog.text, caplog.text
    assert "a warning of httpx's" in caplog.text


@pytest.mark.usefixtures("restored_levels")
def test_httpx_request_lines_are_in_the_log_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    configure_logging("DEBUG")
    with FakeOpenAI() as llm, caplog.at_level(logging.DEBUG):
        httpx.get(f"{llm.base_url}/models", timeout=10)

    assert "HTTP Request: GET" in caplog.text, caplog.text
