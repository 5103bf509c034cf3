"""A stdio MCP server: its process, its stdout read as bounded lines, its stderr logged.

The SDK's ``stdio_client`` joins stdout chunks into one string with no limit, copying the
string at every chunk: a server that writes a long line without a newline makes the engine
hold all of it and spend quadratic CPU on its event loop (32 MiB took 7.6 s of loop time).
``stdio_transport`` reads stdout into a ``bytearray``, looks for the newline only in the new
bytes, and drops the connection when one line passes the server's ``max_message_bytes``.

Start and stop follow the SDK's: the server runs in a process group of its own; at the end
its stdin is closed, it gets ``EXIT_GRACE`` seconds to exit, then SIGTERM and SIGKILL go to
the whole group. POSIX only (the stderr pipe is read with the loop's reader callbacks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Callable

import anyio
import mcp_types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from agentik.config import McpServerConfig

__all__ = ["EXIT_GRACE", "LineTooLong", "StdoutLines", "stdio_transport"]

EXIT_GRACE = 2.0
"""Seconds a server gets to exit once its stdin is closed, and again after SIGTERM."""
_FLUSH = 0.5
"""Seconds the writer gets to send what it accepted before stdin closes."""
_CHUNK = 64 * 1024
_MAX_STDERR_LINE = 16 * 1024
"""A stderr line longer than this is logged in pieces."""
_PREVIEW = 200
"""Characters of a stdout line that is not JSON-RPC shown in the log."""
_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)

log = logging.getLogger(__name__)

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


class LineTooLong(Exception):
    """A line of the server's stdout passed the server's ``max_message_bytes``."""


class StdoutLines:
    """Splits a byte stream into lines, holding at most ``limit`` bytes of one line.

    Each chunk is searched for a newline once, and the bytes before the last newline are
    dropped once per chunk: linear in what is read, however long a line grows.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """The complete lines ``chunk`` ends; LineTooLong when a line passes the limit."""
        buffer = self._buffer
        scan = len(buffer)  # the bytes before have no newline
        buffer += chunk
        lines: list[bytes] = []
        start = 0
        while (end := buffer.find(b"\n", max(start, scan))) >= 0:
            if end - start > self.limit:
                raise LineTooLong(self.reason)
            lines.append(bytes(buffer[start:end]))
            start = end + 1
        if start:
            del buffer[:start]
        if len(buffer) > self.limit:
            raise LineTooLong(self.reason)
        return lines

    @property
    def reason(self) -> str:
        return f"the server sent a message over {self.limit} bytes (max_message_bytes)"


@contextlib.asynccontextmanager
async def stdio_transport(
    config: McpServerConfig, on_stderr: Callable[[str], None], on_lost: Callable[[str], None]
) -> AsyncIterator[Streams]:
    """Start the server of ``config`` and exchange JSON-RPC lines with it.

    ``on_stderr`` gets each line it writes to stderr; ``on_lost`` is told why when the
    connection is dropped for a line over ``max_message_bytes`` (the read stream then ends,
    failing the calls in flight).
    """
    stderr = _StderrLines(on_stderr)
    try:
        process = await anyio.open_process(
            [config.command, *config.args],
            env=get_default_environment() | _child_env(config),
            stderr=stderr.child_end,
            cwd=config.cwd,
            start_new_session=True,
        )
        stderr.release_child_end()
        async with _Connection(process, config, on_lost).run() as streams:
            yield streams
    finally:
        stderr.close()


class _Connection:
    """The pipes of one server process, bridged to the session's message streams."""

    def __init__(
        self, process: Process, config: McpServerConfig, on_lost: Callable[[str], None]
    ) -> None:
        self.process = process
        self.name = config.name
        self.lines = StdoutLines(config.max_message_bytes)
        self.on_lost = on_lost
        # Unbuffered, as the SDK's: no read-ahead while a delivery waits.
        self.to_session, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self.from_session = anyio.create_memory_object_stream[SessionMessage](0)
        self.writer_done = anyio.Event()

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[Streams]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.read_stdout)
            tasks.start_soon(self.write_stdin)
            try:
                yield self.read_stream, self.write_stream
            finally:
                # Stopping the server must finish even when the caller is cancelled, or
                # its process would leak; every wait in it is bounded.
                with anyio.CancelScope(shield=True):
                    await self.shutdown()
                tasks.cancel_scope.cancel()

    async def read_stdout(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            async with self.to_session:
                while True:
                    chunk = await stdout.receive(_CHUNK)
                    for line in self.lines.feed(chunk):
                        if line.strip():
                            await self.to_session.send(self.parse(line))
        except LineTooLong as exc:
            log.warning(
                "MCP server %r: %s; dropping the connection (raise max_message_bytes of its "
                "[[mcp.servers]] entry if such messages are expected)",
                self.name,
                exc,
            )
            self.on_lost(str(exc))
        except _GONE:
            pass  # the server exited, or our shutdown closed a stream under the read
        # A server blocked on a full stdout pipe cannot see its stdin close: keep reading.
        with anyio.CancelScope(shield=True), contextlib.suppress(*_GONE):
            while await stdout.receive(_CHUNK):
                pass

    def parse(self, line: bytes) -> SessionMessage | Exception:
        """One line as a message, or the error the session hands to its message handler."""
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValidationError as exc:
            preview = line[:_PREVIEW].decode("utf-8", "replace")
            log.warning("MCP server %r wrote a line that is not JSON-RPC: %r", self.name, preview)
            return exc
        return SessionMessage(message)

    async def write_stdin(self) -> None:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            async with self.from_session:
                async for message in self.from_session:
                    json = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await stdin.send(json.encode() + b"\n")
        except _GONE:
            # The server may still run: end the read side so no request waits for ever.
            await self.to_session.aclose()
        finally:
            self.writer_done.set()

    async def shutdown(self) -> None:
        """Stop the traffic, let the writer flush, stop the server, release the streams."""
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(_FLUSH):
            await self.writer_done.wait()
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        try:
            with contextlib.suppress(*_GONE):
                await process.stdin.aclose()
            if not await _exited(process, EXIT_GRACE):
                await terminate_posix_process_tree(process, EXIT_GRACE)
                if not await _exited(process, EXIT_GRACE):
                    log.warning("MCP server %r (pid %d) survived SIGKILL", self.name, process.pid)
        finally:
            # A survivor (or a child of the server) may hold stdout open: end the read anyway.
            with contextlib.suppress(*_GONE):
                await process.stdout.aclose()
            if process.returncode is not None:
                with anyio.move_on_after(EXIT_GRACE), contextlib.suppress(*_GONE):
                    await process.aclose()
            for stream in (self.to_session, self.from_session):
                await stream.aclose()


async def _exited(process: Process, within: float) -> bool:
    """Whether ``process`` exits within ``within`` seconds (anyio's ``wait`` is told of the
    exit itself, not the end of pipes a child of the server may still hold)."""
    with anyio.move_on_after(within):
        await process.wait()
    return process.returncode is not None


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
        if len(self._buffer) > _MAX_STDERR_LINE:
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
