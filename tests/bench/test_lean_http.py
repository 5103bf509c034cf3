"""The load benches' HTTP client reads what servers send, however the bytes are cut."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable

import httpx
import pytest

from bench.lean_http import Client
from tests.fakes.fake_openai import FakeOpenAI

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

CHUNKED_BODY = b"data: one\n\n" * 3 + b"data: two\n\n"


def _chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


async def _serve(answer: Answer) -> tuple[asyncio.Server, str, list[int]]:
    """A server answering every request on a connection with ``answer``; the connections it
    accepted are counted in the list."""
    accepted = [0]

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                await answer(reader, writer)
                if writer.is_closing():
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connected, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", accepted


def _in_pieces(raw: bytes, size: int) -> Answer:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for start in range(0, len(raw), size):
            writer.write(raw[start : start + size])
            await writer.drain()
            await asyncio.sleep(0.001)

    return answer


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 16, 4096])
def test_a_chunked_body_is_read_whole_however_the_bytes_are_cut(size: int) -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + _chunked(b"data: one\n\n", b"data: one\n\ndata: one\n\n", b"data: two\n\n")
    )

    async def main() -> tuple[int, bytes, int]:
        server, url, accepted = await _serve(_in_pieces(raw, size))
        async with server, Client(5.0) as client:
            async with client.stream("POST", f"{url}/x", json={"a": 1}) as response:
                body = b"".join([piece async for piece in response.aiter_raw()])
            again = await client.post(f"{url}/x", json={})
            assert again.content == CHUNKED_BODY
            return response.status_code, body, accepted[0]

    status, body, connections = asyncio.run(main())
    assert status == 200
    assert body == CHUNKED_BODY
    assert connections == 1  # the second request went on the same connection


def test_content_length_and_read_to_close_bodies_are_read() -> None:
    sized = b'HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\n{"id": 7}'
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end"

    async def main() -> None:
        server, url, accepted = await _serve(_in_pieces(sized, 4))
        async with server, Client(5.0) as client:
            created = await client.post(f"{url}/c", json={})
            assert (created.status_code, created.json()) == (201, {"id": 7})
            assert (await client.post(f"{url}/c")).json() == {"id": 7}
            assert accepted[0] == 1

        async def close_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(closing)
            await writer.drain()
            writer.close()

        server, url, accepted = await _serve(close_after)
        async with server, Client(5.0) as client:
            assert (await client.post(f"{url}/c")).text == "until the end"
            assert (await client.post(f"{url}/c")).text == "until the end"
            assert accepted[0] == 2  # "Connection: close" is not reused

    asyncio.run(main())


def test_an_idle_connection_the_server_closed_is_replaced_once() -> None:
    sized = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

    closed = asyncio.Event()

    async def answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(sized)  # keep-alive promised, then closed while idle
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        closed.set()

    async def main() -> None:
        server, url, accepted = await _serve(answer_then_close)
        async with server, Client(5.0) as client:
            assert (await client.post(f"{url}/a")).text == "ok"
            await asyncio.wait_for(closed.wait(), 5.0)
            assert (await client.post(f"{url}/a")).text == "ok"
            assert accepted[0] == 2

    asyncio.run(main())


@pytest.mark.parametrize(
    "raw, error",
    [
        (b"SSH-2.0-nope\r\n\r\n", "not an HTTP/1.x response"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nb\r\ndata: one\n\n\r\n",
            "ended early",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "ended early"),
    ],
    ids=["not HTTP", "chunked cut", "bad chunk size", "short body"],
)
def test_a_broken_response_is_an_httpx_error_naming_it(raw: bytes, error: str) -> None:
    async def answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(raw)
        await writer.drain()
        writer.close()

    async def main() -> None:
        server, url, _ = await _serve(answer_then_close)
        async with server, Client(5.0) as client:
            with pytest.raises(httpx.HTTPError, match=error):
                await client.post(f"{url}/a")

    asyncio.run(main())


def test_a_server_that_is_not_there_is_a_connect_error() -> None:
    async def main() -> None:
        async with Client(5.0) as client:
            with pytest.raises(httpx.ConnectError, match="cannot connect"):
                await client.post("http://127.0.0.1:1/x")

    asyncio.run(main())


def test_it_reads_the_fake_llms_stream_as_httpx_does() -> None:
    content = "[[chunks:9]]"
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": content}]}

    async def main(url: str) -> bytes:
        async with (
            Client(5.0) as client,
            client.stream("POST", f"{url}/chat/completions", json=body) as response,
        ):
            assert response.status_code == 200
            return await response.aread()

    with FakeOpenAI() as fake:
        ours = asyncio.run(main(fake.base_url))
        expected = httpx.post(f"{fake.base_url}/chat/completions", json=body, timeout=5).content
        assert fake.requests == [body, body]  # the JSON body arrived as sent

    def timeless(raw: bytes) -> bytes:
        return re.sub(rb'"created": \d+', b"", raw)

    assert timeless(ours) == timeless(expected)
    assert ours.count(b'"content": "w') == 9
