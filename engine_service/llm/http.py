"""A small HTTP/1.1 client for the one request the engine makes of an LLM: a POST whose
answer streams.

Why not httpx (through the ``openai`` SDK): measured with 256 concurrent streams, reading
the LLM's chunks through httpx, httpcore and anyio took ~40 % of the engine's CPU — several
layers, a cancel scope and a timeout per read — and importing the SDK ~28 MB of memory. This
reads the socket with asyncio's streams and parses HTTP/1.1 itself: status line, headers,
``Content-Length``, ``chunked`` or close-delimited bodies. Connections are kept alive and
reused per origin: at most ``max_idle`` wait per origin (``[llm] max_idle_connections``;
the oldest is closed to make room), each for at most ``idle_timeout`` seconds (``[llm]
idle_timeout``). Under load every run holds one; a pool smaller than the runs in flight
closes and opens connections all the time (at 256 concurrent one-token runs with 64 kept,
8 % of the engine's CPU, docs/performance.md). ``https`` uses the system's trust store
(``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured); ``HTTPS_PROXY`` / ``HTTP_PROXY`` /
``NO_PROXY`` are honoured, https through a ``CONNECT`` tunnel.

Errors are three exceptions the model maps to its run error codes: :class:`ConnectFailed`
(nothing was sent), :class:`ReadTimedOut`, :class:`BrokenStream`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from urllib.parse import SplitResult, unquote, urlsplit

__all__ = [
    "IDLE_TIMEOUT",
    "MAX_IDLE",
    "BrokenStream",
    "ConnectFailed",
    "HttpClient",
    "HttpError",
    "ReadTimedOut",
    "Response",
]

_MAX_HEAD = 64 * 1024
"""Bytes a status line plus headers may take."""
_READ_SIZE = 64 * 1024
_MAX_CHUNK_LINE = 4 * 1024
"""Bytes a chunk's size line (with extensions) or a trailer line may take."""
_MAX_CHUNK = 16 * 1024 * 1024
"""Bytes one chunk of a chunked body may take (it is held whole before it is passed on)."""
MAX_IDLE = 256
"""Kept-alive connections per origin, by default (``[llm] max_idle_connections``)."""
IDLE_TIMEOUT = 30.0
"""Seconds a kept-alive connection waits for its next request, by default."""


class HttpError(Exception):
    """The exchange failed; the message says how (for the log: it may name the host)."""


class ConnectFailed(HttpError):
    """The connection (or the TLS handshake, or the proxy tunnel) could not be made."""


class ReadTimedOut(HttpError):
    """Nothing arrived for the read timeout."""


class _Stalled(Exception):
    """Set in a body's reader by its watch: nothing came for the read timeout."""


class BrokenStream(HttpError):
    """The server broke the protocol or the connection mid-answer."""


class _ReadInto(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """A stream reader's protocol that the transport reads into one buffer of its own.

    asyncio's plain protocols get a new ``bytes`` of 256 KiB from every ``recv``, which
    glibc maps and unmaps each time: 13 µs for a 250-byte chunk against 2 µs read into a
    kept buffer, and an LLM's stream is one small chunk per token (at 256 streams, 12 % of
    the engine's loop was that one ``recv`` line).

    One buffer serves every connection of a thread: the transport reads into it and hands
    it over at once (``buffer_updated``), and the reader copies what it is given."""

    _buffers = threading.local()

    def get_buffer(self, sizehint: int) -> memoryview:
        buffer: memoryview | None = getattr(self._buffers, "one", None)
        if buffer is None:
            buffer = self._buffers.one = memoryview(bytearray(_READ_SIZE))
        return buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self._buffers.one[:nbytes])


async def _open(
    host: str, port: int, tls: ssl.SSLContext | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """:func:`asyncio.open_connection`, read through :class:`_ReadInto`."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_MAX_HEAD, loop=loop)
    transport, protocol = await loop.create_connection(
        lambda: _ReadInto(reader), host, port, ssl=tls
    )
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int


@dataclass(slots=True)
class _Connection:
    origin: _Origin
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    via_proxy: bool = False
    """A plain-http request through a proxy: the request line holds the absolute URL."""
    proxy_authorization: str = ""
    """The ``Proxy-Authorization`` value each request through that proxy carries."""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass(slots=True)
class Response:
    """An answer whose head was read; ``chunks`` streams the body."""

    status: int
    headers: dict[str, str]
    _connection: _Connection
    _client: HttpClient
    _read_timeout: float
    _done: bool = False
    _closed: bool = False
    _reusable: bool = field(default=False)
    _waiting: bool = False
    """A read waits for the connection."""
    _quiet_since: float = 0.0
    """When the silence the read timeout measures began (``time.monotonic``): the start of
    each read, or, once :meth:`count_progress_only`, of the first read after the last
    :meth:`progressed`."""
    _restart: bool = True
    """The next read starts a new silence (every read does, unless ``_by_progress``)."""
    _by_progress: bool = False
    _watch: asyncio.TimerHandle | None = None
    """One timer for the body's reads (``_check``), not a timeout per read: a token's read
    with an ``asyncio.timeout`` of its own cost 4-5 % of the engine's GIL time at 256
    streams."""

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, as it arrives (de-chunked). Ends at the body's end."""
        if self._done:
            return
        reader = self._connection.reader
        encoding = self.headers.get("transfer-encoding", "").lower()
        length_text = self.headers.get("content-length")
        if "chunked" in encoding:
            async for piece in self._chunked(reader):
                yield piece
        elif length_text is not None:
            try:
                remaining = int(length_text)
            except ValueError:
                raise BrokenStream(f"bad Content-Length {length_text!r}") from None
            while remaining > 0:
                piece = await self._read(reader.read(min(remaining, _READ_SIZE)))
                if not piece:
                    raise BrokenStream("the connection closed before the body's end")
                remaining -= len(piece)
                yield piece
            self._reusable = self._keep_alive()
        else:  # the body ends when the server closes the connection
            while piece := await self._read(reader.read(_READ_SIZE)):
                yield piece
        self._done = True
        self._unwatch()

    async def _chunked(self, reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
        # One piece per socket read, holding every chunk that read completed: an LLM that
        # sends faster than the engine handles it is then read in a few large pieces (one
        # wake-up and one timeout each) instead of one per token. Nothing waits for more.
        buffer = bytearray()
        while True:
            parts, last = _take_chunks(buffer)
            if parts:
                yield parts[0] if len(parts) == 1 else b"".join(parts)
            if last:
                break
            buffer += await self._more(reader)
        while True:  # trailers, up to an empty line
            eol = buffer.find(b"\n")
            if eol < 0:
                if len(buffer) > _MAX_CHUNK_LINE:
                    raise BrokenStream("the chunked body's trailers are too long")
                piece = await self._read(reader.read(_READ_SIZE))
                if not piece:
                    return  # closed after the last chunk: the body is whole, not reusable
                buffer += piece
                continue
            line = bytes(buffer[:eol])
            del buffer[: eol + 1]
            if not line.strip():
                break
        # Bytes after the body were not asked for: do not reuse a connection that has them.
        self._reusable = self._keep_alive() and not buffer

    async def _more(self, reader: asyncio.StreamReader) -> bytes:
        piece = await self._read(reader.read(_READ_SIZE))
        if not piece:
            raise BrokenStream("the connection closed inside a chunked body")
        return piece

    def count_progress_only(self) -> None:
        """From now on only :meth:`progressed` ends a silence, not any byte: an event
        stream's comments (``: keep-alive``) are bytes, but no progress of the answer."""
        self._by_progress = True

    def progressed(self) -> None:
        """What was read is progress: the silence starts again with the next read."""
        self._restart = True

    async def _read(self, awaitable: Awaitable[bytes]) -> bytes:
        """``awaitable`` (a read of the connection), failed with ``ReadTimedOut`` once
        the silence it ends lasted the read timeout (``_check``)."""
        started = 0.0
        if self._restart:
            self._quiet_since = started = time.monotonic()
            self._restart = not self._by_progress
        self._waiting = True
        if self._watch is None:
            left = self._read_timeout
            if not started:  # a silence that began at an earlier read goes on
                left += self._quiet_since - time.monotonic()
            self._watch = asyncio.get_running_loop().call_later(left, self._check)
        try:
            data = await awaitable
        except _Stalled:
            what = "no progress" if self._by_progress else "nothing"
            raise ReadTimedOut(f"{what} for {self._read_timeout:g}s") from None
        except asyncio.IncompleteReadError:
            raise
        except (OSError, asyncio.LimitOverrunError, ValueError) as exc:
            raise BrokenStream(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._waiting = False
        return data

    def _check(self) -> None:
        """The body's watch: when the silence of the read waiting has lasted the read
        timeout, fail it (its reader raises ``_Stalled``; a read returns as soon as any
        byte comes, so it waited that long for nothing, or for no progress); else look
        again when it could have. Without a read waiting it stops (the next read starts
        it)."""
        self._watch = None
        if not self._waiting or self._closed:
            return
        left = self._quiet_since + self._read_timeout - time.monotonic()
        if left > 0:
            self._watch = asyncio.get_running_loop().call_later(left, self._check)
            return
        self._connection.reader.set_exception(_Stalled())

    def _unwatch(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def read_all(self, limit: int = 1024 * 1024) -> bytes:
        """The whole body, up to ``limit`` bytes (an error answer's JSON)."""
        parts: list[bytes] = []
        size = 0
        async for piece in self.chunks():
            parts.append(piece)
            size += len(piece)
            if size > limit:
                break
        return b"".join(parts)

    def _keep_alive(self) -> bool:
        return self.headers.get("connection", "").lower() != "close"

    async def aclose(self) -> None:
        """Give the connection back for reuse when the body was read whole, else close it."""
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        if self._done and self._reusable:
            self._client._release(self._connection)
        else:
            self._connection.close()


class HttpClient:
    """Keep-alive HTTP/1.1 connections, per origin, for streamed POSTs (and the probe's GET)."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        read_timeout: float,
        max_idle: int = MAX_IDLE,
        idle_timeout: float = IDLE_TIMEOUT,
    ) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self.idle_timeout = idle_timeout
        self._idle: dict[_Origin, deque[tuple[float, _Connection]]] = {}
        """Per origin, the idle connections with when each was given back, oldest first."""
        self._sweep: asyncio.TimerHandle | None = None
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> Response:
        """Send the request and read the answer's head. A kept-alive connection the server
        closed meanwhile is replaced once (the request had not reached it)."""
        return await self.request("POST", url, headers, body)

    async def get(self, url: str, headers: dict[str, str]) -> Response:
        """A GET (the LLM probe's ``/models``), as :meth:`post` without a body."""
        return await self.request("GET", url, headers, None)

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> Response:
        """Send ``method`` to ``url`` and read the answer's head (see :meth:`post`)."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConnectFailed(f"not an http(s) URL: {url!r}")
        origin = _Origin(
            parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
        )
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        reused = self._take(origin)
        if reused is not None:
            try:
                return await self._exchange(reused, method, url, target, headers, body)
            except _StaleConnection:
                pass
        connection = await self._connect(origin)
        try:
            return await self._exchange(connection, method, url, target, headers, body)
        except _StaleConnection as exc:
            raise BrokenStream("the server closed the connection without answering") from exc

    async def _exchange(
        self,
        connection: _Connection,
        method: str,
        url: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
    ) -> Response:
        origin = connection.origin
        default_port = 443 if origin.scheme == "https" else 80
        host = origin.host if ":" not in origin.host else f"[{origin.host}]"
        host_header = host if origin.port == default_port else f"{host}:{origin.port}"
        request_line = f"{method} {url if connection.via_proxy else target} HTTP/1.1"
        lines = [request_line, f"Host: {host_header}"]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        if connection.proxy_authorization:
            lines.append(f"Proxy-Authorization: {connection.proxy_authorization}")
        lines += [f"{name}: {value}" for name, value in headers.items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            connection.writer.write(head + (body or b""))
            async with asyncio.timeout(self.read_timeout):
                await connection.writer.drain()
                raw = await connection.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            connection.close()
            if not exc.partial:
                raise _StaleConnection from exc
            raise BrokenStream("the connection closed inside the answer's head") from exc
        except (ConnectionResetError, BrokenPipeError) as exc:
            connection.close()
            raise _StaleConnection from exc
        except TimeoutError:
            connection.close()
            raise ReadTimedOut(f"no answer for {self.read_timeout:g}s") from None
        except asyncio.LimitOverrunError as exc:
            connection.close()
            raise BrokenStream("the answer's head is too long") from exc
        except OSError as exc:
            connection.close()
            raise BrokenStream(f"{type(exc).__name__}: {exc}") from exc
        except BaseException:  # cancelled (an interrupt, the first-token deadline): unread
            connection.close()
            raise
        try:
            status, response_headers = _parse_head(raw)
        except BrokenStream:
            connection.close()
            raise
        return Response(status, response_headers, connection, self, self.read_timeout)

    def _take(self, origin: _Origin) -> _Connection | None:
        """The connection given back last (its socket the likeliest still open), unless it
        waited past ``idle_timeout`` (then so did every other)."""
        idle = self._idle.get(origin)
        if not idle:
            return None
        self._expire(idle, time.monotonic())
        while idle:
            _, connection = idle.pop()
            if not connection.reader.at_eof() and not connection.writer.is_closing():
                return connection
            connection.close()
        return None

    def _release(self, connection: _Connection) -> None:
        if self._closed or self.max_idle <= 0:
            connection.close()
            return
        idle = self._idle.setdefault(connection.origin, deque())
        now = time.monotonic()
        self._expire(idle, now)
        if len(idle) >= self.max_idle:
            idle.popleft()[1].close()
        idle.append((now, connection))
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self.idle_timeout, self._swept)

    def _expire(self, idle: deque[tuple[float, _Connection]], now: float) -> None:
        """Close the connections that waited longer than ``idle_timeout``."""
        while idle and now - idle[0][0] >= self.idle_timeout:
            idle.popleft()[1].close()

    def _swept(self) -> None:
        """Close what expired while nobody asked; again later while any wait."""
        self._sweep = None
        now = time.monotonic()
        for origin, idle in list(self._idle.items()):
            self._expire(idle, now)
            if not idle:
                del self._idle[origin]
        if self._idle and not self._closed:
            oldest = min(idle[0][0] for idle in self._idle.values())
            delay = max(0.0, oldest + self.idle_timeout - now)
            self._sweep = asyncio.get_running_loop().call_later(delay, self._swept)

    def idle_count(self) -> int:
        """Connections waiting for a request, every origin together."""
        return sum(len(idle) for idle in self._idle.values())

    async def _connect(self, origin: _Origin) -> _Connection:
        proxy = _proxy_for(origin)
        try:
            async with asyncio.timeout(self.connect_timeout):
                if proxy is None:
                    reader, writer = await _open(
                        origin.host,
                        origin.port,
                        self._context() if origin.scheme == "https" else None,
                    )
                    return _Connection(origin, reader, writer)
                return await self._through(proxy, origin)
        except TimeoutError:
            raise ConnectFailed(f"connecting took over {self.connect_timeout:g}s") from None
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc

    async def _through(self, proxy: str, origin: _Origin) -> _Connection:
        """A connection to ``origin`` through an HTTP proxy (CONNECT for https)."""
        parts = urlsplit(proxy)
        if not parts.hostname:
            raise ConnectFailed(f"cannot read the proxy URL {proxy!r}")
        reader, writer = await _open(parts.hostname, parts.port or 80)
        try:
            return await self._tunnel(parts, origin, reader, writer)
        except BaseException:
            writer.close()
            raise

    async def _tunnel(
        self,
        parts: SplitResult,
        origin: _Origin,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> _Connection:
        authorization = ""
        if parts.username:
            secret = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            authorization = "Basic " + base64.b64encode(secret.encode()).decode()
        if origin.scheme == "http":
            return _Connection(
                origin, reader, writer, via_proxy=True, proxy_authorization=authorization
            )
        try:
            authorization_line = (
                f"Proxy-Authorization: {authorization}\r\n" if authorization else ""
            )
            writer.write(
                f"CONNECT {origin.host}:{origin.port} HTTP/1.1\r\n"
                f"Host: {origin.host}:{origin.port}\r\n{authorization_line}\r\n".encode("latin-1")
            )
            await writer.drain()
            try:
                status, _ = _parse_head(await reader.readuntil(b"\r\n\r\n"))
            except (asyncio.IncompleteReadError, BrokenStream) as exc:
                raise ConnectFailed("the proxy closed the tunnel") from exc
            except asyncio.LimitOverrunError as exc:
                raise ConnectFailed("the proxy's answer to CONNECT is too long") from exc
            if status != 200:
                raise ConnectFailed(f"the proxy refused the tunnel with HTTP {status}")
            await writer.start_tls(self._context(), server_hostname=origin.host)
        except BaseException:  # failed or cancelled: the socket is not left open
            writer.close()
            raise
        return _Connection(origin, reader, writer)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def aclose(self) -> None:
        """Close the idle connections; later releases close theirs."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            for _, connection in idle:
                connection.close()
        self._idle.clear()


class _StaleConnection(Exception):
    """A kept-alive connection turned out closed before any answer: retry on a fresh one."""


def _parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
        raise BrokenStream(f"not an HTTP/1.x answer: {lines[0][:60]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise BrokenStream(f"bad status line {lines[0][:60]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BrokenStream(f"bad header line {line[:60]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return status, headers


def _proxy_for(origin: _Origin) -> str | None:
    """The proxy URL the environment names for ``origin``, or None."""
    if not any(name.lower().endswith("_proxy") for name in os.environ):
        return None  # the common case, without loading urllib.request (2 MiB of imports)
    import urllib.request

    proxies = urllib.request.getproxies()
    proxy = proxies.get(origin.scheme) or proxies.get("all")
    if not proxy:
        return None
    host = origin.host if origin.port in (80, 443) else f"{origin.host}:{origin.port}"
    if urllib.request.proxy_bypass(host) or origin.host in ("127.0.0.1", "localhost", "::1"):
        return None
    return proxy


def _take_chunks(buffer: bytearray) -> tuple[list[bytes], bool]:
    """The data of the complete chunks at the start of ``buffer``, taken out of it, and
    whether the last (empty) chunk's size line was taken too."""
    parts: list[bytes] = []
    pos = 0
    try:
        while True:
            eol = buffer.find(b"\n", pos)
            if eol < 0:
                if len(buffer) - pos > _MAX_CHUNK_LINE:
                    raise BrokenStream("a chunk size line is too long")
                return parts, False
            size_text = bytes(buffer[pos:eol]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                size = -1
            if size < 0:
                raise BrokenStream(f"bad chunk size {size_text[:20]!r}")
            if size > _MAX_CHUNK:
                raise BrokenStream(f"a chunk of {size} bytes, over the limit of {_MAX_CHUNK}")
            if size == 0:
                pos = eol + 1
                return parts, True
            start = eol + 1
            if len(buffer) < start + size + 2:
                return parts, False
            parts.append(bytes(buffer[start : start + size]))
            pos = start + size + 2  # the chunk's CRLF
    finally:
        del buffer[:pos]
