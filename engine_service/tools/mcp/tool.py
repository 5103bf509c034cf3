"""MCP servers as tool sources: each configured server's tools, kept live in the registry.

An :class:`McpToolSource` owns one server. Started with the engine, it connects in the
background (bounded by the server's ``connect_timeout``), lists the tools and registers
them as ``<server>__<tool>`` (see :mod:`engine_service.tools.mcp.results`), then watches
the connection:

- a tool-list change announced by the server (``subscriptions/listen`` on protocol
  2026-07-28, ``notifications/tools/list_changed`` before it) re-lists the tools;
- a connection that ends (the stdio process died, the HTTP stream broke, a call saw
  the connection close) marks the tools ``disconnected`` (no longer offered to the
  LLM) and reconnects with exponential backoff, respawning a stdio server; the tool
  list is fetched again after every reconnect.

All calls of all runs share the one connection; the SDK matches answers to requests.
A call is bounded by the server's ``call_timeout``: past it the server is sent
``notifications/cancelled`` and the LLM gets an error result. Cancelling the calling
task (an interrupted run) sends ``notifications/cancelled`` too. Progress notifications
become ``CUSTOM`` events named ``tool_progress``, throttled and capped
(:mod:`engine_service.tools.mcp.progress`).

What a server sends is bounded by its entry: one message by ``max_message_bytes`` (in the
transport), the tools offered by ``max_tools`` and ``max_tool_bytes`` (here).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import random
import time
from collections.abc import Callable, Sequence

import anyio
import httpx2
import mcp_types
from mcp import Client, MCPError
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from agentik.config import McpServerConfig
from engine_service import __version__
from engine_service.core.models import JSON
from engine_service.core.registry import READY, ToolRegistry
from engine_service.core.tool import TOOL_PROGRESS, Tool, ToolContext, ToolResult
from engine_service.tools.mcp.progress import CallProgress, log_dropped
from engine_service.tools.mcp.results import disambiguate, tool_name, tool_result
from engine_service.tools.mcp.transport import STREAM_READ_TIMEOUT, open_transport

__all__ = [
    "DISCONNECTED",
    "IDEMPOTENCY_META_KEY",
    "PROGRESS_EVENT",
    "McpTool",
    "McpToolSource",
    "SourceState",
]

DISCONNECTED = "disconnected"
"""The status of a known tool whose server is away (not offered to the LLM)."""
PROGRESS_EVENT = TOOL_PROGRESS

IDEMPOTENCY_META_KEY = "agentik/idempotencyKey"
"""The ``_meta`` key of a call's idempotency key (``ToolContext.idempotency_key``): the
same on every attempt of one call, so a server can do its side effects once."""
"""The CUSTOM event name of a progress notification."""
FIRST_RETRY = 0.5
MAX_RETRY = 30.0
STABLE_AFTER = 10.0
"""A connection that lived this long resets the backoff; quicker losses keep doubling it."""
CALL_GRACE = 2.0
"""Seconds the run loop waits past a call's own timeout (the call reports its timeout)."""
MCP_SOURCE = "mcp:"
"""The registry source of an MCP server's tools: ``mcp:NAME``."""
_MAX_PAGES = 100
_CLIENT_INFO = mcp_types.Implementation(name="agentik", version=__version__)


class SourceState(enum.StrEnum):
    STARTING = "starting"
    CONNECTING = "connecting"
    READY = "ready"
    UNAVAILABLE = "unavailable"
    """Not connected; a reconnect is scheduled (``reason`` says why)."""
    STOPPED = "stopped"


class McpTool(Tool):
    """One tool of an MCP server, as the registry and the LLM see it."""

    def __init__(self, source: McpToolSource, name: str, remote: mcp_types.Tool) -> None:
        self._source = source
        self.name = name
        self.remote_name = remote.name
        self.source = MCP_SOURCE + source.config.name
        self.timeout = source.call_timeout + CALL_GRACE
        self.update(remote)

    def update(self, remote: mcp_types.Tool) -> None:
        """Take the server's current description and schema."""
        self.description = remote.description or remote.title or ""
        schema: dict[str, JSON] = dict(remote.input_schema)
        schema.setdefault("type", "object")
        self.parameters = schema

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        return await self._source.call(self.remote_name, arguments, context)


class McpToolSource:
    """One configured MCP server: its connection, kept alive, and its tools in the registry."""

    def __init__(
        self, config: McpServerConfig, registry: ToolRegistry, *, default_call_timeout: float
    ) -> None:
        self.config = config
        self.registry = registry
        self.call_timeout = config.call_timeout or default_call_timeout
        self.log = logging.getLogger(f"{__package__}.{config.name}")
        self._stderr_log = self.log.getChild("stderr")
        self.state = SourceState.STARTING
        self.reason = ""
        """Why the server is not ready (empty when it is)."""
        self.protocol_version = ""
        self.connections = 0
        """How many times a connection became ready."""
        self.attempts = 0
        """How many connection attempts have ended, in success or failure."""
        self._last_stderr = ""
        self._client: Client | None = None
        self._tools: dict[str, McpTool] = {}
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._lost: str | None = None
        self._refresh = False
        self._stopping = False

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background; returns at once."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"mcp server {self.config.name}"
            )

    async def stop(self) -> None:
        """Close the connection (stopping a stdio server) and remove the tools."""
        task, self._task = self._task, None
        if task is not None:
            self._stopping = True
            self._wake.set()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._client = None
        self.registry.unregister_source(MCP_SOURCE + self.config.name)
        self._tools = {}
        self._set_state(SourceState.STOPPED, "")

    async def wait_until(self, predicate: Callable[[McpToolSource], bool], within: float) -> None:
        """Wait until ``predicate(self)`` holds; TimeoutError after ``within`` seconds."""
        async with asyncio.timeout(within):
            while not predicate(self):
                await self._changed.wait()

    async def wait_ready(self, within: float) -> None:
        """Wait until the server is connected and its tools are registered."""
        await self.wait_until(lambda s: s.state is SourceState.READY, within)

    def describe(self) -> str:
        """A one-line status for listings."""
        if self.state is SourceState.READY:
            return f"ready ({len(self._tools)} tools, protocol {self.protocol_version})"
        return f"{self.state}: {self.reason}" if self.reason else str(self.state)

    # -- calls ----------------------------------------------------------------------

    async def call(
        self, remote: str, arguments: dict[str, JSON], context: ToolContext
    ) -> ToolResult:
        """Call the server's tool ``remote``; failures become error results."""
        progress = CallProgress(context, self.config.max_progress_events)
        try:
            result = await self._call(remote, arguments, context, progress)
            progress.finish()
            return result
        finally:
            progress.cancel()
            log_dropped(self.log, self.config.name, remote, progress)

    async def _call(
        self,
        remote: str,
        arguments: dict[str, JSON],
        context: ToolContext,
        progress: CallProgress,
    ) -> ToolResult:
        client = self._client
        name = self.config.name
        if client is None:
            # The status may name the server's address or command: for the log, not clients.
            self.log.warning("MCP server %r called while not connected: %s", name, self.describe())
            return _error(f"MCP server {name!r} is not connected")
        try:
            meta = mcp_types.RequestParamsMeta()
            meta[IDEMPOTENCY_META_KEY] = context.idempotency_key  # type: ignore[literal-required]
            result = await client.call_tool(
                remote,
                arguments,
                read_timeout_seconds=self.call_timeout,
                progress_callback=progress,
                meta=meta,
            )
        except MCPError as exc:
            if exc.code == mcp_types.REQUEST_TIMEOUT:
                return self._failed(
                    f"MCP tool {remote!r} of server {name!r} timed out after "
                    f"{self.call_timeout:g} s; the server was asked to cancel it"
                )
            if exc.code == mcp_types.CONNECTION_CLOSED:
                self._connection_lost(self._closed_reason(exc.error.message))
                return self._failed(
                    f"MCP server {name!r} disconnected during the call ({self._lost}); reconnecting"
                )
            if exc.code == mcp_types.PARSE_ERROR:
                return self._failed(self._unreadable(exc.error.message))
            # The server answered: a tool error like any other, not a server failure.
            return _error(f"MCP server {name!r} refused the call: {exc.error.message}")
        except ValidationError as exc:
            return self._failed(f"MCP server {name!r} sent an invalid result: {exc}")
        except (httpx2.HTTPError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            self._connection_lost(_describe(exc, self.config))
            # The exception may name the server's URL: the log has it, the result does not.
            self.log.warning("MCP server %r unreachable during a call: %r", name, exc)
            return self._failed(f"MCP server {name!r} is unreachable")
        except RuntimeError:
            if self._client is client:
                raise
            return self._failed(f"MCP server {name!r} disconnected during the call; reconnecting")
        return tool_result(result)

    def _closed_reason(self, message: str) -> str:
        """Why a call's connection closed: an event over the limit is said as such (the SDK
        ends the call with ``CONNECTION_CLOSED`` and httpx2's wording)."""
        if "byte limit" in message:
            limit = self.config.max_message_bytes
            return f"the server sent an event over {limit} bytes (max_message_bytes)"
        return "the connection closed during a call"

    def _unreadable(self, message: str) -> str:
        """The error of an answer the SDK could not read (its own wording stays in the log)."""
        name = self.config.name
        if "max_message_bytes" in message:
            limit = self.config.max_message_bytes
            return f"MCP server {name!r} sent an answer over {limit} bytes (max_message_bytes)"
        self.log.warning("MCP server %r sent an unreadable answer: %s", name, message)
        return f"MCP server {name!r} sent an answer that is not valid JSON-RPC"

    def _failed(self, message: str) -> ToolResult:
        """A call the server failed (not answered, timed out, cut): logged, and the result."""
        self.log.warning("MCP tool call failed: %s", message)
        return _error(message)

    # -- the connection -------------------------------------------------------------

    async def _run(self) -> None:
        self.log.info(
            "MCP server %r: %s %s", self.config.name, self.config.transport, self.config.target
        )
        failures = 0
        while True:
            self._set_state(SourceState.CONNECTING, self.reason)
            started, connections = time.monotonic(), self.connections
            try:
                await self._session()
                reason = self._lost or "the connection ended"
            except Exception as exc:
                reason = _describe(exc, self.config, self._last_stderr)
            except BaseException as exc:
                # ``stop`` cancels this task, and that must end it; a cancellation the SDK's
                # task groups let out when we were not stopping is a lost connection. (The
                # flag, not ``Task.cancelling()``: anyio's scopes may uncancel the task.)
                stray = isinstance(exc, asyncio.CancelledError | BaseExceptionGroup)
                if self._stopping or not stray:
                    raise
                reason = _describe(exc, self.config, self._last_stderr)
            finally:
                self._detach()
            if self._stopping:
                return
            if self.connections == connections:
                self.attempts += 1  # a failed attempt (a successful one counted when ready)
            elif time.monotonic() - started >= STABLE_AFTER:
                failures = 0
            delay = min(MAX_RETRY, FIRST_RETRY * 2**failures) * random.uniform(0.9, 1.1)
            failures += 1
            # The same failure again is logged quietly: a dead server retries for ever.
            level = logging.DEBUG if reason == self.reason else logging.WARNING
            self.log.log(
                level,
                "MCP server %r unavailable: %s; retrying in %.1f s",
                self.config.name,
                reason,
                delay,
            )
            self._set_state(SourceState.UNAVAILABLE, reason)
            await asyncio.sleep(delay)

    async def _session(self) -> None:
        """Connect, serve, and return (or raise) when the connection is gone."""
        self._lost, self._refresh, self._last_stderr = None, False, ""
        self._wake.clear()
        # An HTTP stream stays open for a whole call, so it may be silent that long.
        read_timeout = max(STREAM_READ_TIMEOUT, self.call_timeout + CALL_GRACE)
        client = Client(
            open_transport(self.config, read_timeout, self._on_stderr, self._on_stream_end),
            message_handler=self._on_message,
            read_timeout_seconds=self.call_timeout,
            client_info=_CLIENT_INFO,
            cache=None,
        )
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(self.config.connect_timeout):
                await stack.enter_async_context(client)
                self.protocol_version = client.protocol_version
                if self.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    # Listen before listing, so no change can fall between the two.
                    listening = asyncio.Event()
                    listener = asyncio.get_running_loop().create_task(
                        self._listen(client, listening)
                    )
                    stack.push_async_callback(_cancel_and_wait, listener)
                    await listening.wait()
                await self._refresh_tools(client)
            self._client = client
            self.connections += 1
            self.attempts += 1
            self.log.info(
                "MCP server %r connected (%s, protocol %s): %d tools",
                self.config.name,
                self.config.transport,
                self.protocol_version,
                len(self._tools),
            )
            self._set_state(SourceState.READY, "")
            await self._watch(client)

    async def _watch(self, client: Client) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._lost is not None or self._stopping:
                return
            if self._refresh:
                self._refresh = False
                try:
                    await self._refresh_tools(client)
                except (MCPError, TimeoutError, ValidationError) as exc:
                    if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                        return
                    self.log.warning("re-listing the tools of %r failed: %s", self.config.name, exc)
                self._set_state(SourceState.READY, "")

    async def _listen(self, client: Client, listening: asyncio.Event) -> None:
        """Keep a change stream open so the server can announce tool-list changes;
        ``listening`` is set once it is open (or known to be unavailable)."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                listening.set()
                async for _event in subscription:
                    self._want_refresh()
        except (ListenNotSupportedError, MCPError) as exc:
            self.log.info("MCP server %r sends no tool-list changes: %s", self.config.name, exc)
            return
        except SubscriptionLost:
            pass
        finally:
            listening.set()
        self._connection_lost("the server's change stream ended")

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            self.log.debug("transport error from %r: %r", self.config.name, message)
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            self._want_refresh()

    def _on_stream_end(self, reason: str) -> None:
        self._connection_lost(reason)

    def _on_stderr(self, line: str) -> None:
        self._last_stderr = line
        self._stderr_log.info("%s", line)

    def _want_refresh(self) -> None:
        self._refresh = True
        self._wake.set()

    def _connection_lost(self, reason: str) -> None:
        if self._lost is None:
            self._lost = reason
        self._wake.set()

    def _detach(self) -> None:
        self._client = None
        for name in self._tools:
            if self.registry.get(name) is self._tools[name]:
                self.registry.set_status(name, DISCONNECTED)

    def _set_state(self, state: SourceState, reason: str) -> None:
        self.state, self.reason = state, reason
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # -- tools ----------------------------------------------------------------------

    async def _refresh_tools(self, client: Client) -> None:
        allowed = self.config.tools
        limit = self.config.max_tools
        listed: list[mcp_types.Tool] = []
        seen: set[str] = set()
        over = False
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                if allowed is not None and tool.name not in allowed:
                    continue
                seen.add(tool.name)
                if len(listed) == limit:
                    over = True
                    break
                if self._fits(tool):
                    listed.append(tool)
            cursor = page.next_cursor
            if cursor is None or over:
                break
        if over:
            self.log.error(
                "MCP server %r offers more than %d tools (max_tools): only its first %d are "
                "offered; raise max_tools or name the tools wanted in 'tools'",
                self.config.name,
                limit,
                limit,
            )
        if allowed is not None and not over:
            missing = set(allowed) - seen
            if missing:
                self.log.warning(
                    "MCP server %r does not offer the allowed tools %s",
                    self.config.name,
                    ", ".join(sorted(missing)),
                )
        self._install(listed)

    def _fits(self, tool: mcp_types.Tool) -> bool:
        """Whether a tool's description and schema fit ``max_tool_bytes`` (else: logged)."""
        size = len((tool.description or "").encode()) + len((tool.title or "").encode())
        size += len(json.dumps(tool.input_schema, separators=(",", ":")))
        if size <= self.config.max_tool_bytes:
            return True
        self.log.error(
            "MCP tool %r of server %r is not offered: its description and input schema "
            "take %d bytes, over max_tool_bytes (%d)",
            tool.name,
            self.config.name,
            size,
            self.config.max_tool_bytes,
        )
        return False

    def _install(self, listed: Sequence[mcp_types.Tool]) -> None:
        fresh: dict[str, McpTool] = {}
        for remote in listed:
            name = tool_name(self.config.name, remote.name)
            if name in fresh:
                name = disambiguate(name, remote.name)
            tool = self._tools.get(name)
            if tool is not None and tool.remote_name == remote.name:
                tool.update(remote)
            else:
                tool = McpTool(self, name, remote)
            fresh[name] = tool
        for name, old in self._tools.items():
            if fresh.get(name) is not old and self.registry.get(name) is old:
                self.registry.unregister(name)
        installed: dict[str, McpTool] = {}
        for name, tool in fresh.items():
            if self.registry.get(name) is tool:
                self.registry.set_status(name, READY)
            elif name in self.registry:
                self.log.warning(
                    "MCP tool %r of server %r is not offered: the name %r is taken by %s",
                    tool.remote_name,
                    self.config.name,
                    name,
                    self.registry.source_of(name),
                )
                continue
            else:
                self.registry.register(tool, source=MCP_SOURCE + self.config.name)
            installed[name] = tool
        if installed.keys() != self._tools.keys() and self.connections:
            self.log.info(
                "MCP server %r changed its tools: now %s", self.config.name, ", ".join(installed)
            )
        self._tools = installed


def _error(text: str) -> ToolResult:
    return ToolResult(f"error: {text}", is_error=True)


async def _cancel_and_wait(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException, config: McpServerConfig, stderr: str = "") -> str:
    """Why a connection failed, in words for the log and ``agentik tools``."""
    leaves = [e for e in _leaves(exc) if not isinstance(e, asyncio.CancelledError)] or [exc]
    first = leaves[0]
    said = f" (its last stderr line: {stderr!r})" if stderr else ""
    if isinstance(first, TimeoutError):
        return f"no answer within the connect timeout of {config.connect_timeout:g} s{said}"
    if isinstance(first, OSError) and config.transport == "stdio":
        where = f" ({first.filename})" if first.filename not in (None, config.command) else ""
        return f"cannot start {config.command!r}: {first.strerror or first}{where}"
    if isinstance(first, httpx2.HTTPStatusError):
        return f"HTTP {first.response.status_code} from {config.target}"
    if isinstance(first, httpx2.HTTPError):
        return f"cannot reach {config.target}: {first or type(first).__name__}"
    if isinstance(first, MCPError):
        if first.code == mcp_types.CONNECTION_CLOSED:
            return f"the server closed the connection{said}"
        return f"MCP error {first.code}: {first.error.message}{said}"
    return f"{type(first).__name__}: {first}{said}"
