"""gunicorn's own refusals, made before the app sees a request, answer in our JSON error
shape: a request line past ``limit_request_line`` (414), a header past
``limit_request_field_size`` (431), and requests it cannot parse at all (400) — a broken
chunked body included, which gunicorn only finds while the app reads it."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

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


def _raw(stack: Stack, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` as is; the status, headers and body of the answer."""
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        (b"GARBAGE\r\n\r\n", 400, "bad_request"),
        (b"GET / HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", 400, "bad_request"),
        (b"G<T / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400, "bad_request"),
        (
            b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: <script>\r\n\r\n",
            400,
            "bad_request",
        ),
        (
            b"POST /agentik/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"ZZ\r\n{}\r\n0\r\n\r\n",
            400,
            "bad_request",
        ),
    ],
    ids=["request-line", "http-version", "method", "header-name", "chunk-size"],
)
def test_a_request_gunicorn_cannot_parse_gets_a_json_error_that_echoes_nothing(
    stack: Stack, request_bytes: bytes, status: int, code: str
) -> None:
    got, headers, body = _raw(stack, request_bytes)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == code
    assert "<" not in error["message"] and "gunicorn" not in error["message"].lower()
    assert "GARBAGE" not in error["message"] and "script" not in error["message"]
    with stack.client() as client:
        assert client.get("/health").status_code == 200


def test_a_broken_chunked_body_to_a2a_is_an_invalid_request_not_an_internal_error(
    stack: Stack,
) -> None:
    got, headers, body = _raw(
        stack,
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"A2A-Version: 1.0\r\n"
        b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
    )
    assert got == 200, body
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == -32600
    assert "chunked" in error["message"]
