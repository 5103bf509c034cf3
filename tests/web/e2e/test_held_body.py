"""A client that sends a request's head, then holds its body back, to a route that answers
without the body (a 404, a 405, the host check, a body over the limit): under gunicorn the
answer comes at once, not at the body's deadline, and the connection stays usable once the
body has come (it is read and dropped after the answer, up to ``[web]
discard_body_bytes``). The body's deadline here is 30 s, and the answer must come within 5.

A body within the limit and at most 64 KiB is read in the event loop before any route sees
the request (so it holds no thread): held back, it is answered 408 at its deadline, as any
slow body is (``tests/web/test_request_heads.py``)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import Stack

BODY_TIMEOUT = 30
ANSWERED_WITHIN = 5.0
LIMIT = 1000
"""``[web] max_body_bytes`` here: a body of a few KiB is over it yet read by the loop."""


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path_factory.mktemp("held-body"),
        AGENTIK_WEB_BODY_TIMEOUT=str(BODY_TIMEOUT),
        AGENTIK_MAX_BODY_BYTES=str(LIMIT),
    )
    yield running
    running.stop()


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one answer framed by its Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection; read so far: {data[:200]!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection inside an answer"
        body += chunk
    return int(lines[0].split()[1]), headers, body


@pytest.mark.parametrize(
    ("request_line", "extra", "size", "status"),
    [
        ("POST /agentik/conversations", "", 5_000, 413),  # small, yet over the limit
        ("POST /agentik/conversations", "", 200_000, 413),
        ("POST /no/such/endpoint", "", 200_000, 404),
        ("PUT /health", "", 200_000, 405),
        ("POST /agentik/conversations", "Host: example.com\r\n", 200_000, 403),
        ("POST /", "A2A-Version: 1.0\r\n", 200_000, 200),  # JSON-RPC -32600, in HTTP 200
    ],
    ids=["413-small", "413", "404", "405", "host-403", "a2a-too-large"],
)
def test_a_refusal_before_a_held_back_body_comes_at_once_and_keeps_the_connection(
    stack: Stack, request_line: str, extra: str, size: int, status: int
) -> None:
    host = "" if extra.startswith("Host:") else "Host: 127.0.0.1\r\n"
    head = (
        f"{request_line} HTTP/1.1\r\n{host}{extra}Content-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    body = b'"' + b"x" * (size - 2) + b'"'
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=BODY_TIMEOUT) as sock:
        started = time.monotonic()
        sock.sendall(head + body[:100])  # then the client holds the rest back
        answered, headers, text = _answer(sock)
        took = time.monotonic() - started
        assert took < ANSWERED_WITHIN, f"answered after {took:.1f} s: it waited for the body"
        assert answered == status, text
        if status == 200:
            assert json.loads(text)["error"]["code"] == -32600
        assert headers["connection"].lower() == "keep-alive"

        sock.sendall(body[100:])  # the body comes after all: read and dropped
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        health, _, text = _answer(sock)
    assert health == 200, text


def test_a_refusal_before_a_held_back_chunked_body_comes_at_once(stack: Stack) -> None:
    head = (
        b"POST /no/such/endpoint HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=BODY_TIMEOUT) as sock:
        started = time.monotonic()
        sock.sendall(head + b'4\r\n"xx"\r\n')  # and the last chunk is held back
        answered, _, text = _answer(sock)
        took = time.monotonic() - started
        assert took < ANSWERED_WITHIN, f"answered after {took:.1f} s: it waited for the body"
        assert answered == 404, text
        sock.sendall(b"0\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        health, _, text = _answer(sock)
    assert health == 200, text
