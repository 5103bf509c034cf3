"""The facade's ``GET /metrics`` carries the engine's metrics when the engine serves them
(``agentik serve`` turns them on at a loopback port), and only its own otherwise."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from flask import Flask

from agentik.config import load_settings
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.conftest import BackgroundEngine, engine_settings
from web_facade.cli import serve_env


@pytest.fixture
def engine_with_metrics(llm: FakeOpenAI) -> Iterator[str]:
    engine = BackgroundEngine(engine_settings(llm, AGENTIK_METRICS_ADDR="127.0.0.1:0"))
    target = engine.start()
    yield target
    engine.stop()


def test_the_facade_metrics_append_the_engines_series(
    engine_with_metrics: str, make_app: Callable[..., Flask]
) -> None:
    client = make_app(engine_with_metrics).test_client()
    client.post("/agentik/conversations", json={"title": "m"})

    text = client.get("/metrics").get_data(as_text=True)

    assert "# TYPE agentik_runs_started_total counter" in text
    assert "agentik_grpc_server_handling_seconds_count{" in text
    assert "agentik_http_request_duration_seconds" in text  # the facade's own
    assert text.count("# TYPE agentik_runs_started_total") == 1


def test_without_engine_metrics_the_facade_serves_its_own(make_app: Callable[..., Flask]) -> None:
    text = make_app().test_client().get("/metrics").get_data(as_text=True)

    assert "agentik_http_request_duration_seconds" in text
    assert "agentik_runs_started" not in text
    assert "not included" not in text


def test_serve_turns_the_engine_metrics_on_at_a_free_loopback_port() -> None:
    assert serve_env(load_settings(None, {}), {"X": "1"}) == {
        "X": "1",
        "AGENTIK_METRICS_ADDR": "127.0.0.1:0",
    }


@pytest.mark.parametrize(
    "env", [{"AGENTIK_METRICS_ADDR": "127.0.0.1:9464"}, {"AGENTIK_ENGINE_WORKERS": "2"}]
)
def test_serve_keeps_a_configured_metrics_address_and_several_workers_without(
    env: dict[str, str],
) -> None:
    assert serve_env(load_settings(None, env), {}) == {}
