"""Real MCP servers for the tests: ``mcp-server-time`` and the demo server, a source
connected to one of them, and ways to watch what they write to stderr."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from agentik.config import McpServerConfig
from engine_service.core.events import EventBody
from engine_service.core.registry import ToolRegistry
from engine_service.core.tool import ToolContext
from engine_service.tools.mcp.tool import McpToolSource

DEMO = str(Path(__file__).with_name("demo_server.py"))
RAW = str(Path(__file__).with_name("raw_stdio_server.py"))
WAIT = 20.0
"""Upper bound for every wait here: a Python MCP server takes a second or two to start."""


def time_config(**changes: Any) -> McpServerConfig:
    """``mcp-server-time`` over stdio, started with this interpreter."""
    config = McpServerConfig(
        name="time",
        transport="stdio",
        command=sys.executable,
        args=("-m", "mcp_server_time", "--local-timezone", "UTC"),
        connect_timeout=WAIT,
    )
    return dataclasses.replace(config, **changes)


def demo_stdio_config(**changes: Any) -> McpServerConfig:
    """The demo server over stdio."""
    config = McpServerConfig(
        name="demo",
        transport="stdio",
        command=sys.executable,
        args=(DEMO, "stdio"),
        connect_timeout=WAIT,
    )
    return dataclasses.replace(config, **changes)


def raw_stdio_config(**changes: Any) -> McpServerConfig:
    """The bare JSON-RPC server over stdio (``raw_stdio_server.py``)."""
    config = McpServerConfig(
        name="raw", transport="stdio", command=sys.executable, args=(RAW,), connect_timeout=WAIT
    )
    return dataclasses.replace(config, **changes)


class Lines:
    """Lines a server wrote, and a way to wait for one."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._added = asyncio.Event()

    def add(self, line: str) -> None:
        self.lines.append(line)
        self._added.set()

    async def wait_for(self, line: str, within: float = WAIT) -> None:
        async with asyncio.timeout(within):
            while line not in self.lines:
                self._added.clear()
                await self._added.wait()


class _LinesHandler(logging.Handler):
    def __init__(self, lines: Lines) -> None:
        super().__init__(logging.INFO)
        self._lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self._lines.add(record.getMessage())


@contextlib.contextmanager
def stderr_of(server: str) -> Iterator[Lines]:
    """What the stdio server ``server`` writes to stderr, as the engine logs it."""
    logger = logging.getLogger(f"engine_service.tools.mcp.{server}.stderr")
    lines = Lines()
    handler = _LinesHandler(lines)
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@dataclasses.dataclass
class DemoHttpServer:
    """The demo server running in its own process on a loopback port."""

    transport: str
    port: int
    stderr: Lines
    process: asyncio.subprocess.Process
    options: tuple[str, ...] = ()

    async def kill(self) -> None:
        """SIGKILL the server and wait for it to be gone."""
        self.process.kill()
        async with asyncio.timeout(WAIT):
            await self.process.wait()

    @property
    def url(self) -> str:
        path = "/mcp" if self.transport == "http" else "/sse"
        return f"http://127.0.0.1:{self.port}{path}"

    def config(self, **changes: Any) -> McpServerConfig:
        config = McpServerConfig(
            name="demo",
            transport="http" if self.transport == "http" else "sse",
            url=self.url,
            connect_timeout=WAIT,
        )
        return dataclasses.replace(config, **changes)


@contextlib.asynccontextmanager
async def demo_http_server(
    transport: str, port: int = 0, *options: str
) -> AsyncIterator[DemoHttpServer]:
    """Run the demo server over ``http`` (streamable HTTP) or ``sse`` until the block ends;
    ``options``: more of its command-line options (``--json``)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        DEMO,
        transport,
        "--port",
        str(port),
        *options,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stderr = Lines()

    async def drain() -> None:
        assert process.stderr is not None
        while line := await process.stderr.readline():
            stderr.add(line.decode(errors="replace").rstrip())

    reader = asyncio.get_running_loop().create_task(drain())
    try:
        assert process.stdout is not None
        async with asyncio.timeout(WAIT):
            port = int(await process.stdout.readline())
        yield DemoHttpServer(transport, port, stderr, process, options)
    finally:
        if process.returncode is None:
            process.kill()
        async with asyncio.timeout(WAIT):
            await process.wait()
            await reader


@contextlib.asynccontextmanager
async def running_source(
    config: McpServerConfig, registry: ToolRegistry | None = None, call_timeout: float = WAIT
) -> AsyncIterator[McpToolSource]:
    """A started source for ``config``, ready, stopped at the end of the block."""
    registry = registry if registry is not None else ToolRegistry()
    source = McpToolSource(config, registry, default_call_timeout=call_timeout)
    source.start()
    try:
        await source.wait_ready(within=WAIT)
        yield source
    finally:
        await source.stop()


class Emitted:
    """Collects the events a tool emits; ``first`` waits for the first one."""

    def __init__(self) -> None:
        self.events: list[EventBody] = []
        self._arrived = asyncio.Event()

    def __call__(self, body: EventBody) -> None:
        self.events.append(body)
        self._arrived.set()

    async def first(self) -> EventBody:
        async with asyncio.timeout(WAIT):
            await self._arrived.wait()
        return self.events[0]


def tool_context(emitted: Emitted | None = None, call_id: str = "call-1") -> ToolContext:
    """What the run loop hands a tool; what it emits goes to ``emitted``."""
    return ToolContext(
        session_id="session",
        run_id="run",
        tool_call_id=call_id,
        emit=emitted or Emitted(),
        get_state=lambda: None,
        set_state=lambda state: None,
    )
