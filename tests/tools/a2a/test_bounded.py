"""``bounded_client``: a remote agent's answer is read up to a byte limit, counted as it
arrives (per event of a stream), against the hostile agent over real sockets; a proxy from
the environment is still used."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from engine_service.tools.a2a.bounded import ResponseTooLarge, bounded_client
from tests.fakes.hostile_a2a import HostileAgent

WAIT = 15.0
LIMIT = 64 * 1024


class Counting(httpx.AsyncBaseTransport):
    """httpx's own transport, counting the body bytes it reads off the socket."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.read = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CountedBody(response.stream, self),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


class _CountedBody(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, owner: Counting) -> None:
        self.inner, self.owner = inner, owner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.owner.read += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def hostile() -> Iterator[HostileAgent]:
    with HostileAgent() as agent:
        yield agent


def _send(text: str) -> dict[str, object]:
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]}
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }


async def _read_stream(client: httpx.AsyncClient, url: str, text: str) -> int:
    """The body's length, read as the SDK reads a stream."""
    total = 0
    async with client.stream("POST", url, json=_send(text)) as response:
        async for chunk in response.aiter_bytes():
            total += len(chunk)
    return total


async def test_an_event_over_the_limit_stops_the_read_near_the_limit(
    hostile: HostileAgent,
) -> None:
    counting = Counting()
    async with bounded_client(LIMIT, transport=counting) as client:
        with pytest.raises(ResponseTooLarge) as caught:
            async with asyncio.timeout(WAIT):
                await _read_stream(client, f"{hostile.url}/", "big 10000000")

    assert caught.value.limit == LIMIT
    assert str(caught.value) == "the answer is over 65,536 bytes"
    # Read off the socket: the limit and at most one read past it, not the 10 MB sent.
    assert LIMIT < counting.read < LIMIT + 256 * 1024, counting.read


async def test_each_event_is_counted_alone_however_long_the_stream(hostile: HostileAgent) -> None:
    async with bounded_client(LIMIT) as client:
        async with asyncio.timeout(WAIT):
            total = await _read_stream(client, f"{hostile.url}/", "big-chunks 20 50000")

    assert total > 20 * 50_000  # the whole stream passed, each event under the limit


async def test_a_json_body_declared_over_the_limit_is_refused_before_it_is_read(
    hostile: HostileAgent,
) -> None:
    counting = Counting()
    async with bounded_client(LIMIT, transport=counting) as client:
        with pytest.raises(ResponseTooLarge):
            async with asyncio.timeout(WAIT):
                await client.post(f"{hostile.url}/", json=_send("rpc-error 200000"))

    assert counting.read == 0


async def test_a_compressed_answer_the_client_did_not_ask_for_is_refused() -> None:
    body = gzip.compress(json.dumps({"a": "z" * LIMIT * 4}).encode())
    asked: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with bounded_client(LIMIT) as client:
            with pytest.raises(httpx.DecodingError, match="a compressed answer"):
                async with asyncio.timeout(WAIT):
                    await client.get(f"http://127.0.0.1:{port}/")
    finally:
        server.close()
        await server.wait_closed()

    assert b"accept-encoding: identity" in asked[0].lower()


async def test_a_proxy_from_the_environment_is_used_and_its_answers_bounded(
    hostile: HostileAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy forwards to the hostile agent whatever host the request names."""
    asked: list[bytes] = []

    async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        asked.append(head)
        length = int(
            next(
                (
                    line.split(b":", 1)[1]
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                b"0",
            )
        )
        body = await reader.readexactly(length)
        line, _, rest = head.partition(b"\r\n")
        method, target, version = line.split(b" ")
        path = b"/" + target.split(b"/", 3)[3] if target.startswith(b"http") else target
        upstream_reader, upstream = await asyncio.open_connection("127.0.0.1", hostile.port)
        upstream.write(b" ".join((method, path, version)) + b"\r\n" + rest + body)
        await upstream.drain()
        try:
            while chunk := await upstream_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            upstream.close()
            writer.close()

    proxy = await asyncio.start_server(forward, "127.0.0.1", 0)
    port = proxy.sockets[0].getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        async with bounded_client(LIMIT) as client:
            with pytest.raises(ResponseTooLarge):
                async with asyncio.timeout(WAIT):
                    await _read_stream(client, "http://agent.invalid/", "big 10000000")
    finally:
        proxy.close()
        await proxy.wait_closed()

    assert asked and asked[0].startswith(b"POST http://agent.invalid/ HTTP/1.1")
    assert b"accept-encoding: identity" in asked[0].lower()
