"""``[[mcp.servers]]``: the MCP servers whose tools the engine offers, each an entry of
:class:`McpServerConfig` (docs/mcp.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from agentik.addresses import display_url
from agentik.config.checks import check_url
from agentik.config.entries import (
    DEFAULT_CONNECT_TIMEOUT,
    HEADERS,
    PER_CALL,
    Entry,
    array_reader,
)
from agentik.config.errors import ConfigError
from agentik.config.values import MiB, setting

__all__ = ["McpServerConfig", "read_servers"]


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """``[[mcp.servers]]``: an MCP server whose tools the engine offers (docs/mcp.md)."""

    name: str = field(metadata={"name": 32})
    transport: Literal["stdio", "http", "sse"]
    """stdio (``command``, ``args``, ``env``, ``cwd``), http or sse (``url``, ``headers``)."""
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    cwd: str | None = None
    url: str = setting("", check=check_url)
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, metadata=HEADERS)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    call_timeout: float | None = setting(None, doc=PER_CALL)
    tools: tuple[str, ...] | None = setting(None, doc="only these of its tools offered; None: all")
    max_message_bytes: int = setting(16 * MiB, lo=64 * 1024, hi=1 << 30)
    """One message from the server (a stdio line, an HTTP body, an SSE event), at most;
    past it a stdio connection is dropped (and reconnected), an HTTP answer refused."""
    max_tools: int = setting(512, hi=100_000, doc="tools offered; past it the rest are left out")
    max_tool_bytes: int = setting(64 * 1024, lo=1024, hi=16 * MiB)
    """One tool's description and input schema as JSON, at most; a larger tool is left out."""
    max_progress_events: int = setting(1_000, lo=0, doc="per call; 0: none")
    """Progress events one call streams, at most (one per PROGRESS_EVERY); past it, dropped."""

    @property
    def target(self) -> str:
        """What is launched or contacted, for logs and listings (no secrets)."""
        if self.transport == "stdio":
            return " ".join([self.command, *self.args])
        return display_url(self.url)


def _server(entry: Entry, where: str, engine: bool) -> McpServerConfig:
    """``stdio`` or ``http`` from ``command`` or ``url``; ``${NAME}`` in ``env`` and
    ``headers`` is the engine's environment variable. No request can name a command."""
    table, given, name = entry.table, entry.table.get("transport"), entry.name(McpServerConfig)
    if given is None and ("command" in table) == ("url" in table):
        why = "needs either 'command' (stdio) or 'url' (http, sse), or an explicit 'transport'"
        raise ConfigError(f"{entry.label} {why}")
    transport = ("stdio" if "command" in table else "http") if given is None else given
    if not isinstance(transport, str) or transport.lower() not in ("stdio", "http", "sse"):
        raise entry.fail("transport", "must be one of stdio, http, sse", transport)
    transport = transport.lower()
    for key in ("url", "headers") if transport == "stdio" else ("command", "args", "env", "cwd"):
        if key in table:
            raise entry.fail(key, f"does not apply to the {transport} transport")
    if (needed := "command" if transport == "stdio" else "url") not in table:
        raise ConfigError(f"{entry.label} needs {needed!r}")
    command, args = table.get("command", ""), ()
    if isinstance(command, list) and command and all(isinstance(c, str) and c for c in command):
        command, args = command[0], tuple(command[1:])
    elif transport == "stdio" and not (isinstance(command, str) and command.strip()):
        raise entry.fail("command", "must be a program name or a non-empty array of strings")
    if "\0" in command:
        raise entry.fail("command", "must not contain NUL characters")
    server = entry.read(McpServerConfig, name=name, transport=transport, command=command.strip())
    return replace(server, args=args + server.args)


read_servers = array_reader("mcp.servers", _server)
