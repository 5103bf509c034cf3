"""How agentik reaches one configured MCP server: stdio, streamable HTTP or SSE.

``open_transport`` gives the MCP ``Client`` the streams of a transport built only from
the server's config entry. Two additions to the SDK's transports:

- a stdio server's stderr is read through a pipe and handed over line by line (the
  source logs it on the server's own logger; it never reaches the engine's terminal);
- the read stream tells its owner when it ends, so a dead server is noticed at once
  even when no call is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from agentik.config import McpServerConfig

if TYPE_CHECKING:
    # The SDK re-exports ``Transport`` but not the stream types it is made of.
    from mcp.client._transport import ReadStream, TransportStreams

__all__ = ["STREAM_READ_TIMEOUT", "open_transport"]

STREAM_READ_TIMEOUT = 300.0
"""The least silence allowed on an HTTP event stream, in seconds (servers send
keep-alives sooner)."""
_MAX_LINE = 16 * 1024
"""A stderr line longer than this is logged in pieces."""


@contextlib.asynccontextmanager
async def open_transport(
    config: McpServerConfig,
    read_timeout: float,
    on_stderr: Callable[[str], None],
    on_end: Callable[[], None],
) -> AsyncIterator[TransportStreams]:
    """The transport streams for ``config``.

    ``read_timeout`` bounds the silence on an HTTP stream; ``on_stderr`` gets each line a
    stdio server writes to its stderr; ``on_end`` is called when the read side ends.
    """
    streams: contextlib.AbstractAsyncContextManager[TransportStreams]
    async with contextlib.AsyncExitStack() as stack:
        if config.transport == "stdio":
            streams = _stdio(config, on_stderr)
        elif config.transport == "http":
            # Redirects stay off: the SDK follows only those within the configured origin.
            client = httpx2.AsyncClient(
                headers=config.headers,
                timeout=httpx2.Timeout(config.connect_timeout, read=read_timeout),
            )
            await stack.enter_async_context(client)
            streams = streamable_http_client(config.url, http_client=client)
        else:
            streams = sse_client(
                config.url,
                headers=config.headers or None,
                timeout=config.connect_timeout,
                sse_read_timeout=read_timeout,
            )
        read, write = await stack.enter_async_context(streams)
        yield _WatchedReadStream(read, on_end), write


@contextlib.asynccontextmanager
async def _stdio(
    config: McpServerConfig, on_stderr: Callable[[str], None]
) -> AsyncIterator[TransportStreams]:
    parameters = StdioServerParameters(
        command=config.command, args=list(config.args), env=_child_env(config), cwd=config.cwd
    )
    stderr = _StderrLines(on_stderr)
    try:
        async with stdio_client(parameters, errlog=stderr.child_end) as streams:
            stderr.release_child_end()
            yield streams
    finally:
        stderr.close()


def _child_env(config: McpServerConfig) -> dict[str, str]:
    """The server's environment: its configured variables, and — unless it sets PATH — a
    PATH that ends with this Python's own ``bin`` directory, so servers installed beside
    agentik (``pip install mcp-server-time`` into its virtualenv) are found when agentik runs
    without the virtualenv activated (``make run``)."""
    env = dict(config.env)
    if "PATH" not in env:
        here = os.path.dirname(sys.executable)
        path = os.environ.get("PATH", os.defpath)
        if here not in path.split(os.pathsep):
            env["PATH"] = f"{path}{os.pathsep}{here}" if path else here
    return env


class _StderrLines:
    """A pipe whose write end becomes a child's stderr; each line read back is handed on.

    Read with the event loop's reader callbacks, so it needs no thread (POSIX).
    """

    def __init__(self, on_line: Callable[[str], None]) -> None:
        self._on_line = on_line
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self._fd: int | None = read_fd
        self.child_end = os.fdopen(write_fd, "w", encoding="utf-8")
        self._buffer = b""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(read_fd, self._read)

    def release_child_end(self) -> None:
        """Close our copy of the write end: the child holds its own, so EOF means it exited."""
        if not self.child_end.closed:
            self.child_end.close()

    def close(self) -> None:
        """Log what is left in the pipe and stop reading."""
        self.release_child_end()
        if self._fd is None:
            return
        while self._fd is not None and self._read():
            pass
        self._stop()

    def _read(self) -> bool:
        """Read one chunk; False when nothing more is ready now."""
        assert self._fd is not None
        try:
            chunk = os.read(self._fd, 65536)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self._stop()
            return False
        lines = (self._buffer + chunk).split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > _MAX_LINE:
            lines.append(self._buffer)
            self._buffer = b""
        for line in lines:
            self._emit(line)
        return True

    def _emit(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            self._on_line(text)

    def _stop(self) -> None:
        if self._fd is None:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = None
        if self._buffer:
            self._emit(self._buffer)
            self._buffer = b""


class _WatchedReadStream:
    """A transport's read stream that reports its end (EOF or closed) once."""

    def __init__(
        self, inner: ReadStream[SessionMessage | Exception], on_end: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._on_end: Callable[[], None] | None = on_end

    @property
    def last_context(self) -> Any:
        """The sender's context of the last item, where the SDK's stream keeps one."""
        return getattr(self._inner, "last_context", None)

    def _ended(self) -> None:
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            on_end()

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
