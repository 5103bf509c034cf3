"""``agentik mcp``'s stdin: each line checked before the MCP SDK parses it.

The SDK's stdio reader hands a line it cannot parse to the session as an exception, and the
session drops it: a request holding a lone UTF-16 surrogate (``"\\ud800"``), nested deeper
than pydantic goes, or not shaped as a JSON-RPC message got no answer at all, and nothing
was logged; the client waited for its own timeout. ``/mcp`` over HTTP refuses the same
bodies before the SDK sees them (``web_facade/mcp/routes.py``). Here each line is read the
same way (``web_facade.request_body.check_json``) and a line refused is answered on stdout
with a JSON-RPC error naming the problem (the request's id when it can be read, else null;
a notification gets none, as JSON-RPC says) and logged on stderr. The lines that pass go to
the SDK as before, which still writes stdout and keeps the process's stray output off it.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from pydantic import ValidationError

from web_facade.mcp.ids import id_problem
from web_facade.request_body import MAX_JSON_DEPTH, UnacceptableJson, check_json

__all__ = ["Refusal", "refusal_of", "serve_stdio"]

log = logging.getLogger(__name__)

NOT_A_MESSAGE = (
    'a line must be one JSON-RPC 2.0 message: an object with jsonrpc "2.0" and a method '
    "(a request or a notification), or a result or error (a response)"
)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A line the server does not take: the JSON-RPC error it answers (when ``answer``)."""

    id: int | str | None
    code: int
    message: str
    answer: bool = True
    """False for a notification: JSON-RPC answers none (the log still says why)."""


def _id_of(value: object) -> int | str | None:
    """The request id of a parsed message, when it has one JSON-RPC allows."""
    if not isinstance(value, dict):
        return None
    found = value.get("id")
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return found
    return None


def _is_notification(value: object) -> bool:
    return isinstance(value, dict) and "method" in value and "id" not in value


def _shape_problem(value: object) -> str | None:
    """Why ``value`` is no JSON-RPC message the SDK takes (None: it is one)."""
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return NOT_A_MESSAGE
    problem = id_problem(value)
    if problem is not None:  # the SDK would take it for a notification, and answer nothing
        return problem
    if "method" in value:
        if not isinstance(value["method"], str) or not isinstance(value.get("params", {}), dict):
            return NOT_A_MESSAGE
    elif "id" not in value or ("result" not in value and "error" not in value):
        return NOT_A_MESSAGE
    try:
        types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as exc:
        errors = exc.errors()
        if not errors:
            return NOT_A_MESSAGE
        loc = [str(part) for part in errors[0]["loc"] if not str(part).startswith("JSONRPC")]
        return f"{NOT_A_MESSAGE}; {'.'.join(loc) or 'the message'}: {errors[0]['msg']}"
    return None


def refusal_of(line: bytes) -> Refusal | None:
    """Why the server refuses one line of stdin, or None when the SDK may have it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Refusal(None, PARSE_ERROR, f"the message is not valid UTF-8 (at byte {exc.start})")
    try:
        value = json.loads(text)
    except RecursionError:
        deep = f"nested deeper than {MAX_JSON_DEPTH} levels, the limit for a message"
        return Refusal(None, PARSE_ERROR, f"the message is {deep}")
    except ValueError as exc:  # JSONDecodeError, or a number of too many digits
        return Refusal(None, PARSE_ERROR, f"the message is not valid JSON: {exc}")
    answer = not _is_notification(value)
    try:
        check_json(value)
    except UnacceptableJson as exc:
        code = INVALID_PARAMS if exc.path[:1] == ("params",) else INVALID_REQUEST
        return Refusal(_id_of(value), code, str(exc), answer)
    problem = _shape_problem(value)
    if problem is not None:
        return Refusal(_id_of(value), INVALID_REQUEST, problem, answer)
    return None


class _CheckedLines:
    """stdin's lines for the SDK's reader, less the ones refused (answered here)."""

    def __init__(self, source: AsyncIterable[bytes]) -> None:
        self._source = source
        self._write: Any = None
        self._ready = anyio.Event()

    def answer_with(self, write: Any) -> None:
        """Where refusals are written: the SDK's stream of messages to stdout."""
        self._write = write
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        await self._ready.wait()
        async for line in self._source:
            if not line.strip():
                continue  # no message at all: nothing to answer
            refusal = refusal_of(line)
            if refusal is None:
                yield line.decode("utf-8")
                continue
            log.warning("refused a message on stdin (id %r): %s", refusal.id, refusal.message)
            if refusal.answer:
                error = types.ErrorData(code=refusal.code, message=refusal.message)
                reply = types.JSONRPCError(jsonrpc="2.0", id=refusal.id, error=error)
                await self._write.send(SessionMessage(reply))


async def serve_stdio(server: MCPServer[Any]) -> None:
    """Serve ``server`` on stdin and stdout, each line checked first (see the module)."""
    lines = _CheckedLines(anyio.wrap_file(sys.stdin.buffer))
    # The SDK claims stdout (stray output goes to stderr); stdin is read here.
    async with stdio_server(stdin=cast(Any, lines)) as (read_stream, write_stream):
        lines.answer_with(write_stream)
        lowlevel = server._lowlevel_server  # what the SDK's run_stdio_async runs
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
