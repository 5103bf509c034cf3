"""GET /health reports the facade and the engine (standard gRPC health service)."""

from __future__ import annotations

import socket
from collections.abc import Callable

from flask import Flask

from tests.web.conftest import ApiClient


def test_health_is_200_when_the_engine_is_serving(api: ApiClient) -> None:
    response = api.call("GET", "/health")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok", "facade": "ok", "engine": "serving"}


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
