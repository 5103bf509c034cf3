"""``[[mcp.servers]]``: MCP servers whose tools the engine offers (docs/mcp.md).

A server is ``stdio`` (``command``, ``args``, ``env``, ``cwd``) or ``http``/``sse`` (``url``,
``headers``), inferred from ``command`` or ``url``; ``${NAME}`` in ``env`` and ``headers`` is the
engine's environment variable ``NAME`` (a missing one is an error). Nothing else in the config,
and nothing in a request, can name a command or a URL. The MCP SDK is not imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from agentik.config import ConfigError, Entry, _url, read_entries, setting, unique
from agentik.tool_config import display_url

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "MAX_SERVER_NAME", "McpServerConfig", "Transport"]

Transport = Literal["stdio", "http", "sse"]
DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_SERVER_NAME = 32
"""Long enough to read, short enough to leave room for tool names under 64 characters."""
_ONLY = {"stdio": ("command", "args", "env", "cwd"), "http": ("url", "headers")}


def _name(value: str) -> str:
    from agentik.config import NAME, _Invalid

    if not NAME.match(value) or len(value) > MAX_SERVER_NAME:
        raise _Invalid(f"must be 1 to {MAX_SERVER_NAME} characters of A-Z a-z 0-9 _ -")
    return value


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """One configured MCP server."""

    name: str = field(metadata={"check": _name})
    transport: Transport = field()
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    cwd: str | None = None
    url: str = setting("", check=_url)
    headers: dict[str, str] = field(
        default_factory=dict, repr=False, hash=False, metadata={"headers": True}
    )
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


def _server(entry: Entry) -> McpServerConfig:
    table, given = entry.table, entry.table.get("transport")
    entry.check_keys(McpServerConfig)
    name = entry.value(McpServerConfig.__dataclass_fields__["name"])
    entry.label = f"{entry.label} ({name!r})"
    if given is None and ("command" in table) == ("url" in table):
        raise ConfigError(
            f"{entry.label} needs either 'command' (stdio) or 'url' (http, sse), "
            "or an explicit 'transport'"
        )
    transport = ("stdio" if "command" in table else "http") if given is None else given
    if not isinstance(transport, str) or transport.lower() not in ("stdio", "http", "sse"):
        raise entry.fail("transport", "must be one of stdio, http, sse", transport)
    transport = transport.lower()
    for key in _ONLY["http" if transport == "stdio" else "stdio"]:
        if key in table:
            raise entry.fail(key, f"does not apply to the {transport} transport")
    command, args = table.get("command", ""), ()
    if isinstance(command, list):
        if not command or not all(isinstance(item, str) and item for item in command):
            raise entry.fail("command", "must be a program name or a non-empty array of strings")
        command, args = command[0], tuple(command[1:])
    elif transport == "stdio" and not (isinstance(command, str) and command.strip()):
        raise entry.fail("command", "must be a program name or a non-empty array of strings")
    if "\0" in command:
        raise entry.fail("command", "must not contain NUL characters")
    if transport != "stdio" and "url" not in table:
        raise ConfigError(f"{entry.label} needs 'url'")
    server = entry.read(McpServerConfig, name=name, transport=transport, command=command.strip())
    return replace(server, args=args + server.args)


def read_mcp_servers(
    raw: object, where: str, env: Mapping[str, str]
) -> tuple[McpServerConfig, ...]:
    """The ``[[mcp.servers]]`` tables read from ``where`` (a quoted file name)."""
    servers = read_entries(raw, "mcp.servers", where, _server, env)
    return unique(servers, "server", lambda i: f"[[mcp.servers]] entry {i + 1} in {where}")
