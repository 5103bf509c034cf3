"""Fixtures for the web facade: a real engine on a free port with the fake LLM, the app."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from agentik.config import Settings, load_settings
from engine_service.build import build_engine
from engine_service.server import EngineServer
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.openapi_check import assert_response_conforms
from web_facade import create_app
from web_facade.engine_client import EngineClient

WAIT = 10.0
"""Upper bound for every wait in these tests, in seconds."""


class BackgroundEngine:
    """An engine server on its own asyncio loop in a thread, so sync code can call it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server: EngineServer | None = None

    async def _start(self) -> int:
        self.server = EngineServer(build_engine(self.settings), self.settings)
        return await self.server.start()

    def start(self) -> str:
        self.thread.start()
        port = asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(WAIT)
        return f"127.0.0.1:{port}"

    def stop(self) -> None:
        if self.server is not None:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)
        self.loop.close()


@pytest.fixture(scope="session")
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def engine_settings(llm: FakeOpenAI, **env: str) -> Settings:
    """An in-memory engine on a free port answering with the fake LLM; ``env`` adds to it."""
    base = {
        "AGENTIK_GRPC_ADDR": "127.0.0.1:0",
        "AGENTIK_STORE": "memory://",
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "test-key",
        "AGENTIK_LLM_MAX_RETRIES": "0",
        "AGENTIK_SHUTDOWN_GRACE": "0",
    }
    return load_settings(None, {**base, **env})


@pytest.fixture(scope="session")
def engine_target(llm: FakeOpenAI) -> Iterator[str]:
    settings = engine_settings(llm)
    engine = BackgroundEngine(settings)
    target = engine.start()
    yield target
    engine.stop()


def web_settings(target: str, **env: str) -> Settings:
    base = {"AGENTIK_ENGINE_TARGET": target, "AGENTIK_HEARTBEAT": "0.2"}
    # Run the web tests with either stream reader (threads, asyncio): CI runs both.
    reader = os.environ.get("AGENTIK_WEB_STREAM_READER")
    if reader:
        base["AGENTIK_WEB_STREAM_READER"] = reader
    base.update(env)
    return load_settings(None, base)


@pytest.fixture
def make_app(engine_target: str) -> Iterator[Callable[..., Flask]]:
    """Builds apps on the shared engine; ``env`` overrides settings. Closes their channels."""
    clients: list[EngineClient] = []

    def make(target: str | None = None, **env: str) -> Flask:
        settings = web_settings(target or engine_target, **env)
        client = EngineClient(settings.web.engine_target)
        clients.append(client)
        app = create_app(settings, client)
        app.testing = True
        return app

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def app(make_app: Callable[..., Flask]) -> Flask:
    return make_app()


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def api(client: FlaskClient) -> ApiClient:
    return ApiClient(client)


class ApiClient:
    """The test client, with every response held against the OpenAPI document."""

    def __init__(self, client: FlaskClient) -> None:
        self.client = client

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.client.open(path, method=method, **kwargs)
        if response.mimetype != "text/event-stream":
            assert_response_conforms(
                method,
                path.split("?", 1)[0],
                response.status_code,
                response.content_type,
                response.get_data(),
            )
        return response

    def new_conversation(self, title: str = "") -> str:
        response = self.call("POST", "/agentik/conversations", json={"title": title})
        assert response.status_code == 201
        conversation_id: str = response.get_json()["id"]
        return conversation_id
