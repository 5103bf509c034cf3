"""The LLM endpoint is checked at start (``GET /models``): a refused port, a wrong model and a
refused key are found before the first message; a good endpoint is ``ok``."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from engine_service.llm.offline import OfflineChatModel
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.llm.probe import (
    OFFLINE,
    OK,
    UNAUTHORIZED,
    UNKNOWN_MODEL,
    UNREACHABLE,
    LlmWatch,
    probe_llm,
)
from tests.fakes.fake_openai import FakeOpenAI

WAIT = 10.0


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key="k") as server:
        yield server


def refused_url() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_a_good_endpoint_that_lists_the_model_is_ok(fake: FakeOpenAI) -> None:
    status = await probe_llm(fake.base_url, "k", "fake-model")

    assert status.state == OK and status.ok
    assert "serves 'fake-model'" in status.detail


async def test_a_refused_port_is_unreachable_with_a_fix() -> None:
    status = await probe_llm(refused_url(), "k", "fake-model")

    assert status.state == UNREACHABLE and not status.ok
    assert "OPENAI_BASE_URL" in status.fix


async def test_a_model_the_endpoint_does_not_list_is_an_unknown_model(fake: FakeOpenAI) -> None:
    status = await probe_llm(fake.base_url, "k", "gpt-9")

    assert status.state == UNKNOWN_MODEL
    assert "'gpt-9'" in status.detail and "fake-model, gpt-4o-mini" in status.detail
    assert "AGENTIK_MODEL" in status.fix


async def test_a_refused_key_is_unauthorized(fake: FakeOpenAI) -> None:
    status = await probe_llm(fake.base_url, "wrong", "fake-model")

    assert status.state == UNAUTHORIZED
    assert "OPENAI_API_KEY" in status.fix


async def test_an_endpoint_without_models_is_ok_and_says_the_model_is_unchecked(
    fake: FakeOpenAI,
) -> None:
    fake.models = None

    status = await probe_llm(fake.base_url, "k", "anything")

    assert status.state == OK
    assert "not checked" in status.detail


async def test_credentials_in_the_url_never_reach_the_detail() -> None:
    status = await probe_llm(refused_url().replace("http://", "http://user:secret@"), "k", "m")

    assert "secret" not in status.detail


async def test_the_watch_logs_its_first_answer_and_each_change(
    fake: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    model = OpenAIChatModel(base_url=fake.base_url, api_key="k", model="gpt-9")
    watch = LlmWatch(model, interval=0, api_key="k")
    assert watch.state == "checking"
    with caplog.at_level(logging.INFO, logger="engine_service.llm.probe"):
        watch.start()
        status = await watch.wait_first(WAIT)
    await watch.stop()
    await model.aclose()

    assert status.state == UNKNOWN_MODEL == watch.state
    assert [r.getMessage().split(":")[:2] for r in caplog.records] == [["llm", " unknown model"]]
    assert caplog.records[0].levelno == logging.WARNING


async def test_the_offline_model_is_not_probed() -> None:
    watch = LlmWatch(OfflineChatModel(), interval=0, api_key=None)
    watch.start()

    assert (await watch.wait_first(0)).state == OFFLINE
