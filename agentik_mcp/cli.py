"""``agentik mcp``: agentik as an MCP server on stdin/stdout, for desktop MCP clients.

``agentik.cli`` calls :func:`add_command`; the MCP SDK is imported only when the
command runs. The process talks to the engine over gRPC: the target comes from ``--target``,
else the config (``AGENTIK_ENGINE_TARGET`` / ``grpc_addr``), as for the web facade; the
token from ``AGENTIK_TOKEN``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_command"]


def add_command(subparsers: Any) -> None:
    """Add ``mcp`` to the ``agentik`` command."""
    mcp = subparsers.add_parser(
        "mcp",
        help="serve agentik as an MCP server on stdio (for desktop MCP clients)",
        description="An MCP server on stdin/stdout whose tools talk to the agentik engine: "
        "send_message, answer, list_conversations, read_conversation, list_agents. A client "
        "that declares the MCP tasks extension gets a turn as a task (tasks/get, "
        "tasks/cancel). Logs go to stderr.",
    )
    mcp.add_argument(
        "--target", help="the engine's gRPC target (default: $AGENTIK_ENGINE_TARGET / grpc_addr)"
    )
    mcp.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    import anyio

    from agentik.config import ConfigError, load_settings
    from agentik_mcp.stdio import serve_stdio
    from web_facade.engine_client import EngineClient
    from web_facade.mcp.server import EngineAccess, build_server

    target = args.target
    if not target:
        try:
            target = load_settings(args.config, os.environ, mcp=False).web.engine_target
        except ConfigError as exc:
            print(f"agentik: configuration error: {exc}", file=sys.stderr)
            return 2
    client = EngineClient(target)
    server = build_server(EngineAccess(client, os.environ.get("AGENTIK_TOKEN")))

    async def serve() -> None:
        try:
            await serve_stdio(server)
        finally:
            client.close()

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        return 130
    return 0
