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

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "MAX_SERVER_NAME",
    "McpConfigError",
    "McpServerConfig",
    "Transport",
    "parse_mcp_servers",
]

Transport = Literal["stdio", "http", "sse"]
_TRANSPORTS: tuple[Transport, ...] = ("stdio", "http", "sse")

DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_SERVER_NAME = 32
"""Long enough to read, short enough to leave room for tool names under 64 characters."""

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_KEYS = (
    "name",
    "transport",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "connect_timeout",
    "call_timeout",
    "tools",
)
_STDIO_ONLY = ("command", "args", "env", "cwd")
_HTTP_ONLY = ("url", "headers")


class McpConfigError(ValueError):
    """An ``[[mcp.servers]]`` entry is unusable; the message names the entry and field."""


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
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}{parts.path}"


class _Entry:
    """Reads the fields of one table, raising errors that name it."""

    def __init__(self, table: dict[str, object], label: str, env: Mapping[str, str]) -> None:
        self.table = table
        self.label = label
        self.env = env

    def fail(self, key: str, why: str, shown: object = None) -> McpConfigError:
        got = "" if shown is None else f"; got {shown!r}"
        return McpConfigError(f"invalid {key} of {self.label}: {why}{got}")

    def string(self, key: str, *, required: bool = False) -> str | None:
        raw = self.table.get(key)
        if raw is None:
            if required:
                raise McpConfigError(f"{self.label} needs {key!r}")
            return None
        if not isinstance(raw, str):
            raise self.fail(key, f"must be a string, not {type(raw).__name__}")
        if not raw.strip():
            raise self.fail(key, "must not be empty")
        return raw.strip()

    def strings(self, key: str) -> tuple[str, ...] | None:
        raw = self.table.get(key)
        if raw is None:
            return None
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            raise self.fail(key, "must be an array of strings", raw)
        return tuple(raw)

    def mapping(self, key: str, *, header_names: bool = False) -> dict[str, str]:
        raw = self.table.get(key)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(key, f"must be a table of strings, not {type(raw).__name__}")
        result: dict[str, str] = {}
        for name, value in raw.items():
            if not isinstance(value, str):
                raise self.fail(f"{key}.{name}", f"must be a string, not {type(value).__name__}")
            if header_names and not _HEADER_NAME.match(name):
                raise self.fail(key, "has a name that is not a valid HTTP header name", name)
            if not header_names and (not name or "=" in name or "\0" in name):
                raise self.fail(key, "has an invalid variable name", name)
            result[name] = self.expand(f"{key}.{name}", value)
        return result

    def expand(self, key: str, value: str) -> str:
        def lookup(match: re.Match[str]) -> str:
            variable = match[1]
            found = self.env.get(variable)
            if found is None:
                raise self.fail(key, f"names the environment variable {variable!r}, which is unset")
            return found

        return _VARIABLE.sub(lookup, value)

    def seconds(self, key: str) -> float | None:
        raw = self.table.get(key)
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise self.fail(key, f"must be a number of seconds, not {type(raw).__name__}")
        value = float(raw)
        if not math.isfinite(value) or value <= 0:
            raise self.fail(key, "must be a positive number of seconds", raw)
        return value


def _transport(entry: _Entry) -> Transport:
    given = entry.string("transport")
    if given is None:
        if "command" in entry.table and "url" not in entry.table:
            return "stdio"
        if "url" in entry.table and "command" not in entry.table:
            return "http"
        raise McpConfigError(
            f"{entry.label} needs either 'command' (stdio) or 'url' (http, sse), "
            "or an explicit 'transport'"
        )
    lowered = given.lower()
    if lowered not in _TRANSPORTS:
        raise entry.fail("transport", f"must be one of {', '.join(_TRANSPORTS)}", given)
    return lowered


def _command(entry: _Entry) -> tuple[str, tuple[str, ...]]:
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


def _url(entry: _Entry) -> str:
    url = entry.string("url", required=True) or ""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise entry.fail("url", "must be an http:// or https:// URL", url)
    return url


def _server(table: dict[str, object], label: str, env: Mapping[str, str]) -> McpServerConfig:
    for key in table:
        if key not in _KEYS:
            hint = difflib.get_close_matches(key, _KEYS, n=1)
            tail = f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(_KEYS)}"
            raise McpConfigError(f"unknown key {key!r} in {label}{tail}")
    entry = _Entry(table, label, env)
    name = entry.string("name", required=True) or ""
    if not _NAME.match(name) or len(name) > MAX_SERVER_NAME:
        raise entry.fail(
            "name", f"must be 1 to {MAX_SERVER_NAME} characters of A-Z a-z 0-9 _ -", name
        )
    entry.label = f"{label} ({name!r})"
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
        url, headers = _url(entry), entry.mapping("headers", header_names=True)
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
    tables: list[object], where: str, env: Mapping[str, str]
) -> tuple[McpServerConfig, ...]:
    """Validate the ``[[mcp.servers]]`` tables read from ``where`` (a file name)."""
    checked: list[dict[str, object]] = []
    for number, table in enumerate(tables, start=1):
        if not isinstance(table, dict):
            raise McpConfigError(f"[[mcp.servers]] entry {number} in {where} must be a table")
        checked.append(table)
    servers: list[McpServerConfig] = []
    seen: set[str] = set()
    for number, table in enumerate(checked, start=1):
        label = f"[[mcp.servers]] entry {number} in {where}"
        server = _server(table, label, env)
        if server.name in seen:
            raise McpConfigError(f"{label}: the server name {server.name!r} is used twice")
        seen.add(server.name)
        servers.append(server)
    return tuple(servers)
