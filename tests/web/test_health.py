"""GET /health reports the facade and the engine (standard gRPC health service)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterator

import pytest
from flask import Flask

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import WAIT, ApiClient, BackgroundEngine, engine_settings


def test_health_is_200_when_the_engine_is_serving(api: ApiClient) -> None:
    response = api.call("GET", "/health")
    assert response.status_code == 200
    body = response.get_json()
    assert body.pop("llm") in ("ok", "checking")  # the shared engine's first check may be on
    assert body == {"status": "ok", "facade": "ok", "engine": "serving"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def checked_engine(llm: FakeOpenAI) -> Iterator[Callable[..., str]]:
    """Starts engines with ``env`` and waits for their first LLM check; gives their target."""
    engines: list[BackgroundEngine] = []

    def start(**env: str) -> str:
        engine = BackgroundEngine(engine_settings(llm, **env))
        engines.append(engine)
        target = engine.start()
        assert engine.server is not None
        first = engine.server.llm.wait_first(WAIT)
        asyncio.run_coroutine_threadsafe(first, engine.loop).result(WAIT + 1)
        return target

    yield start
    for engine in engines:
        engine.stop()


@pytest.mark.parametrize(
    ("env", "llm_state"),
    [
        ({}, "ok"),
        ({"AGENTIK_MODEL": "no-such-model"}, "unknown model"),
        ({"OPENAI_BASE_URL": f"http://127.0.0.1:{free_port()}/v1"}, "unreachable"),
    ],
)
def test_health_reports_the_llm_check_without_failing(
    checked_engine: Callable[..., str],
    make_app: Callable[..., Flask],
    env: dict[str, str],
    llm_state: str,
) -> None:
    api = ApiClient(make_app(checked_engine(**env)).test_client())

    response = api.call("GET", "/health")

    assert response.status_code == 200
    assert response.get_json() == {
        "status": "ok",
        "facade": "ok",
        "engine": "serving",
        "llm": llm_state,
    }


def test_health_says_the_model_is_not_checked_when_the_endpoint_has_no_models(
    checked_engine: Callable[..., str], make_app: Callable[..., Flask], llm: FakeOpenAI
) -> None:
    target = checked_engine(OPENAI_BASE_URL=f"{llm.base_url}/not-the-api")
    api = ApiClient(make_app(target).test_client())

    response = api.call("GET", "/health")

    assert (response.status_code, response.get_json()["llm"]) == (200, "model not checked")


def test_health_is_503_when_the_engine_is_unreachable(make_app: Callable[..., Flask]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = ApiClient(make_app(f"127.0.0.1:{port}").test_client())
    response = api.call("GET", "/health")
    assert response.status_code == 503
    body = response.get_json()
    assert body["engine"] == "unreachable" and body["status"] == "unavailable"
    assert body["error"]["code"] == "engine_unavailable"
