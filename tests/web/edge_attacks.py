"""Hostile clients of the facade's edge, on raw sockets: slow heads, idle streams, probes.

Shared by the end-to-end tests of the worker (``tests/web/e2e/test_edge.py``) and its
benchmark (``bench.edge_bench``). Every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import selectors
import socket
import time
from dataclasses import dataclass, field

__all__ = [
    "Answer",
    "Crowd",
    "partial_bodies",
    "partial_heads",
    "probe",
    "read_answer",
    "stream_requests",
    "unclosed_requests",
]

PARTIAL_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\n"
"""A request head that never ends: what a slowloris client sends before it stalls."""


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _sending(port: int, count: int, data: bytes) -> list[socket.socket]:
    """``count`` connections that have each sent ``data`` and nothing more."""
    sockets = []
    for _ in range(count):
        sock = _connect(port)
        sock.sendall(data)
        sockets.append(sock)
    return sockets


def partial_heads(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each send part of a request head, then nothing."""
    return _sending(port, count, PARTIAL_HEAD)


PARTIAL_BODY = (
    b"POST /agentik/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
)
"""A whole head, then a body that never ends."""


def partial_bodies(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each send a head and part of its body, then nothing."""
    return _sending(port, count, PARTIAL_BODY)


def unclosed_requests(port: int, path: str, count: int) -> list[socket.socket]:
    """``count`` connections that each ask for ``path`` and for the connection to close,
    then neither read the answer nor close their side."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    return _sending(port, count, request)


def stream_requests(port: int, path: str, count: int) -> list[socket.socket]:
    """``count`` connections that each ask for an SSE stream, then read nothing."""
    request = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()
    return _sending(port, count, request)


@dataclass
class Answer:
    """The start of a response read off a raw socket."""

    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> dict[str, str]:
        """The facade's JSON error (``{"error": {"code", "message"}}``) of this answer."""
        assert self.headers.get("content-type") == "application/json", self.headers
        document = json.loads(self.body)
        assert set(document) == {"error"}, document
        error: dict[str, str] = document["error"]
        assert set(error) == {"code", "message"}, error
        return error


def _parse(data: bytes) -> Answer | None:
    head, found, body = data.partition(b"\r\n\r\n")
    if not found:
        return None
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    if length is not None and len(body) < int(length):
        return None
    return Answer(int(lines[0].split()[1]), headers, body)


def read_answer(sock: socket.socket, within: float) -> Answer:
    """The response head (and body, when it has a length) read from ``sock``."""
    deadline = time.monotonic() + within
    data = b""
    while (answer := _parse(data)) is None:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no answer within {within} s: {data[:200]!r}"
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        assert chunk, f"closed without an answer: {data[:200]!r}"
        data += chunk
    return answer


@dataclass
class Crowd:
    """Many raw connections, each waiting for its answer's head; read together."""

    sockets: list[socket.socket]
    answers: dict[socket.socket, Answer] = field(default_factory=dict)
    closed: list[socket.socket] = field(default_factory=list)

    def read(self, within: float, enough: int | None = None) -> None:
        """Read until every connection has its answer head (or closed), for ``within`` s;
        with ``enough``, until that many answers came."""
        buffers = {sock: b"" for sock in self.sockets if sock not in self.answers}
        with selectors.DefaultSelector() as selector:
            for sock in buffers:
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ)
            deadline = time.monotonic() + within
            while (
                buffers
                and (enough is None or len(self.answers) < enough)
                and (remaining := deadline - time.monotonic()) > 0
            ):
                for key, _ in selector.select(remaining):
                    fileobj = key.fileobj
                    assert isinstance(fileobj, socket.socket)
                    sock = fileobj
                    try:
                        chunk = sock.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    if chunk:
                        buffers[sock] += chunk
                        answer = _parse(buffers[sock]) or _stream_head(buffers[sock])
                    if not chunk or answer is not None:
                        selector.unregister(sock)
                        del buffers[sock]
                        if chunk and answer is not None:
                            self.answers[sock] = answer
                        else:
                            self.closed.append(sock)

    def with_status(self, status: int) -> list[socket.socket]:
        return [sock for sock, answer in self.answers.items() if answer.status == status]

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def _stream_head(data: bytes) -> Answer | None:
    """An SSE answer's head: the body goes on, so only the head is waited for."""
    head, found, body = data.partition(b"\r\n\r\n")
    if not found or b"text/event-stream" not in head:
        return None
    return Answer(int(head.split(b" ", 2)[1]), {"content-type": "text/event-stream"}, body)


def probe(port: int, path: str, within: float) -> tuple[float, int, bytes]:
    """One GET on a new connection: (seconds to the whole answer, status, body)."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=within)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    return time.perf_counter() - started, response.status, body
