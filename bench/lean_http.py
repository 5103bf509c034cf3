"""The load benches' HTTP client: HTTP/1.1 over asyncio streams, keep-alive, nothing else.

The load benches run their clients in one process on the two cores the servers they measure
use, in a closed loop: every millisecond of the client's CPU per run is taken from the
servers and lengthens every target's cycle. ``httpx`` read a 50-chunk stream for about
80 µs a chunk (4.2 ms of client CPU per run of the floor at 256 clients); this client takes
each socket read's bytes as they come, decodes the chunked framing from one buffer and
hands the body on, for a fraction of that. It speaks only what the benches send: requests
with a JSON body (or none), answered with a ``Content-Length``, chunked, or read-to-close
body; redirects, cookies, compression, proxies and TLS are not its business.

Its surface is the part of ``httpx.AsyncClient`` the drivers use: ``post()`` (the body read),
``stream()`` (``status_code``, ``aread()``, ``aiter_raw()``), ``aclose()``, and errors that are
``httpx.HTTPError``s, so the drivers catch what they caught before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json as jsonlib
from collections import deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

__all__ = ["HEAD_BYTES", "Client", "Response"]

HEAD_BYTES = 64 * 1024
"""The longest response head read."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Response:
    """One response: its status and headers read, its body read as it is asked for."""

    def __init__(self, connection: _Connection, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers
        self._connection = connection
        self._content: bytes | None = None
        self.complete = False
        """The whole body was read (the connection can serve the next request)."""
        length = headers.get("content-length")
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._length = int(length) if length is not None and not self._chunked else -1
        self.reusable = headers.get("connection", "").lower() != "close" and (
            self._chunked or self._length >= 0
        )

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive, the chunked framing taken off."""
        reader = self._connection.reader
        try:
            if self._chunked:
                async for piece in self._dechunked(reader):
                    yield piece
            elif self._length >= 0:
                left = self._length
                while left:
                    piece = await reader.read(min(left, 65536))
                    if not piece:
                        raise httpx.RemoteProtocolError("the body ended early")
                    left -= len(piece)
                    yield piece
            else:
                while piece := await reader.read(65536):
                    yield piece
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            raise httpx.ReadError(f"the connection failed: {exc!r}") from exc
        self.complete = True

    async def _dechunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        buffer = b""
        left = 0  # bytes of the current chunk's data still to come, then its CRLF
        while True:
            data = await reader.read(65536)
            if not data:
                raise httpx.RemoteProtocolError("the chunked body ended early")
            buffer += data
            out: list[bytes] = []
            while buffer:
                if left:
                    take = min(left, len(buffer))
                    out.append(buffer[:take])
                    buffer = buffer[take:]
                    left -= take
                    continue
                if buffer.startswith(b"\r\n"):  # the CRLF after a chunk's data
                    buffer = buffer[2:]
                    continue
                end = buffer.find(b"\r\n")
                if end < 0:
                    if len(buffer) > 1024:
                        raise httpx.RemoteProtocolError("a chunk size line is too long")
                    break
                try:
                    size = int(buffer[:end].split(b";", 1)[0], 16)
                except ValueError as exc:
                    raise httpx.RemoteProtocolError(f"a bad chunk size: {buffer[:end]!r}") from exc
                if size == 0:
                    rest = buffer[end + 2 :]
                    while not rest.endswith(b"\r\n"):  # no trailers sent to the benches
                        more = await reader.read(1024)
                        if not more:
                            break
                        rest += more
                    if out:
                        yield b"".join(out)
                    return
                buffer = buffer[end + 2 :]
                left = size
            if out:
                yield b"".join(out)

    async def aread(self) -> bytes:
        if self._content is None:
            self._content = b"".join([piece async for piece in self.aiter_raw()])
        return self._content

    @property
    def content(self) -> bytes:
        if self._content is None:
            raise httpx.ResponseNotRead()
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)


class Client:
    """Up to ``connections`` keep-alive connections to the hosts it is asked for."""

    def __init__(self, timeout: float, connections: int = 2) -> None:
        self._timeout = timeout
        self._slots = asyncio.Semaphore(connections)
        self._idle: dict[tuple[str, int], deque[_Connection]] = {}
        self._closed = False

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.popleft().close()

    async def post(
        self, url: str, json: Any = None, headers: dict[str, str] | None = None
    ) -> Response:
        async with self.stream("POST", url, json=json, headers=headers) as response:
            await response.aread()
            return response

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> AsyncIterator[Response]:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise httpx.UnsupportedProtocol(f"only http:// URLs: {url}")
        key = (parts.hostname, parts.port or 80)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        body = b"" if json is None else jsonlib.dumps(json).encode()
        head = [f"{method} {target} HTTP/1.1", f"Host: {parts.netloc}", "Accept: */*"]
        if json is not None:
            head.append("Content-Type: application/json")
        if json is not None or method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(body)}")
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        async with self._slots:
            connection, response = await self._exchange(key, request)
            try:
                yield response
            finally:
                if response.complete and response.reusable and not self._closed:
                    self._idle.setdefault(key, deque()).append(connection)
                else:
                    connection.close()

    async def _exchange(self, key: tuple[str, int], request: bytes) -> tuple[_Connection, Response]:
        """Send the request on an idle connection (once more on a new one if that had been
        closed by the server meanwhile) and read the response's head."""
        idle = self._idle.get(key)
        while True:
            fresh = not idle
            connection = idle.popleft() if idle else await self._connect(key)
            try:
                connection.writer.write(request)
                return connection, await asyncio.wait_for(self._head(connection), self._timeout)
            except (ConnectionError, asyncio.IncompleteReadError, httpx.RemoteProtocolError) as exc:
                connection.close()
                if fresh:
                    raise httpx.ReadError(f"no response: {exc!r}") from exc
            except BaseException:
                connection.close()
                raise

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(*key, limit=HEAD_BYTES), self._timeout
            )
        except (OSError, TimeoutError) as exc:
            raise httpx.ConnectError(f"cannot connect to {key[0]}:{key[1]}: {exc!r}") from exc
        return _Connection(reader, writer)

    async def _head(self, connection: _Connection) -> Response:
        try:
            raw = await connection.reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError as exc:
            raise httpx.RemoteProtocolError("the response head is too long") from exc
        except asyncio.IncompleteReadError as exc:
            raise httpx.RemoteProtocolError("the server closed without a response") from exc
        lines = raw.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
            raise httpx.RemoteProtocolError(f"not an HTTP/1.x response: {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return Response(connection, int(status_line[1]), headers)
