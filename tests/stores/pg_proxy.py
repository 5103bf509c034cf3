"""A TCP proxy in front of the test PostgreSQL server that can fail like a network does.

``cut_at_commit`` arms one fault for the next ``COMMIT``: ``"before"`` drops the client's
connection as it sends ``COMMIT`` (the server never gets it: the transaction aborts);
``"after"`` lets the server commit and drops the connection before its reply reaches the
client (the write is stored, the client cannot know). ``go_away`` closes every connection
and refuses new ones, as a server that went down does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

Cut = Literal["before", "after"]

_COMMIT_QUERY = b"COMMIT\x00"
_COMMIT_DONE = b"C\x00\x00\x00\x0bCOMMIT\x00"


class PostgresProxy:
    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._url = upstream_url
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self.cut: Cut | None = None
        self.cuts = 0
        self.port = 0

    @property
    def url(self) -> str:
        """``upstream_url`` pointing at the proxy."""
        parts = urlsplit(self._url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut_at_commit(self, where: Cut) -> None:
        self.cut = where

    async def go_away(self) -> None:
        """Refuse new connections and drop every open one."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._links):
            writer.transport.abort()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_w.transport.abort()
            return
        self._links |= {client_w, server_w}
        try:
            await asyncio.gather(
                self._pump(client_r, server_w, client_w, server_w, upstream=True),
                self._pump(server_r, client_w, client_w, server_w, upstream=False),
            )
        finally:
            for writer in (client_w, server_w):
                self._links.discard(writer)
                writer.transport.abort()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_w: asyncio.StreamWriter,
        server_w: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        """Forward one direction until either side ends or a cut, then drop both."""
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                if self._cuts_here(data, upstream=upstream):
                    break  # "before": never forwarded; "after": the server has committed
                writer.write(data)
                await writer.drain()
        client_w.transport.abort()
        server_w.transport.abort()

    def _cuts_here(self, data: bytes, *, upstream: bool) -> bool:
        marker = _COMMIT_QUERY if upstream else _COMMIT_DONE
        wanted: Cut = "before" if upstream else "after"
        if self.cut == wanted and marker in data:
            self.cut = None
            self.cuts += 1
            return True
        return False


@contextlib.asynccontextmanager
async def postgres_proxy(upstream_url: str) -> AsyncIterator[PostgresProxy]:
    proxy = PostgresProxy(upstream_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.go_away()
