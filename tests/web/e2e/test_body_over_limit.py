"""A body over the limit sent whole, without ``Expect: 100-continue`` (issue 21): under
gunicorn the client reads the 413 (its body read and dropped up to ``[web]
discard_body_bytes``), not a reset connection. The stack's limit is 64 KiB."""

from __future__ import annotations

import json
import socket

import pytest

from tests.web.e2e.conftest import Stack


def _send_whole_then_read(stack: Stack, path: str, body_size: int, extra: bytes = b"") -> bytes:
    """Send a request and all of its body before reading anything, as most clients do."""
    head = (
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {body_size}\r\n"
        ).encode()
        + extra
        + b"\r\n"
    )
    body = b'"' + b"x" * (body_size - 2) + b'"'
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=20) as sock:
        sock.sendall(head + body)
        sock.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _status_and_body(data: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def test_a_4_mb_body_sent_whole_gets_the_413(stack: Stack) -> None:
    status, _, body = _status_and_body(
        _send_whole_then_read(stack, "/agentik/conversations", 4_100_000)
    )
    assert status == 413
    error = json.loads(body)["error"]
    assert error == {
        "code": "payload_too_large",
        "message": "the request body is larger than 65536 bytes",
    }


def test_an_a2a_body_sent_whole_gets_its_invalid_request(stack: Stack) -> None:
    status, _, body = _status_and_body(
        _send_whole_then_read(stack, "/", 4_100_000, b"A2A-Version: 1.0\r\n")
    )
    assert status == 200
    assert json.loads(body)["error"]["code"] == -32600


def test_past_the_discard_bound_the_413_closes_the_connection(stack: Stack) -> None:
    """Past 4 MiB (the default bound for a 64 KiB limit) the body is not read: the answer
    says it closes, and it does. The client sends part of the body and waits, so that
    what it reads is the answer, not a reset (gunicorn drops the app's own ``Connection``
    header: the worker closes it)."""
    head = (
        b"POST /agentik/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 6000000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=20) as sock:
        sock.sendall(head + b'"' + b"x" * 10_000)
        data = b""
        while chunk := sock.recv(65536):  # to the end: the server closes
            data += chunk
    status, headers, _ = _status_and_body(data)
    assert status == 413
    assert headers.get("connection", "").lower() == "close"


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one answer framed by its Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; read so far: {data[:200]!r}"
        data += chunk
    status, headers, body = _status_and_body(data)
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection inside an answer"
        body += chunk
    return status, headers, body


@pytest.mark.parametrize(
    ("request_line", "host", "status"),
    [
        ("POST /no/such/endpoint", "127.0.0.1", 404),
        ("PUT /health", "127.0.0.1", 405),
        ("POST /agentik/conversations", "example.com", 403),  # the host check
    ],
)
def test_an_answer_before_the_body_keeps_the_connection_usable(
    stack: Stack, request_line: str, host: str, status: int
) -> None:
    """A route that answers without reading the body (larger than the loop reads itself):
    the rest is read and dropped, so the next request on the kept-alive connection is
    answered. Before, the worker read the rest of the body as the next request's head and
    closed the connection under the client, after an answer that said keep-alive."""
    body = b'"' + b"x" * 200_000 + b'"'
    first = (
        f"{request_line} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    second = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=20) as sock:
        sock.sendall(first)
        answered, headers, _ = _answer(sock)
        assert answered == status
        assert headers["connection"].lower() == "keep-alive"
        sock.sendall(second)
        health, _, text = _answer(sock)
    assert health == 200, text


@pytest.mark.parametrize(
    ("request_line", "content_type", "status"),
    [
        ("POST /agentik/conversations", "application/json", 413),
        ("POST /no/such/endpoint", "application/json", 404),
        ("PUT /health", "application/json", 405),
        ("POST /agentik/conversations", "text/plain", 413),
    ],
)
def test_a_client_that_holds_its_body_back_gets_the_refusal_at_once(
    stack: Stack, request_line: str, content_type: str, status: int
) -> None:
    """A client that sends the head of a body past the discard bound and waits for the
    answer before it sends more: the refusal comes at once, not after the body's deadline
    (``[web] body_timeout``, 15 s: the socket's timeout here is shorter), with the
    connection closed."""
    head = (
        f"{request_line} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: 6000000\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=8) as sock:
        sock.sendall(head + b"{}")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    answered, headers, _ = _status_and_body(data)
    assert answered == status
    assert headers.get("connection", "").lower() == "close"
