"""A real MCP server for the tests, built with the SDK's ``MCPServer``.

Run as ``python demo_server.py stdio|http|sse [--port N] [--json] [--extra-tools N]
[--wordy BYTES]``. Over HTTP and SSE it binds 127.0.0.1 on port N (default: a free one) and
prints the port on its first stdout line; ``--json`` answers streamable HTTP requests with
JSON bodies instead of event streams. ``--extra-tools N`` adds the tools ``extra_0`` …,
``--wordy BYTES`` a tool ``wordy`` with a description of that many bytes.

Tools: ``slow`` (reports progress; writes the line ``cancelled`` to stderr when the
client cancels it), ``fail`` (an error result), ``image`` (a PNG), ``grow`` / ``shrink``
(change the tool list and announce it), ``pid``, ``env``, ``header``, ``shout`` (writes
to stderr), ``structured`` (structured content only), ``big`` (a text of N bytes) and
``flood`` (N progress notifications as fast as it can).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import CallToolResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# A 1x1 transparent PNG.
PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000b49444154789c6360000200000500017a5eab3f0000000049454e44ae426082"
)

server = MCPServer("demo")


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Work for ``seconds``, reporting progress every 50 ms."""
    steps = max(1, int(seconds / 0.05))
    try:
        for step in range(steps):
            await ctx.report_progress(step, steps, f"step {step}")
            await anyio.sleep(0.05)
    except anyio.get_cancelled_exc_class():
        print("cancelled", file=sys.stderr, flush=True)
        raise
    return f"slept {seconds:g} s"


@server.tool()
async def count(path: str, seconds: float, ctx: Context) -> str:
    """A side effect to count: append this call's idempotency key (``_meta``) as a line
    to the file ``path``, then work ``seconds`` (reporting progress every 50 ms)."""
    key = str((ctx.request_context.meta or {}).get("agentik/idempotencyKey", ""))
    counter = anyio.Path(path)
    before = await counter.read_text() if await counter.exists() else ""
    await counter.write_text(before + key + "\n")
    steps = max(1, int(seconds / 0.05))
    for step in range(steps):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0.05)
    return f"counted {key}"


@server.tool()
def fail(message: str) -> str:
    """Always fails with ``message``."""
    raise ToolError(message)


@server.tool()
def image() -> Image:
    """A tiny PNG."""
    return Image(data=PNG, format="png")


async def _announce(ctx: Context) -> None:
    await ctx.notify_tools_changed()
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        await ctx.session.send_tool_list_changed()


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called ``name`` and announce the change."""

    def added() -> str:
        return f"{name} works"

    server.add_tool(added, name=name, description=f"added at run time: {name}")
    await _announce(ctx)
    return f"added {name}"


@server.tool()
async def shrink(name: str, ctx: Context) -> str:
    """Remove the tool called ``name`` and announce the change."""
    server.remove_tool(name)
    await _announce(ctx)
    return f"removed {name}"


@server.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@server.tool()
def env(name: str) -> str:
    """The value of environment variable ``name``, or ``<unset>``."""
    return os.environ.get(name, "<unset>")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of HTTP request header ``name`` ("" when absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.tool()
def shout(text: str) -> str:
    """Write ``text`` to stderr."""
    print(text, file=sys.stderr, flush=True)
    return "shouted"


@server.tool()
def structured() -> CallToolResult:
    """Structured content with no text block."""
    return CallToolResult(content=[], structured_content={"answer": 42, "unit": "none"})


@server.tool()
async def big(size: int, ctx: Context) -> str:
    """A text of ``size`` bytes (after a progress notification, so that a streamable HTTP
    server not in ``--json`` mode answers with an event stream)."""
    await ctx.report_progress(0, 1, "making it")
    return "y" * size


@server.tool()
async def flood(n: int, ctx: Context) -> str:
    """Report progress ``n`` times, as fast as it can."""
    for step in range(n):
        await ctx.report_progress(step, n, f"step {step}")
    return f"sent {n}"


def _add_tools(extra: int, wordy: int) -> None:
    for number in range(extra):

        def tool() -> str:
            return "extra"

        server.add_tool(tool, name=f"extra_{number}", description="an extra tool")
    if wordy:

        def wordy_tool() -> str:
            return "wordy"

        server.add_tool(wordy_tool, name="wordy", description="w" * wordy)


def _serve_http(transport: str, port: int, json_response: bool) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    print(listener.getsockname()[1], flush=True)
    app: Any = (
        server.streamable_http_app(json_response=json_response)
        if transport == "http"
        else server.sse_app()
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[listener]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("transport", choices=["stdio", "http", "sse"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--extra-tools", type=int, default=0)
    parser.add_argument("--wordy", type=int, default=0)
    options = parser.parse_args()
    _add_tools(options.extra_tools, options.wordy)
    if options.transport == "stdio":
        server.run("stdio")
    else:
        _serve_http(options.transport, options.port, options.json)


if __name__ == "__main__":
    main()
