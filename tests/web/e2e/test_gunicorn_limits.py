"""gunicorn's own refusals, made before the app sees a request, answer in our JSON error
shape: a request line past ``limit_request_line`` (414) and a header past
``limit_request_field_size`` (431)."""

from __future__ import annotations

import httpx

from tests.web.e2e.conftest import Stack

LINE_LIMIT = 4094
"""gunicorn's default ``limit_request_line``."""
FIELD_LIMIT = 8190
"""gunicorn's default ``limit_request_field_size``."""


def _json_error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    assert "<" not in message and "gunicorn" not in message.lower()
    return message


def test_a_uri_past_the_request_line_limit_is_a_json_414(stack: Stack) -> None:
    with stack.client() as client:
        response = client.get("/agentik/conversations?q=" + "x" * (LINE_LIMIT + 1))
    message = _json_error(response, 414, "uri_too_long")
    assert str(LINE_LIMIT) in message


def test_a_header_past_the_field_size_limit_is_a_json_431(stack: Stack) -> None:
    with stack.client() as client:
        response = client.get("/health", headers={"X-Big": "x" * (FIELD_LIMIT + 1)})
    _json_error(response, 431, "headers_too_large")


def test_too_many_headers_is_a_json_431(stack: Stack) -> None:
    headers = {f"X-H{index}": "v" for index in range(120)}
    with stack.client() as client:
        response = client.get("/health", headers=headers)
    _json_error(response, 431, "headers_too_large")


def test_the_facade_still_serves_after_refusing(stack: Stack) -> None:
    with stack.client() as client:
        assert client.get("/health").status_code == 200
