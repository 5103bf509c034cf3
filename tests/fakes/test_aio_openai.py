"""The benchmarks' fake OpenAI API on one asyncio loop answers as the threaded fake does."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.fakes.aio_openai import BODY_BYTES
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.test_fake_openai import standalone, stream, streamed_text

WAIT = 5.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def aio_url() -> Iterator[str]:
    with standalone("tests.fakes.aio_openai") as url:
        yield url


@pytest.fixture
def client(aio_url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=aio_url, api_key="k", max_retries=0, timeout=WAIT) as c:
        yield c


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    return host, int(port)


def _request(body: bytes | str, path: str = "/v1/chat/completions", extra: str = "") -> bytes:
    data = body.encode() if isinstance(body, str) else body
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n{extra}\r\n"
    ).encode() + data


def _normal(raw: bytes) -> bytes:
    """A response without what differs between two answers: the time, the call ids."""
    raw = re.sub(rb'"created": \d+', b'"created": 0', raw)
    return re.sub(rb'"call_\d+"', b'"call_n"', raw)


@pytest.mark.parametrize(
    "text, stream_it",
    [
        ("go [[chunks:5]]", True),
        ("hello there [[reason]]", True),
        ('[[tool:calculate {"expression": "1+2"}]] and more', True),
        ("[[cached:3]] a b", True),
        ("not streamed", False),
        ("[[error:429]]", True),
        ("[[error:500]]", False),
    ],
)
def test_it_answers_byte_for_byte_what_the_threaded_fake_answers(
    aio_url: str, text: str, stream_it: bool
) -> None:
    body = {
        "model": "m",
        "stream": stream_it,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": text}],
    }
    with FakeOpenAI() as threaded, httpx.Client(timeout=WAIT) as http:
        expected = http.post(f"{threaded.base_url}/chat/completions", json=body)
        got = http.post(f"{aio_url}/chat/completions", json=body)

    assert got.status_code == expected.status_code
    assert got.headers["content-type"] == expected.headers["content-type"]
    assert _normal(got.content) == _normal(expected.content)


def test_the_openai_client_reads_its_stream(client: openai.OpenAI) -> None:
    chunks = stream(client, "bench [[chunks:3]]")

    assert streamed_text(chunks) == "w0 w1 w2 "
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3


def test_the_slow_directive_waits_before_each_chunk(client: openai.OpenAI) -> None:
    started = time.monotonic()
    chunks = stream(client, "[[slow:0.02]] a b c")

    assert streamed_text(chunks) == "Echo: a b c"
    assert time.monotonic() - started >= 0.02 * len(chunks)


def test_requests_follow_each_other_on_one_connection(aio_url: str) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "one"}]})
    with socket.create_connection(_address(aio_url), timeout=WAIT) as sock:
        answers = []
        for _ in range(3):
            sock.sendall(_request(body))
            received = b""
            while b'"finish_reason"' not in received or not received.endswith(b"}"):
                received += sock.recv(65536)
            answers.append(received)

    assert all(a.startswith(b"HTTP/1.1 200 OK") for a in answers)
    assert all(b"Echo: one" in a for a in answers)


def test_a_client_leaving_a_hanging_stream_ends_it(aio_url: str) -> None:
    message = {"role": "user", "content": "[[hang]]"}
    body = json.dumps({"model": "m", "stream": True, "messages": [message]})
    with socket.create_connection(_address(aio_url), timeout=WAIT) as sock:
        sock.sendall(_request(body))
        received = b""
        while b"Echo:" not in received:
            received += sock.recv(65536)

        sock.shutdown(socket.SHUT_WR)  # the client goes: the fake reads its end

        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert b"0\r\n\r\n" not in rest  # closed by the fake, not finished


def test_the_drop_directive_cuts_the_stream_after_the_first_text_chunk(
    client: openai.OpenAI,
) -> None:
    received = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a b [[drop]]"}], stream=True
        ):
            received.append(chunk)

    assert streamed_text(received) == "Echo: "


@pytest.mark.parametrize(
    "request_bytes, status",
    [
        (_request("{not json"), 400),
        (_request("[1, 2]"), 400),
        (_request("{}", path="/v1/nowhere"), 404),
        (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            + f"Content-Length: {BODY_BYTES + 1}\r\n\r\n".encode(),
            413,
        ),
        (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n", 400),
    ],
    ids=[
        "bad JSON",
        "not an object",
        "unknown path",
        "head too long",
        "body too large",
        "bad length",
    ],
)
def test_a_bad_request_gets_an_openai_error_body(
    aio_url: str, request_bytes: bytes, status: int
) -> None:
    with socket.create_connection(_address(aio_url), timeout=WAIT) as sock:
        sock.sendall(request_bytes)
        received = b""
        while not received.endswith(b"}"):
            chunk = sock.recv(65536)
            assert chunk, received
            received += chunk

    head, _, payload = received.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    assert json.loads(payload)["error"]["message"]


def test_it_lists_its_models(aio_url: str) -> None:
    with httpx.Client(timeout=WAIT) as http:
        listed = http.get(f"{aio_url}/models").json()

    assert [m["id"] for m in listed["data"]] == ["gpt-4o-mini", "fake-model"]


def test_a_full_speed_answer_does_not_hold_back_another_connections_answer(aio_url: str) -> None:
    """A long answer written at full speed gives the other connections turns: a short
    request sent meanwhile is answered before the long answer ends."""
    long_body = json.dumps(
        {
            "model": "m",
            "stream": True,
            "messages": [{"role": "user", "content": "[[chunks:20000]]"}],
        }
    )
    short_body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "short"}]})
    ended = threading.Event()
    started = threading.Event()

    def read_long() -> None:
        with socket.create_connection(_address(aio_url), timeout=WAIT) as sock:
            sock.sendall(_request(long_body))
            tail = b""
            while not tail.endswith(b"0\r\n\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                started.set()
                tail = (tail + chunk)[-16:]
        ended.set()

    reader = threading.Thread(target=read_long)
    reader.start()
    try:
        assert started.wait(WAIT)
        with socket.create_connection(_address(aio_url), timeout=WAIT) as sock:
            sock.sendall(_request(short_body))
            received = b""
            while not received.endswith(b"}"):
                received += sock.recv(65536)
        answered_first = not ended.is_set()
    finally:
        reader.join(WAIT * 4)
    assert b"Echo: short" in received
    assert answered_first, "the short request waited for the long answer's end"
    assert ended.is_set()
