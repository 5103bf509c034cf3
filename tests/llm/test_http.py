"""The engine's own HTTP/1.1 client (``engine_service/llm/http.py``) beyond what the fake
OpenAI server covers: connection reuse, every body framing, stale connections, error
mapping, TLS, proxies and byte-for-byte compatibility with the official ``openai`` client.

Every server here is a small asyncio server on a free 127.0.0.x port, written in this file
so that it can misbehave on purpose; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import gc
import ipaddress
import json
import ssl
import time
import tracemalloc
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine_service.core.chat import ChatDelta, ChatRequest, TextDelta, ToolSpec
from engine_service.core.errors import LLMError
from engine_service.core.models import ImagePart, Message, Role, TextPart, ToolCall
from engine_service.llm import openai_chat
from engine_service.llm.http import BrokenStream, HttpClient, ReadTimedOut
from engine_service.llm.openai_chat import OpenAIChatModel, to_openai_messages, to_openai_tools
from tests.polling import until

WAIT = 5.0
"""Bound on every wait for something that should happen promptly."""

HEADERS = {"Content-Type": "application/json", "Accept": "text/event-stream"}

_PROXY_VARIABLES = (
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "REQUEST_METHOD",
)


@pytest.fixture(autouse=True)
def _leaks_show_in_their_own_test() -> Iterator[None]:
    """A socket left open warns (ResourceWarning, an error here) when it is collected:
    collect now, so that the warning fails the test that leaked it, not a later one."""
    yield
    gc.collect()


@pytest.fixture(autouse=True)
def _no_proxy_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests set the proxy variables they mean; none leak in from the machine."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


# --- a tiny HTTP server ----------------------------------------------------------------


@dataclass(slots=True)
class Request:
    line: str
    headers: dict[str, str]
    body: bytes
    connection: int
    """The number of the connection it came on (0 for the first accepted)."""


@dataclass(slots=True)
class Exchange:
    """One accepted connection, as a handler sees it."""

    number: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    server: TinyServer

    async def request(self) -> Request | None:
        """The next request on this connection, or None when the client closed it."""
        head = await read_head(self.reader)
        if head is None:
            return None
        line, headers, _ = head
        body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        request = Request(line, headers, body, self.number)
        self.server.requests.append(request)
        return request

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def trickle(self, data: bytes, pause: float = 0.001) -> None:
        """Send ``data`` one byte per TCP write, with a pause after each."""
        for position in range(len(data)):
            await self.send(data[position : position + 1])
            await asyncio.sleep(pause)

    async def wait_client_closed(self) -> None:
        """Until the client closes the connection; then note it."""
        with contextlib.suppress(OSError):
            while await self.reader.read(65536):
                pass
        self.server.client_closed.append(self.number)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


Handler = Callable[[Exchange], Awaitable[None]]


async def read_head(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes] | None:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = raw.decode("latin-1").split("\r\n")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers, raw


class TinyServer:
    """Runs ``handler`` for every accepted connection; counts connections, logs requests."""

    def __init__(
        self, handler: Handler, *, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None
    ) -> None:
        self.handler = handler
        self.host = host
        self.tls = tls
        self.accepted = 0
        self.requests: list[Request] = []
        self.client_closed: list[int] = []
        self.port = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.port}/v1"

    async def __aenter__(self) -> TinyServer:
        self._server = await asyncio.start_server(self._accept, self.host, 0, ssl=self.tls)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.append(writer)
        number = self.accepted
        self.accepted += 1
        # Cancelled at the end of the test: swallowed, or asyncio logs the cancellation.
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            await self.handler(Exchange(number, reader, writer, self))
        writer.close()


def sse_body(text: str = "Hello") -> bytes:
    """A whole Chat Completions event stream answering ``text``, usage and ``[DONE]``."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    events = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    ]
    data = b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events)
    return data + b"data: [DONE]\n\n"


def chunked(body: bytes, size: int = 40, *, extensions: bool = False) -> bytes:
    """``body`` in ``chunked`` transfer coding; with chunk extensions and trailers if asked."""
    extension = b';ext=1;name="a value"' if extensions else b""
    out = b""
    for start in range(0, len(body), size):
        piece = body[start : start + size]
        out += b"%x%s\r\n%s\r\n" % (len(piece), extension, piece)
    out += b"0" + extension + b"\r\n"
    if extensions:
        out += b"X-Checksum: abc\r\nX-Other: 1\r\n"
    return out + b"\r\n"


def answer(
    body: bytes,
    framing: str = "chunked",
    *,
    status: int = 200,
    content_type: str = "text/event-stream",
) -> bytes:
    """A whole HTTP answer with ``body`` framed by ``length``, ``chunked``, ``chunked+ext``
    (extensions and trailers) or ``close`` (no length: the server closes after it)."""
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
    if framing == "length":
        head += f"Content-Length: {len(body)}\r\n"
    elif framing.startswith("chunked"):
        head += "Transfer-Encoding: chunked\r\n"
        body = chunked(body, extensions=framing == "chunked+ext")
    else:
        assert framing == "close"
        head += "Connection: close\r\n"
    return head.encode() + b"\r\n" + body


def first_event_only() -> bytes:
    """The head of a chunked event stream and its first event as one chunk; no end."""
    first = sse_body().split(b"\n\n")[0] + b"\n\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
    return head + b"\r\n" + b"%x\r\n%s\r\n" % (len(first), first)


def serve(framing: str = "chunked", text: str = "Hello") -> Handler:
    """Answers every request on a connection with an event stream in ``framing``."""

    async def handler(exchange: Exchange) -> None:
        while await exchange.request() is not None:
            await exchange.send(answer(sse_body(text), framing))
            if framing == "close":
                return

    return handler


# --- the model -------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def model_at(
    url: str, *, read_timeout: float = WAIT, first_token: float = WAIT, api_key: str = "sk-t"
) -> AsyncIterator[OpenAIChatModel]:
    chat = OpenAIChatModel(
        base_url=url,
        api_key=api_key,
        model="gpt-test",
        timeout=read_timeout,
        first_token_timeout=first_token,
        max_retries=0,
        retry_backoff=0.01,
    )
    try:
        yield chat
    finally:
        await chat.aclose()


def ask(text: str = "hi") -> ChatRequest:
    return ChatRequest([Message("m1", Role.USER, [TextPart(text)])], [])


async def run(
    chat: OpenAIChatModel, request: ChatRequest | None = None
) -> tuple[list[ChatDelta], LLMError | None]:
    """Every delta the model yields, and the LLMError it ended with (if any)."""
    deltas: list[ChatDelta] = []
    try:
        async with asyncio.timeout(WAIT):
            async for delta in chat.stream(request or ask()):
                deltas.append(delta)
    except LLMError as exc:
        return deltas, exc
    return deltas, None


def text_of(deltas: list[ChatDelta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, TextDelta))


# --- keep-alive ------------------------------------------------------------------------


async def test_two_streams_in_a_row_share_one_connection() -> None:
    async with TinyServer(serve("chunked")) as server, model_at(server.url) as chat:
        for _ in range(2):
            deltas, error = await run(chat)
            assert error is None
            assert text_of(deltas) == "Hello"

    assert server.accepted == 1
    assert [r.connection for r in server.requests] == [0, 0]


async def _serve_noting_close(exchange: Exchange) -> None:
    """Answers every request with a chunked stream; notes when the client closes."""
    while await exchange.request() is not None:
        await exchange.send(answer(sse_body(), "chunked"))
    exchange.server.client_closed.append(exchange.number)


async def _streams_at_once(client: HttpClient, url: str, count: int) -> None:
    """``count`` requests in flight together, each read to its end and given back."""
    responses = await asyncio.gather(
        *(client.post(url + "/chat/completions", HEADERS, b"{}") for _ in range(count))
    )
    for response in responses:
        assert (await response.read_all()).endswith(b"data: [DONE]\n\n")
        await response.aclose()


@contextlib.asynccontextmanager
async def _pool(**bounds: Any) -> AsyncIterator[HttpClient]:
    """An ``HttpClient`` with these pool bounds, closed after."""
    client = HttpClient(connect_timeout=WAIT, read_timeout=WAIT, **bounds)
    try:
        yield client
    finally:
        await client.aclose()


async def test_more_streams_at_once_than_the_old_bound_of_64_all_keep_their_connections() -> None:
    """Under load every run holds a connection: the default pool keeps them all for the
    next runs (with 64 kept, 16 of these 80 were closed and opened again)."""
    async with TinyServer(serve("chunked")) as server, _pool() as client:
        await _streams_at_once(client, server.url, 80)
        assert client.idle_count() == 80
        await _streams_at_once(client, server.url, 80)
    assert server.accepted == 80


async def test_the_pool_keeps_at_most_max_idle_and_closes_the_oldest() -> None:
    async with TinyServer(_serve_noting_close) as server, _pool(max_idle=3) as client:
        await _streams_at_once(client, server.url, 5)
        assert client.idle_count() == 3
        await until(lambda: len(server.client_closed) == 2)  # closed, not left open
        await _streams_at_once(client, server.url, 5)  # three reused, two new
        assert server.accepted == 7
        assert client.idle_count() == 3
    assert sorted({r.connection for r in server.requests}) == list(range(7))


async def test_no_pool_at_all_opens_a_connection_per_request() -> None:
    async with TinyServer(serve("chunked")) as server, _pool(max_idle=0) as client:
        await _streams_at_once(client, server.url, 1)
        await _streams_at_once(client, server.url, 1)
        assert client.idle_count() == 0
    assert server.accepted == 2


async def test_a_connection_idle_past_idle_timeout_is_closed_unasked() -> None:
    async with TinyServer(_serve_noting_close) as server:
        async with _pool(idle_timeout=0.1) as client:
            await _streams_at_once(client, server.url, 2)
            assert client.idle_count() == 2
            # Nobody asks for a connection: the sweep closes both all the same.
            await until(lambda: sorted(server.client_closed) == [0, 1])
            assert client.idle_count() == 0
            await _streams_at_once(client, server.url, 1)  # a new one, and it is kept
            assert server.accepted == 3
            assert client.idle_count() == 1
            sweep = client._sweep
            assert sweep is not None
        assert sweep.cancelled()  # closing the client ends its sweeps


async def test_an_expired_connection_is_not_taken_even_before_its_sweep() -> None:
    async with TinyServer(serve("chunked")) as server, _pool(idle_timeout=0.05) as client:
        await _streams_at_once(client, server.url, 1)
        await asyncio.sleep(0.06)  # the connection's idle time runs out
        await _streams_at_once(client, server.url, 1)
    assert server.accepted == 2


async def test_a_body_not_read_to_its_end_is_closed_not_reused() -> None:
    async def handler(exchange: Exchange) -> None:
        if exchange.number == 0:  # the head and the first chunk, then nothing
            await exchange.request()
            await exchange.send(first_event_only())
            await exchange.wait_client_closed()
        else:
            await serve("chunked")(exchange)

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=WAIT)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            assert response.status == 200
            body = cast(AsyncGenerator[bytes, None], response.chunks())
            assert await anext(body)
            await body.aclose()
            await response.aclose()
            await until(lambda: server.client_closed == [0])

            again = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            assert (await again.read_all()).endswith(b"data: [DONE]\n\n")
            await again.aclose()
        finally:
            await client.aclose()

    assert server.accepted == 2
    assert [r.connection for r in server.requests] == [0, 1]


async def test_a_consumer_that_stops_early_closes_the_connection() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(first_event_only())
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        stream = cast(AsyncGenerator[ChatDelta, None], chat.stream(ask()))
        async with contextlib.aclosing(stream) as deltas:
            first = await asyncio.wait_for(anext(deltas), WAIT)
        assert first == TextDelta("Hello")
        await until(lambda: server.client_closed == [0])


# --- bodies ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("framing", "connections"), [("length", 1), ("chunked+ext", 1), ("close", 2)]
)
async def test_every_body_framing_streams_and_only_delimited_ones_keep_the_connection(
    framing: str, connections: int
) -> None:
    async with TinyServer(serve(framing)) as server, model_at(server.url) as chat:
        for _ in range(2):
            deltas, error = await run(chat)
            assert error is None
            assert text_of(deltas) == "Hello"

    assert server.accepted == connections


async def test_a_chunked_body_trickled_byte_by_byte_still_parses() -> None:
    async def handler(exchange: Exchange) -> None:
        while await exchange.request() is not None:
            await exchange.trickle(answer(sse_body("Hi"), "chunked+ext"))

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        deltas, error = await run(chat)
        assert error is None
        assert text_of(deltas) == "Hi"
        deltas, error = await run(chat)  # and the connection, read to its end, is reused
        assert error is None

    assert server.accepted == 1


async def test_raw_chunks_are_the_decoded_body_without_extensions_or_trailers() -> None:
    body = sse_body("x" * 300)
    async with TinyServer(serve("chunked+ext", "x" * 300)) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=WAIT)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            assert await response.read_all() == body
            await response.aclose()
        finally:
            await client.aclose()


def token_events(*tokens: str) -> bytes:
    """One chat completion chunk event per token (no end)."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"".join(
        b"data: "
        + json.dumps({**base, "choices": [{"index": 0, "delta": {"content": token}}]}).encode()
        + b"\n\n"
        for token in tokens
    )


def one_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
async def test_tokens_that_arrive_together_are_one_delta_with_all_their_text(
    framing: str,
) -> None:
    # 300 tokens, each its own SSE event (and its own chunk), sent in one write: the model
    # reads them together and hands them on as one delta, the text whole and in order;
    # only the answer's first token leaves alone, before the rest of the read is parsed.
    tokens = [f"t{n} " for n in range(300)]
    body = token_events(*tokens) + sse_body("").split(b"\n\n", 1)[1]

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        if framing == "chunked":
            events = body.split(b"\n\n")
            data = b"".join(one_chunk(event + b"\n\n") for event in events if event)
            await exchange.send(STREAM_HEAD + data + b"0\r\n\r\n")
        else:
            await exchange.send(answer(body, framing))
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        deltas, error = await run(chat)

    assert error is None
    texts = [d for d in deltas if isinstance(d, TextDelta)]
    assert text_of(deltas) == "".join(tokens)
    assert len(texts) < 10, f"{len(texts)} deltas for tokens sent in one write"
    assert texts[0].text == tokens[0]


async def test_a_token_that_arrives_alone_leaves_at_once_without_waiting_for_more() -> None:
    # The server sends the next token only once the first came out of the model: nothing
    # is held back to be merged with what comes later.
    first_out = asyncio.Event()

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(STREAM_HEAD + one_chunk(token_events("Hel")))
        await asyncio.wait_for(first_out.wait(), WAIT)
        rest = token_events("lo") + sse_body("").split(b"\n\n", 1)[1]
        await exchange.send(one_chunk(rest) + b"0\r\n\r\n")
        await exchange.wait_client_closed()

    deltas: list[ChatDelta] = []
    async with TinyServer(handler) as server, model_at(server.url) as chat:
        async with asyncio.timeout(WAIT):
            async for delta in chat.stream(ask()):
                deltas.append(delta)
                first_out.set()

    assert [d.text for d in deltas if isinstance(d, TextDelta)] == ["Hel", "lo"]


async def test_tokens_that_arrive_one_by_one_are_read_without_a_large_buffer_each() -> None:
    # An LLM's stream is one small chunk per token. asyncio's plain protocols get a new
    # 256 KiB bytes object from every recv (13 us each, mapped and unmapped by glibc); the
    # client has the transport read into one kept buffer instead.
    go_on = asyncio.Event()
    tokens = [f"t{n} " for n in range(40)]

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(STREAM_HEAD + one_chunk(token_events("first ")))
        await asyncio.wait_for(go_on.wait(), WAIT)
        for token in tokens:
            await exchange.send(one_chunk(token_events(token)))
            await asyncio.sleep(0.002)  # each its own read
        await exchange.send(one_chunk(sse_body("").split(b"\n\n", 1)[1]) + b"0\r\n\r\n")
        await exchange.wait_client_closed()

    texts: list[str] = []
    tracemalloc.start()
    try:
        async with TinyServer(handler) as server, model_at(server.url) as chat:
            async with asyncio.timeout(WAIT):
                async for delta in chat.stream(ask()):
                    if isinstance(delta, TextDelta):
                        texts.append(delta.text)
                    if not go_on.is_set():  # the request was read: the server reads no more
                        tracemalloc.reset_peak()
                        before, _ = tracemalloc.get_traced_memory()
                        go_on.set()
                    else:
                        _, peak = tracemalloc.get_traced_memory()
                        assert peak - before < 96 * 1024, f"{peak - before} bytes at a read"
    finally:
        tracemalloc.stop()
    assert "".join(texts) == "first " + "".join(tokens)
    assert len(texts) > 10  # read one by one, or this measured nothing


async def test_tokens_read_together_with_an_invalid_event_come_out_before_the_error() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        data = token_events("a", "b") + b"data: {not json\n\n"
        await exchange.send(STREAM_HEAD + one_chunk(data))
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        deltas, error = await run(chat)

    assert text_of(deltas) == "ab"
    assert error is not None
    assert error.code == "llm_bad_stream"
    assert "invalid JSON" in error.message


@pytest.mark.parametrize(
    ("size_line", "why"),
    [
        (b"%x\r\n" % (17 * 1024 * 1024), "over the limit"),
        (b"-5\r\n", "bad chunk size"),
        (b"zz\r\n", "bad chunk size"),
    ],
)
async def test_a_chunk_too_large_or_with_a_bad_size_is_a_bad_stream_at_once(
    size_line: bytes, why: str
) -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(STREAM_HEAD + size_line)
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_bad_stream"
    assert why in error.detail


async def test_a_server_closing_right_after_the_last_chunk_gave_a_whole_body() -> None:
    body = sse_body()

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(answer(body, "chunked")[: -len(b"\r\n")])  # no final blank line
        await exchange.close()

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=WAIT)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            assert await response.read_all() == body
            await response.aclose()
        finally:
            await client.aclose()


@pytest.mark.parametrize("shape", ["one endless line", "endless data lines"])
async def test_an_llm_event_over_the_limit_is_a_bad_stream_after_the_tokens_before_it(
    monkeypatch: pytest.MonkeyPatch, shape: str
) -> None:
    monkeypatch.setattr(openai_chat, "MAX_LLM_EVENT_BYTES", 64 * 1024)
    sent_in_all = 0

    async def handler(exchange: Exchange) -> None:
        nonlocal sent_in_all
        await exchange.request()
        await exchange.send(STREAM_HEAD + one_chunk(token_events("before ")))
        piece = b"x" * 4096 if shape == "one endless line" else b"data: " + b"x" * 4090 + b"\n"
        for _ in range(25_000):  # 100 MB, unless the client stops reading
            await exchange.send(one_chunk(piece))
            sent_in_all += len(piece)

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        deltas, error = await run(chat)

    assert text_of(deltas) == "before "
    assert error is not None
    assert error.code == "llm_bad_stream"
    assert "larger than the limit" in error.message
    # It stopped reading and closed: the server sent no more than the sockets' buffers
    # took (Linux grows them up to tcp_wmem's and tcp_rmem's maximums, 4 + 32 MiB here,
    # while the client reads fast), far from the 100 MB a client reading on takes.
    assert sent_in_all < 64 * 1024 * 1024


async def test_bytes_after_a_chunked_body_keep_its_connection_from_reuse() -> None:
    async def handler(exchange: Exchange) -> None:
        while await exchange.request() is not None:
            await exchange.send(answer(sse_body(), "chunked") + b"HTTP/1.1 200 OK\r\n")

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        for _ in range(2):
            deltas, error = await run(chat)
            assert error is None
            assert text_of(deltas) == "Hello"

    assert server.accepted == 2


# --- stale connections -----------------------------------------------------------------


async def test_a_kept_alive_connection_the_server_closed_while_idle_is_replaced() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(answer(sse_body(), "chunked"))  # keep-alive, but then...
        if exchange.number == 0:
            await exchange.close()  # ...closes it while idle
        else:
            await serve("chunked")(exchange)

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        _, error = await run(chat)
        assert error is None
        await asyncio.sleep(0.05)  # the FIN reaches the client's idle connection

        deltas, error = await run(chat)

        assert error is None
        assert text_of(deltas) == "Hello"
    assert [r.connection for r in server.requests] == [0, 1]


async def test_a_kept_alive_connection_closed_as_the_request_arrives_is_retried_once() -> None:
    """The race the idle check cannot see: the server closes just as the request arrives."""

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(answer(sse_body(), "chunked"))
        if exchange.number == 0:
            await exchange.request()  # the second request: closed without an answer
            await exchange.close()
        else:
            await serve("chunked")(exchange)

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        _, error = await run(chat)
        assert error is None

        deltas, error = await run(chat)

        assert error is None
        assert text_of(deltas) == "Hello"
    assert [r.connection for r in server.requests] == [0, 0, 1]


async def test_a_fresh_connection_closed_without_an_answer_is_a_broken_stream() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.close()

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=WAIT)
        try:
            with pytest.raises(BrokenStream, match="without answering"):
                await client.post(server.url + "/chat/completions", HEADERS, b"{}")
        finally:
            await client.aclose()

        async with model_at(server.url) as chat:
            _, error = await run(chat)
    assert error is not None
    assert error.code == "llm_bad_stream"
    assert not error.retryable
    assert server.accepted == 2  # not retried on yet another connection


# --- errors as the model maps them -----------------------------------------------------


async def test_connection_refused_is_unavailable_within_the_connect_timeout() -> None:
    async with TinyServer(serve()) as server:
        url = server.url  # a port that was just free; nothing listens once closed
    started = time.monotonic()
    async with model_at(url, read_timeout=2.0) as chat:
        _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_unavailable"
    assert time.monotonic() - started < 2.0
    assert str(error) == "cannot reach the LLM endpoint"
    assert "127.0.0.1" in error.detail and "127.0.0.1" not in str(error)


@pytest.mark.parametrize(
    ("read_timeout", "first_token"), [(0.3, WAIT), (WAIT, 0.3)], ids=["read", "first-token"]
)
async def test_a_server_that_never_answers_is_a_timeout(
    read_timeout: float, first_token: float
) -> None:
    """The first-token deadline cancels the request mid-head: the socket is closed then,
    not leaked (a leak fails the test through ResourceWarning, see the gc fixture)."""

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server:
        started = time.monotonic()
        async with model_at(server.url, read_timeout=read_timeout, first_token=first_token) as chat:
            _, error = await run(chat)
        elapsed = time.monotonic() - started

    assert error is not None
    assert error.code == "llm_timeout"
    assert 0.25 < elapsed < 2.0


async def test_a_stream_that_stalls_after_its_head_is_a_timeout() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(first_event_only())
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url, read_timeout=0.3) as chat:
        deltas, error = await run(chat)

    assert text_of(deltas) == "Hello"
    assert error is not None
    assert error.code == "llm_timeout"


@pytest.mark.parametrize(
    ("garbage", "close"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", False),
        (b"HTTP/1.1 abc OK\r\n\r\n", False),
        (b"hello", True),
    ],
    ids=["not-http", "bad-status", "truncated"],
)
async def test_garbage_instead_of_a_status_line_is_a_bad_stream(
    garbage: bytes, close: bool
) -> None:
    """And the connection is closed, not leaked (see the gc fixture)."""

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(garbage)
        if close:
            await exchange.close()
        else:
            await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_bad_stream"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "llm_bad_request"),
        (401, "llm_auth"),
        (429, "llm_rate_limited"),
        (500, "llm_server_error"),
    ],
)
async def test_an_error_status_maps_to_its_code_with_the_message_in_the_detail(
    status: int, code: str
) -> None:
    secret = f"Invalid thing number {status} (org-4711)"
    error_body = json.dumps(
        {"error": {"message": secret, "type": "invalid_request_error", "code": None}}
    ).encode()

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(
            answer(error_body, "length", status=status, content_type="application/json")
        )
        await serve("chunked")(exchange)  # the error body was read whole: the same connection

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        _, error = await run(chat)
        assert error is not None
        assert error.code == code
        assert secret in error.detail
        assert secret not in str(error)
        # The provider's code and a plain cause, never a bare status.
        assert "invalid_request_error" in str(error)
        assert "answered HTTP" not in str(error)

        deltas, again = await run(chat)
        assert again is None
        assert text_of(deltas) == "Hello"
    assert server.accepted == 1


async def test_a_head_larger_than_the_limit_is_a_clear_error_not_a_hang() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server:
        started = time.monotonic()
        async with model_at(server.url) as chat:
            _, error = await run(chat)
        elapsed = time.monotonic() - started

    assert error is not None
    assert error.code == "llm_bad_stream"
    assert "too long" in error.detail
    assert elapsed < 2.0


async def test_a_chunk_size_line_larger_than_the_limit_is_a_bad_stream() -> None:
    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        await exchange.send(head + b"Transfer-Encoding: chunked\r\n\r\n" + b"1" * 200_000)
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server, model_at(server.url) as chat:
        _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_bad_stream"


# --- TLS -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Certificate:
    cert: Path
    key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> Certificate:
    """A self-signed certificate for localhost, 127.0.0.1 and 127.0.0.2."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentik test")])
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.2")),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    directory = tmp_path_factory.mktemp("tls")
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Certificate(cert_path, key_path)


@pytest.fixture
def trusted(certificate: Certificate, monkeypatch: pytest.MonkeyPatch) -> Certificate:
    """The certificate trusted through ``SSL_CERT_FILE``: ``ssl.create_default_context()``
    reads it when it is called, and each HttpClient creates its context on first use."""
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate.cert))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    return certificate


@pytest.mark.parametrize(("framing", "connections"), [("chunked", 1), ("length", 1), ("close", 2)])
async def test_a_stream_over_https_with_a_trusted_certificate(
    trusted: Certificate, framing: str, connections: int
) -> None:
    tls = trusted.server_context()
    async with TinyServer(serve(framing), tls=tls) as server, model_at(server.url) as chat:
        for _ in range(2):
            deltas, error = await run(chat)
            assert error is None
            assert text_of(deltas) == "Hello"

    assert server.accepted == connections


async def test_an_untrusted_certificate_is_unavailable_naming_the_certificate(
    certificate: Certificate, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nothing.pem"))  # trust nothing
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    tls = certificate.server_context()
    async with TinyServer(serve("chunked"), tls=tls) as server, model_at(server.url) as chat:
        _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_unavailable"
    assert "certificate" in error.detail
    assert server.requests == []


# --- proxies ---------------------------------------------------------------------------


@dataclass(slots=True)
class TinyProxy:
    """An HTTP proxy: absolute-form requests are forwarded, ``CONNECT`` opens a tunnel.
    Logs the first request line and headers of each connection (the rest is piped)."""

    refuse_with: int = 0
    accepted: int = 0
    log: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def url(self, credentials: str = "") -> str:
        return f"http://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"

    async def __aenter__(self) -> TinyProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        try:
            head = await read_head(reader)
            if head is None:
                return
            line, headers, raw = head
            self.log.append((line, headers))
            if self.refuse_with:
                writer.write(b"HTTP/1.1 %d No\r\nContent-Length: 0\r\n\r\n" % self.refuse_with)
                await writer.drain()
                return
            method, target, _ = line.split(" ", 2)
            if method == "CONNECT":
                host, _, port = target.rpartition(":")
                up_reader, up_writer = await asyncio.open_connection(host, int(port))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                parts = urlsplit(target)
                assert parts.hostname
                up_reader, up_writer = await asyncio.open_connection(
                    parts.hostname, parts.port or 80
                )
                up_writer.write(raw)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except OSError:
        pass
    finally:
        sink.close()


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


@pytest.fixture
async def proxy() -> AsyncIterator[TinyProxy]:
    async with TinyProxy() as running:
        yield running


# The origin behind a proxy listens on 127.0.0.2: still this machine, but not one of the
# loopback names (127.0.0.1, localhost, ::1) the client always reaches directly.


async def test_an_http_origin_is_requested_in_absolute_form_through_http_proxy(
    proxy: TinyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    async with (
        TinyServer(serve("chunked"), host="127.0.0.2") as origin,
        model_at(origin.url) as chat,
    ):
        for _ in range(2):
            deltas, error = await run(chat)
            assert error is None
            assert text_of(deltas) == "Hello"

    absolute = f"POST http://127.0.0.2:{origin.port}/v1/chat/completions HTTP/1.1"
    assert proxy.accepted == 1  # the connection to the proxy is kept alive too
    line, headers = proxy.log[0]
    assert line == absolute
    assert headers["host"] == f"127.0.0.2:{origin.port}"
    assert "proxy-authorization" not in headers
    assert [r.line for r in origin.requests] == [absolute, absolute]


async def test_the_proxy_url_credentials_are_sent_as_basic_auth_to_an_http_proxy(
    proxy: TinyProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url("ada:s%3Acret"))
    async with (
        TinyServer(serve("chunked"), host="127.0.0.2") as origin,
        model_at(origin.url) as chat,
    ):
        _, error = await run(chat)

    assert error is None
    _, headers = proxy.log[0]
    assert headers.get("proxy-authorization") == basic("ada:s:cret")


async def test_an_https_origin_is_tunnelled_with_connect_then_tls(
    proxy: TinyProxy, trusted: Certificate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url("ada:pw"))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # not for https
    tls = trusted.server_context()
    async with (
        TinyServer(serve("chunked"), host="127.0.0.2", tls=tls) as origin,
        model_at(origin.url) as chat,
    ):
        for _ in range(2):
            deltas, error = await run(chat)
            assert error is None
            assert text_of(deltas) == "Hello"

    assert proxy.accepted == 1
    line, headers = proxy.log[0]
    assert line == f"CONNECT 127.0.0.2:{origin.port} HTTP/1.1"
    assert headers["proxy-authorization"] == basic("ada:pw")
    # Through the tunnel, the origin sees an ordinary origin-form request over TLS.
    assert [r.line for r in origin.requests] == ["POST /v1/chat/completions HTTP/1.1"] * 2
    assert "proxy-authorization" not in origin.requests[0].headers


async def test_a_proxy_refusing_the_tunnel_is_unavailable(
    trusted: Certificate, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with TinyProxy(refuse_with=407) as proxy:
        monkeypatch.setenv("HTTPS_PROXY", proxy.url())
        async with (
            TinyServer(serve(), host="127.0.0.2", tls=trusted.server_context()) as origin,
            model_at(origin.url) as chat,
        ):
            _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_unavailable"
    assert "407" in error.detail
    assert origin.accepted == 0


async def test_an_untrusted_certificate_through_the_tunnel_is_unavailable(
    proxy: TinyProxy, certificate: Certificate, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """And the tunnel's socket is closed, not leaked (see the gc fixture)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nothing.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    monkeypatch.setenv("HTTPS_PROXY", proxy.url())
    tls = certificate.server_context()
    async with (
        TinyServer(serve(), host="127.0.0.2", tls=tls) as origin,
        model_at(origin.url) as chat,
    ):
        _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_unavailable"
    assert "certificate" in error.detail
    assert proxy.log[0][0] == f"CONNECT 127.0.0.2:{origin.port} HTTP/1.1"


async def test_a_proxy_answering_connect_with_an_endless_head_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def endless(exchange: Exchange) -> None:
        await read_head(exchange.reader)
        await exchange.send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000)
        await exchange.wait_client_closed()

    async with TinyServer(endless) as fake_proxy:
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{fake_proxy.port}")
        async with model_at("https://127.0.0.2:9/v1") as chat:
            _, error = await run(chat)

    assert error is not None
    assert error.code == "llm_unavailable"


@pytest.mark.parametrize("no_proxy", ["127.0.0.2", "example.com,127.0.0.2", "*"])
async def test_no_proxy_bypasses_the_proxy(
    proxy: TinyProxy, monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    monkeypatch.setenv("NO_PROXY", no_proxy)
    async with (
        TinyServer(serve("chunked"), host="127.0.0.2") as origin,
        model_at(origin.url) as chat,
    ):
        _, error = await run(chat)

    assert error is None
    assert proxy.accepted == 0
    assert origin.requests[0].line == "POST /v1/chat/completions HTTP/1.1"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_loopback_origins_bypass_the_proxy_without_no_proxy(
    proxy: TinyProxy, monkeypatch: pytest.MonkeyPatch, host: str
) -> None:
    """A local LLM server (Ollama, vLLM, llama.cpp on this machine) is reached directly even
    when the environment names a proxy and no NO_PROXY: a proxy elsewhere could not reach
    this machine's loopback, and on Linux ``urllib.request.proxy_bypass`` only reads
    NO_PROXY, so the client adds the loopback names itself."""
    monkeypatch.setenv("HTTP_PROXY", proxy.url())
    monkeypatch.setenv("HTTPS_PROXY", proxy.url())
    async with (
        TinyServer(serve("chunked")) as origin,
        model_at(f"http://{host}:{origin.port}/v1") as chat,
    ):
        _, error = await run(chat)

    assert error is None
    assert proxy.accepted == 0


# --- the official client ---------------------------------------------------------------


def conversation() -> tuple[list[Message], list[ToolSpec]]:
    messages = [
        Message("1", Role.SYSTEM, [TextPart("Be brief.")]),
        Message(
            "2",
            Role.USER,
            [
                TextPart("What is in these? é ✓"),
                ImagePart(url="https://example.com/cat.png"),
                ImagePart(data=b"\x89PNG\r\n", mime_type="image/png"),
            ],
        ),
        Message(
            "3",
            Role.ASSISTANT,
            [TextPart("Let me check.")],
            tool_calls=[
                ToolCall("call_1", "calculate", '{"expression": "1+1"}'),
                ToolCall("call_2", "current_time", "{}"),
            ],
        ),
        Message("4", Role.TOOL, [TextPart('{"result": 2}')], tool_call_id="call_1"),
        Message("5", Role.TOOL, [TextPart("12:00")], tool_call_id="call_2"),
        Message("6", Role.ASSISTANT, [], tool_calls=[ToolCall("call_3", "noop", "{}")]),
        Message("7", Role.TOOL, [TextPart("")], tool_call_id="call_3"),
        Message("8", Role.USER, [TextPart("Thanks")], name="ada"),
    ]
    tools = [
        ToolSpec(
            "calculate",
            "Evaluate arithmetic.",
            {"type": "object", "properties": {"expression": {"type": "string"}}},
        ),
        ToolSpec("current_time", "The time.", {}),
    ]
    return messages, tools


async def test_the_request_matches_what_the_official_openai_client_sends() -> None:
    from openai import AsyncOpenAI

    messages, tools = conversation()
    async with TinyServer(serve("chunked")) as server:
        async with model_at(server.url, api_key="sk-same") as chat:
            _, error = await run(chat, ChatRequest(messages, tools))
            assert error is None

        official = AsyncOpenAI(base_url=server.url, api_key="sk-same", max_retries=0, timeout=WAIT)
        try:
            async with asyncio.timeout(WAIT):
                stream = await official.chat.completions.create(
                    model="gpt-test",
                    messages=to_openai_messages(messages),
                    tools=to_openai_tools(tools),
                    stream=True,
                    stream_options={"include_usage": True},
                )
                async for _ in stream:
                    pass
        finally:
            await official.close()

    ours, theirs = server.requests
    assert ours.line == theirs.line == "POST /v1/chat/completions HTTP/1.1"
    assert json.loads(ours.body) == json.loads(theirs.body)
    for request in (ours, theirs):
        assert request.headers["authorization"] == "Bearer sk-same"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["host"] == f"127.0.0.1:{server.port}"


async def test_a_consumer_slower_than_the_read_timeout_is_not_cut_while_bytes_keep_coming() -> None:
    """The read timeout is the server's silence while a read waits, not the consumer's
    pause: bytes that came while it paused count."""
    pieces = [one_chunk(token_events(f"t{i} ")) for i in range(12)]

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        await exchange.send(head + b"Transfer-Encoding: chunked\r\n\r\n")
        for piece in pieces:
            await exchange.send(piece)
            await asyncio.sleep(0.05)
        await exchange.send(b"0\r\n\r\n")
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=0.3)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            got = b""
            async for piece in response.chunks():
                got += piece
                if len(got) < 200:
                    await asyncio.sleep(0.5)  # past the read timeout, the server still sending
            await response.aclose()
        finally:
            await client.aclose()
    assert got == b"".join(token_events(f"t{i} ") for i in range(12))


async def test_a_read_after_a_long_pause_waits_the_whole_read_timeout_before_failing() -> None:
    """A silent server is timed from when the read starts (or the last byte, if later)."""

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(first_event_only())
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=0.3)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            chunks = response.chunks()
            assert await anext(chunks)
            await asyncio.sleep(0.6)  # nothing comes meanwhile; no read waits
            started = time.monotonic()
            with pytest.raises(ReadTimedOut, match=r"nothing for 0\.3s"):
                await anext(chunks)
            assert time.monotonic() - started >= 0.25
            await response.aclose()
        finally:
            await client.aclose()


async def test_once_counting_progress_only_bytes_that_are_not_progress_end_no_silence() -> None:
    """An event stream's comments are bytes: they keep a body's reads alive, until the
    reader says only what it marks ``progressed`` counts (``openai_chat``: data lines)."""

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        await exchange.send(first_event_only())
        with contextlib.suppress(OSError):
            while True:
                await exchange.send(one_chunk(b": keep-alive\n\n"))
                await asyncio.sleep(0.05)

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=0.3)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            chunks = response.chunks()
            assert (await anext(chunks)).startswith(b"data: ")
            started = time.monotonic()
            async with asyncio.timeout(WAIT):
                while time.monotonic() - started < 0.6:  # twice the read timeout
                    assert await anext(chunks) == b": keep-alive\n\n"
            response.count_progress_only()
            response.progressed()  # what was read so far was
            started = time.monotonic()
            with pytest.raises(ReadTimedOut, match=r"no progress for 0\.3s"):
                async with asyncio.timeout(WAIT):
                    while True:
                        assert await anext(chunks) == b": keep-alive\n\n"
            assert time.monotonic() - started >= 0.25
            await response.aclose()
        finally:
            await client.aclose()


async def test_a_bodys_reads_share_one_timer_which_goes_with_the_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not an ``asyncio.timeout`` per read (4-5 % of the engine at 256 streams): one timer
    a body, cancelled at its end."""
    tokens = [f"t{i} " for i in range(50)]

    async def handler(exchange: Exchange) -> None:
        await exchange.request()
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        await exchange.send(head + b"Transfer-Encoding: chunked\r\n\r\n")
        for token in tokens:
            await exchange.send(one_chunk(token_events(token)))
            await asyncio.sleep(0.002)
        await exchange.send(b"0\r\n\r\n")
        await exchange.wait_client_closed()

    async with TinyServer(handler) as server:
        client = HttpClient(connect_timeout=WAIT, read_timeout=WAIT)
        try:
            response = await client.post(server.url + "/chat/completions", HEADERS, b"{}")
            timeouts: list[float | None] = []
            real = asyncio.timeout
            timers: list[float] = []
            loop = asyncio.get_running_loop()
            real_later = loop.call_later

            def counted(delay: float | None) -> asyncio.Timeout:
                timeouts.append(delay)
                return real(delay)

            def later(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
                if getattr(callback, "__name__", "") == "_check":  # the server's sleeps too
                    timers.append(delay)
                return real_later(delay, callback, *args)

            monkeypatch.setattr(asyncio, "timeout", counted)
            monkeypatch.setattr(loop, "call_later", later)
            pieces = [piece async for piece in response.chunks()]
            monkeypatch.undo()
            assert b"".join(pieces) == token_events(*tokens)
            assert len(pieces) > 10  # read in many pieces
            assert timeouts == []
            assert timers == [WAIT]
            assert response._watch is None  # cancelled with the body's end
            await response.aclose()
        finally:
            await client.aclose()
