"""How agentik reaches one configured MCP server: stdio, streamable HTTP or SSE.

``open_transport`` gives the MCP ``Client`` the streams of a transport built only from
the server's config entry. Additions to the SDK's transports:

- stdio is our own (:mod:`engine_service.tools.mcp.stdio`): stdout lines are bounded by
  ``max_message_bytes``, and stderr is handed over line by line (the source logs it on the
  server's own logger; it never reaches the engine's terminal);
- over HTTP, an answer that is not an event stream (a JSON body, an error body) is read
  only up to ``max_message_bytes``, and so is each event of a stream;
- the read stream tells its owner when it ends, and why, so a dead server is noticed at
  once even when no call is in flight.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from agentik.config import McpServerConfig
from engine_service.tools.mcp.stdio import stdio_transport

if TYPE_CHECKING:
    # The SDK re-exports ``Transport`` but not the stream types it is made of.
    from mcp.client._transport import ReadStream, TransportStreams

__all__ = ["STREAM_READ_TIMEOUT", "AnswerTooLarge", "open_transport"]

STREAM_READ_TIMEOUT = 300.0
"""The least silence allowed on an HTTP event stream, in seconds (servers send
keep-alives sooner)."""
SERVER_CLOSED = "the server closed the connection"

log = logging.getLogger(__name__)


class AnswerTooLarge(httpx2.StreamError):
    """An HTTP answer over the server's ``max_message_bytes``.

    A ``StreamError`` because that is what the SDK turns into an error answer to the one
    request (``PARSE_ERROR``) instead of breaking the connection.
    """


@contextlib.asynccontextmanager
async def open_transport(
    config: McpServerConfig,
    read_timeout: float,
    on_stderr: Callable[[str], None],
    on_end: Callable[[str], None],
) -> AsyncIterator[TransportStreams]:
    """The transport streams for ``config``.

    ``read_timeout`` bounds the silence on an HTTP stream; ``on_stderr`` gets each line a
    stdio server writes to its stderr; ``on_end`` is told why when the read side ends.
    """
    streams: contextlib.AbstractAsyncContextManager[TransportStreams]
    async with contextlib.AsyncExitStack() as stack:
        if config.transport == "stdio":
            streams = stdio_transport(config, on_stderr, on_end)
        elif config.transport == "http":
            client = _http_client(
                config, config.headers, httpx2.Timeout(config.connect_timeout, read=read_timeout)
            )
            await stack.enter_async_context(client)
            streams = streamable_http_client(
                config.url, http_client=client, max_sse_event_size=config.max_message_bytes
            )
        else:
            # The SDK's SSE transport bounds each event at 1 MiB (not configurable).
            streams = sse_client(
                config.url,
                headers=config.headers or None,
                timeout=config.connect_timeout,
                sse_read_timeout=read_timeout,
                httpx_client_factory=lambda headers=None, timeout=None, auth=None: _http_client(
                    config, headers, timeout, auth
                ),
            )
        read, write = await stack.enter_async_context(streams)
        yield _WatchedReadStream(read, on_end), write


def _http_client(
    config: McpServerConfig,
    headers: dict[str, str] | None,
    timeout: httpx2.Timeout | None,
    auth: httpx2.Auth | None = None,
) -> httpx2.AsyncClient:
    """An HTTP client whose answers are bounded by the server's ``max_message_bytes``.

    Redirects stay off: the SDK follows only those within the configured origin. Hooks,
    not a transport, so that a proxy from the environment is bounded too.
    """
    bound = _BodyBound(config.name, config.max_message_bytes)
    return httpx2.AsyncClient(
        headers=headers,
        timeout=timeout if timeout is not None else httpx2.Timeout(config.connect_timeout),
        auth=auth,
        event_hooks={"request": [bound.on_request], "response": [bound.on_response]},
    )


class _BodyBound:
    """Bounds each HTTP answer of one server that is not an event stream.

    Answers are asked for unencoded, and an encoded one is refused: counting compressed
    bytes would let a small gzip body grow past the limit once decoded. Event streams are
    left to the SDK's per-event limit (``max_sse_event_size``): they are long-lived.
    """

    def __init__(self, server: str, limit: int) -> None:
        self.server = server
        self.limit = limit

    async def on_request(self, request: httpx2.Request) -> None:
        request.headers["Accept-Encoding"] = "identity"

    async def on_response(self, response: httpx2.Response) -> None:
        headers = response.headers
        if headers.get("content-type", "").lower().startswith("text/event-stream"):
            return
        why = ""
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            why = f"the server sent an answer encoded as {encoding!r}, though asked for none"
        elif (
            headers.get("content-length", "0").isdigit()
            and int(headers["content-length"]) > self.limit
        ):
            why = self.reason
        inner = response.stream
        assert isinstance(inner, httpx2.AsyncByteStream)
        response.stream = _BoundedStream(inner, self, why)

    @property
    def reason(self) -> str:
        return f"the server sent an answer over {self.limit} bytes (max_message_bytes)"

    def refuse(self, why: str) -> AnswerTooLarge:
        log.warning("MCP server %r: %s; the answer is refused", self.server, why)
        return AnswerTooLarge(why)


class _BoundedStream(httpx2.AsyncByteStream):
    """A response body that raises AnswerTooLarge past the limit (or at once, with ``why``)."""

    def __init__(self, inner: httpx2.AsyncByteStream, bound: _BodyBound, why: str) -> None:
        self._inner = inner
        self._bound = bound
        self._why = why

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._why:
            raise self._bound.refuse(self._why)
        count = 0
        async for chunk in self._inner:
            count += len(chunk)
            if count > self._bound.limit:
                raise self._bound.refuse(self._bound.reason)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _WatchedReadStream:
    """A transport's read stream that reports its end (EOF or closed) once."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[str], None]
    ) -> None:
        self._inner = inner
        self._on_end: Callable[[str], None] | None = on_end

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, where the SDK's stream keeps one."""
        return getattr(self._inner, "last_context", None)

    def _ended(self) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end(SERVER_CLOSED)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._ended()
            raise

    async def __aenter__(self) -> _WatchedReadStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()
