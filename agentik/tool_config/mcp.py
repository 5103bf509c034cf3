"""Typed, validated ``[[mcp.servers]]`` entries of the config file.

Each entry names one MCP server and how to reach it::

    [[mcp.servers]]
    name = "time"                      # [A-Za-z0-9_-], at most 32 characters, unique
    transport = "stdio"                # stdio | http | sse; inferred from command / url
    command = "mcp-server-time"        # stdio: the program (a string, or [program, args...])
    args = ["--local-timezone", "UTC"] # stdio: its arguments
    env = { TZ = "UTC" }               # stdio: added to the SDK's safe default environment
    cwd = "/srv/time"                  # stdio: working directory
    # url = "https://example.com/mcp"  # http / sse: the endpoint (http:// or https://)
    # headers = { Authorization = "Bearer ${TOKEN}" }   # http / sse
    connect_timeout = 10.0             # seconds to connect and list the tools
    call_timeout = 60.0                # seconds per tool call (default: [tools] timeout)
    tools = ["get_current_time"]       # optional allow-list of the server's tool names

``${NAME}`` in ``env`` and ``headers`` values is replaced by the engine's environment
variable ``NAME`` when the config is loaded (a missing one is an error), so secrets
can stay out of the file. Nothing else in the config, and nothing in a request, can
name a command or a URL.

This module does not import the MCP SDK: the config loads without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

from agentik.tool_config.tables import (
    ConfigTableError,
    TableReader,
    check_keys,
    display_url,
)

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "MAX_SERVER_NAME",
    "McpServerConfig",
    "Transport",
    "parse_mcp_servers",
]

Transport = Literal["stdio", "http", "sse"]
_TRANSPORTS: tuple[Transport, ...] = ("stdio", "http", "sse")

DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_SERVER_NAME = 32
"""Long enough to read, short enough to leave room for tool names under 64 characters."""

_STDIO_ONLY = ("command", "args", "env", "cwd")
_HTTP_ONLY = ("url", "headers")


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One configured MCP server."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    call_timeout: float | None = None
    """Seconds per call; None means the engine's ``[tools] timeout``."""
    tools: tuple[str, ...] | None = None
    """Only these of the server's tools are offered; None offers all."""

    @property
    def source(self) -> str:
        """The registry source string of this server's tools."""
        return f"mcp:{self.name}"

    @property
    def target(self) -> str:
        """What is launched or contacted, for logs and listings (no secrets)."""
        if self.transport == "stdio":
            return " ".join([self.command, *self.args])
        return display_url(self.url)


def _transport(entry: TableReader) -> Transport:
    given = entry.string("transport")
    if given is None:
        if "command" in entry.table and "url" not in entry.table:
            return "stdio"
        if "url" in entry.table and "command" not in entry.table:
            return "http"
        raise ConfigTableError(
            f"{entry.label} needs either 'command' (stdio) or 'url' (http, sse), "
            "or an explicit 'transport'"
        )
    lowered = given.lower()
    if lowered not in _TRANSPORTS:
        raise entry.fail("transport", f"must be one of {', '.join(_TRANSPORTS)}", given)
    return lowered


def _command(entry: TableReader) -> tuple[str, tuple[str, ...]]:
    raw = entry.table.get("command")
    if isinstance(raw, list):
        if not raw or not all(isinstance(item, str) and item for item in raw):
            raise entry.fail("command", "must be a program name or a non-empty array of strings")
        command, leading = raw[0], tuple(raw[1:])
    else:
        command, leading = entry.string("command", required=True) or "", ()
    if "\0" in command:
        raise entry.fail("command", "must not contain NUL characters")
    return command, leading + (entry.strings("args") or ())


def _server(table: dict[str, object], label: str, env: Mapping[str, str]) -> McpServerConfig:
    check_keys(table, [key.name for key in fields(McpServerConfig)], label)
    entry = TableReader(table, label, env)
    name = entry.name(MAX_SERVER_NAME)
    transport = _transport(entry)
    wrong = _HTTP_ONLY if transport == "stdio" else _STDIO_ONLY
    for key in wrong:
        if key in table:
            raise entry.fail(key, f"does not apply to the {transport} transport")
    command, url, cwd = "", "", None
    args: tuple[str, ...] = ()
    server_env: dict[str, str] = {}
    headers: dict[str, str] = {}
    if transport == "stdio":
        command, args = _command(entry)
        server_env, cwd = entry.mapping("env"), entry.string("cwd")
    else:
        url = entry.url("url", required=True) or ""
        headers = entry.mapping("headers", header_names=True)
    return McpServerConfig(
        name=name,
        transport=transport,
        command=command,
        args=args,
        env=server_env,
        cwd=cwd,
        url=url,
        headers=headers,
        connect_timeout=entry.seconds("connect_timeout") or DEFAULT_CONNECT_TIMEOUT,
        call_timeout=entry.seconds("call_timeout"),
        tools=entry.strings("tools"),
    )


def parse_mcp_servers(
    tables: object, where: str, env: Mapping[str, str]
) -> tuple[McpServerConfig, ...]:
    """Validate the ``[[mcp.servers]]`` tables read from ``where`` (a file name)."""
    if not isinstance(tables, list):
        raise ConfigTableError(
            f"mcp.servers in {where} must be an array of tables ([[mcp.servers]])"
        )
    checked: list[dict[str, object]] = []
    for number, table in enumerate(tables, start=1):
        if not isinstance(table, dict):
            raise ConfigTableError(f"[[mcp.servers]] entry {number} in {where} must be a table")
        checked.append(table)
    servers: list[McpServerConfig] = []
    seen: set[str] = set()
    for number, table in enumerate(checked, start=1):
        label = f"[[mcp.servers]] entry {number} in {where}"
        server = _server(table, label, env)
        if server.name in seen:
            raise ConfigTableError(f"{label}: the server name {server.name!r} is used twice")
        seen.add(server.name)
        servers.append(server)
    return tuple(servers)
