"""A client that sends a request's head, then holds its body back, to a route that answers
without the body (a 404, a 405, the host check, a body over the limit): under gunicorn the
answer comes at once, not at the body's deadline, and the connection stays usable once the
body has come (the worker's event loop reads and drops it after the answer, up to ``[web]
discard_body_bytes``). No thread waits for such a body: bodies held back on ``/health`` leave
``/health`` answering, and bodies held back on every thread of the pool leave a thread for
the next request. The body's deadline here is 30 s, and an answer must come within 5.

A body within the limit and at most 64 KiB is read in the event loop before any route sees
the request (so it holds no thread): held back, it is answered 408 at its deadline, as any
slow body is (``tests/web/test_request_heads.py``). The rules for where a dropped body ends:
``tests/web/test_body_rest.py``."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.e2e.conftest import Stack
from web_facade.gunicorn_worker import RESERVED_THREADS

BODY_TIMEOUT = 30
ANSWERED_WITHIN = 5.0
LIMIT = 1000
"""``[web] max_body_bytes`` here: a body of a few KiB is over it yet read by the loop."""
THREADS = 4
"""The request pool's threads of the one worker here."""
HEADER_TIMEOUT = 1.0
HEALTH = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


@pytest.fixture(scope="module")
def stack(llm: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = Stack(
        llm,
        tmp_path_factory.mktemp("held-body"),
        AGENTIK_WEB_BODY_TIMEOUT=str(BODY_TIMEOUT),
        AGENTIK_WEB_HEADER_TIMEOUT=str(HEADER_TIMEOUT),
        AGENTIK_MAX_BODY_BYTES=str(LIMIT),
        AGENTIK_WEB_WORKERS="1",
        AGENTIK_WEB_THREADS=str(THREADS),
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


def _statuses(data: bytes) -> list[int]:
    """The statuses of the answers in ``data`` (their JSON bodies hold no status line)."""
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", data)]


def _to_the_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a timeout fails the test)."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


BODY = b'"' + b"x" * 199_998 + b'"'


def _held(stack: Stack, request_line: str, status: int) -> socket.socket:
    """A connection whose request was answered, its body (200 KB) held back after 100 bytes."""
    sock = socket.create_connection(("127.0.0.1", stack.http_port), timeout=ANSWERED_WITHIN)
    try:
        sock.sendall(
            f"{request_line} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
            + BODY[:100]
        )
        answered, headers, text = _answer(sock)
        assert answered == status, text
        assert headers["connection"].lower() == "keep-alive"
    except BaseException:
        sock.close()
        raise
    return sock


def _answered_within(stack: Stack, request: bytes) -> tuple[int, float]:
    """The status of ``request`` on a new connection, and how long it took."""
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=ANSWERED_WITHIN) as sock:
        started = time.monotonic()
        sock.sendall(request)
        status = _answer(sock)[0]
        return status, time.monotonic() - started


def test_bodies_held_back_on_health_leave_health_answering(stack: Stack) -> None:
    """Each held a thread of the reserved lane until the body's deadline, after its answer:
    the next /health waited 30 s here (15 s by default), and a liveness probe failed."""
    held: list[socket.socket] = []
    try:
        for _ in range(RESERVED_THREADS + 2):
            held.append(_held(stack, "GET /health", 200))
        status, took = _answered_within(stack, HEALTH)
        assert (status, took < ANSWERED_WITHIN) == (200, True), f"{status} after {took:.1f} s"
    finally:
        for sock in held:
            sock.close()


def test_bodies_held_back_on_every_thread_leave_a_thread_for_the_next_request(
    stack: Stack,
) -> None:
    held: list[socket.socket] = []
    try:
        for _ in range(THREADS):
            held.append(_held(stack, "POST /no/such/endpoint", 404))
        card = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        status, took = _answered_within(stack, card)
        assert (status, took < ANSWERED_WITHIN) == (200, True), f"{status} after {took:.1f} s"
        for sock in held:  # their bodies come after all: dropped, the connections kept
            sock.sendall(BODY[100:] + HEALTH)
        for sock in held:
            assert _answer(sock)[0] == 200
    finally:
        for sock in held:
            sock.close()


def test_a_connection_whose_dropped_body_has_come_is_kept_alive_while_idle(stack: Stack) -> None:
    """Back to gunicorn's keep-alive wait (5 s), not to a head's: no 408 after the header
    timeout."""
    with _held(stack, "POST /no/such/endpoint", 404) as sock:
        sock.sendall(BODY[100:])
        sock.settimeout(HEADER_TIMEOUT + 1)
        with pytest.raises(TimeoutError):
            sock.recv(1)
        sock.settimeout(ANSWERED_WITHIN)
        sock.sendall(HEALTH)
        assert _answer(sock)[0] == 200


CHUNKED_404 = (
    b"POST /no/such HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize(
    "body",
    [
        b"zz\r\n" + HEALTH,  # a broken chunk size
        b"5\r\nabcdeXX\r\n0\r\n\r\n" + HEALTH,  # a chunk longer than it said
        b"0\r\n" + HEALTH,  # a request as trailers
        f"{5 * 1024 * 1024:x}\r\n".encode() + HEALTH,  # a chunk past the discard bound
    ],
    ids=["bad-size", "overlong-chunk", "trailer", "past-the-bound"],
)
def test_a_chunked_body_that_cannot_be_dropped_closes_after_its_answer_and_smuggles_nothing(
    stack: Stack, body: bytes
) -> None:
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=ANSWERED_WITHIN) as sock:
        sock.sendall(CHUNKED_404 + body)
        assert _statuses(_to_the_end(sock)) == [404]


def test_a_request_inside_a_dropped_chunk_is_not_answered(stack: Stack) -> None:
    inner = b"x" * 100_000 + HEALTH + b"x" * 100_000
    last = b"GET /no/such/second HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=ANSWERED_WITHIN) as sock:
        sock.sendall(CHUNKED_404 + f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n")
        sock.sendall(last)
        assert _statuses(_to_the_end(sock)) == [404, 404]


def _chunked_413(chunks: list[bytes]) -> bytes:
    head = (
        b"POST /agentik/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return head + b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for chunk in chunks)


def test_a_chunked_body_over_the_limit_held_back_gets_its_413_at_once_saying_close(
    stack: Stack,
) -> None:
    """The app read one byte past the limit: where gunicorn's reader stopped inside the body
    is not known, so its rest cannot be dropped, and the answer says so."""
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=ANSWERED_WITHIN) as sock:
        sock.sendall(_chunked_413([b'"' + b"x" * 5000]))  # and the rest is held back
        status, headers, text = _answer(sock)
        assert status == 413, text
        assert headers["connection"].lower() == "close"


def test_a_chunked_body_over_the_limit_sent_whole_gets_its_413(stack: Stack) -> None:
    """Closed after its answer, the connection is drained for as long as a body may take
    (up to discard_body_bytes), so a client that sends all of its 1 MB before it reads
    gets the 413."""
    chunks = [b'"' + b"x" * 99_999] + [b"x" * 100_000] * 9 + [b'"']
    with socket.create_connection(("127.0.0.1", stack.http_port), timeout=ANSWERED_WITHIN) as sock:
        sock.sendall(_chunked_413(chunks) + b"0\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert _statuses(_to_the_end(sock)) == [413]
