"""The MCP server over streamable HTTP, as a WSGI app for the facade's ``/mcp``.

The SDK's HTTP server is ASGI (Starlette); the facade is WSGI under gunicorn ``gthread``.
``a2wsgi`` bridges them: each worker process runs one event loop in a thread of its own,
where the SDK's session manager lives and the tools' gRPC calls run; every request is
handed to that loop and its response streamed back by the worker thread serving it.

Everything is made lazily, on the first ``/mcp`` request of a process (after gunicorn's
fork, like the gRPC channel), so a facade nobody asks for MCP never imports the SDK.

Every engine call goes through the facade's one engine client (web_facade/engine_client.py):
its blocking stub runs in the loop's executor, a pool of :data:`ENGINE_THREADS` threads
(asyncio's default, a handful per core, would let a few long answers hold every call).

The SDK's own HTTP errors (plain text, or a JSON-RPC error body) leave as the facade's JSON
error shape (``{"error": {"code", "message"}}``, web_facade/errors.py); ``routes`` refuses
what it can before the SDK sees the request. The exception is the JSON-RPC error that
answers a request the SDK could read (it has an id): with protocol 2026-07-28 such errors
travel with HTTP 400 or 404 (invalid params, a method not found, a missing client
capability, a header mismatch), and the client needs their code, so they pass as they are.

The server is stateless (``stateless_http``): gunicorn gives each request to any worker,
so no MCP session may live in one worker's memory. With protocol 2026-07-28 every call is
one POST and its response stream, and cancelling is closing that stream, which the worker
notices when a write fails (the SDK's keepalive pings and the progress notifications make
writes). The token is each request's ``Authorization`` header, forwarded to the engine.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from web_facade.errors import HTTP_CODES, error_body

if TYPE_CHECKING:
    from web_facade.engine_client import EngineClient

__all__ = ["ENGINE_THREADS", "PATH", "McpHttpApp"]

PATH = "/mcp"
"""Where the facade serves MCP."""

_START_TIMEOUT = 10.0

ENGINE_THREADS = 64
"""Threads a worker process's MCP loop runs blocking engine calls in."""


class McpHttpApp:
    """A WSGI app serving agentik's MCP tools (:mod:`web_facade.mcp.server`) at :data:`PATH`."""

    def __init__(self, engine: EngineClient, max_body_bytes: int) -> None:
        self.engine = engine
        self.max_body_bytes = max_body_bytes
        self._lock = threading.Lock()
        self._pid = 0
        self._wsgi: Callable[..., Iterable[bytes]] | None = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if self._pid != os.getpid():
            self._start()
        assert self._wsgi is not None
        return self._wsgi(environ, start_response)

    def _start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            from mcp.server.transport_security import TransportSecuritySettings

            from web_facade.mcp.server import EngineAccess, build_server

            engine = self.engine
            server = build_server(EngineAccess(engine, from_request=True))
            # The facade's host guard (web_facade/hosts.py) has checked the Host header
            # already, with the facade's own rules.
            security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            asgi = server.streamable_http_app(
                streamable_http_path=PATH,
                stateless_http=True,
                transport_security=security,
                max_request_body_size=self.max_body_bytes,  # routes read it with ours
            )
            loop = asyncio.new_event_loop()
            loop.set_default_executor(
                ThreadPoolExecutor(ENGINE_THREADS, thread_name_prefix="agentik-mcp-engine")
            )
            ready = threading.Event()

            async def serve() -> None:
                async with server.session_manager.run():
                    ready.set()
                    await asyncio.Event().wait()  # for the life of the process

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.run_until_complete(serve())

            threading.Thread(target=run, name="agentik-mcp", daemon=True).start()
            if not ready.wait(_START_TIMEOUT):
                raise RuntimeError("the MCP server's event loop did not start")
            self._wsgi = _json_errors(_wsgi_app(asgi, loop))
            self._pid = os.getpid()


def _wsgi_app(asgi: Any, loop: asyncio.AbstractEventLoop) -> Callable[..., Iterable[bytes]]:
    """``asgi`` as a WSGI app, its requests run in ``loop``.

    a2wsgi's own ``ASGIMiddleware`` leaves the ASGI task waiting forever when the WSGI
    server closes the response early (the client went away): its body generator stops at a
    ``yield`` and never reaches the code that cancels the task. Here closing the body
    cancels the task, so a client that closes an MCP response stream cancels the tool call
    and with it the engine's run.
    """
    from a2wsgi.asgi import ASGIResponder

    class Responder(ASGIResponder):
        task: asyncio.Task[None] | None = None

        async def start_asgi_app(self, environ: Any) -> asyncio.Task[None]:
            self.task = await super().start_asgi_app(environ)
            return self.task

    class Body:
        def __init__(self, responder: Responder, chunks: Any) -> None:
            self.responder, self.chunks = responder, chunks

        def __iter__(self) -> Any:
            return iter(self.chunks)

        def close(self) -> None:
            self.chunks.close()
            task = self.responder.task
            if task is not None:
                self.responder.loop.call_soon_threadsafe(task.cancel)

    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        responder = Responder(asgi, loop)
        return Body(responder, responder(environ, start_response))  # type: ignore[arg-type]

    return app


def _json_errors(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """``app`` whose error responses (4xx, 5xx) carry the facade's JSON error body."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        failed: list[tuple[int, list[tuple[str, str]]]] = []

        def capture(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            code = int(status.split(" ", 1)[0])
            if code < 400:
                return start_response(status, headers, exc_info)
            failed.append((code, headers))
            return lambda data: None

        return _Rewritten(app(environ, capture), failed, start_response)

    return wrapped


class _Rewritten:
    """The response body of :func:`_json_errors`: passed through, or, once the app
    answered an error, collected and said again in the facade's shape."""

    def __init__(
        self,
        chunks: Iterable[bytes],
        failed: list[tuple[int, list[tuple[str, str]]]],
        start_response: Any,
    ) -> None:
        self.chunks, self.failed, self.start_response = chunks, failed, start_response

    def __iter__(self) -> Iterator[bytes]:
        inner = iter(self.chunks)
        for chunk in inner:
            if not self.failed:
                yield chunk
                continue
            yield self._error(chunk + b"".join(inner))
            return
        if self.failed:  # an error with an empty body
            yield self._error(b"")

    def _error(self, body: bytes) -> bytes:
        status, headers = self.failed[0]
        answer = _rpc_error(body)
        if answer is not None:
            kept = [(k, v) for k, v in headers if k.lower() not in _REPLACED_HEADERS]
            kept += [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))]
            self.start_response(f"{status} {_REASONS.get(status, 'Error')}", kept)
            return answer
        code = HTTP_CODES.get(status, f"http_{status}")
        out = json.dumps(error_body(code, _sdk_message(body, status))).encode()
        kept = [(k, v) for k, v in headers if k.lower() not in _REPLACED_HEADERS]
        kept += [("Content-Type", "application/json"), ("Content-Length", str(len(out)))]
        self.start_response(f"{status} {_REASONS.get(status, 'Error')}", kept)
        return out

    def close(self) -> None:
        close = getattr(self.chunks, "close", None)
        if close is not None:
            close()


_REPLACED_HEADERS = frozenset({"content-type", "content-length"})
_REASONS = {
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    406: "Not Acceptable",
    409: "Conflict",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    421: "Misdirected Request",
    500: "Internal Server Error",
}


_OUR_WORDS = frozenset({-32700, -32600})
"""JSON-RPC errors said in the facade's shape even with an id: a body that is not JSON or
not a request (the SDK words them with its parser's messages)."""


def _rpc_error(body: bytes) -> bytes | None:
    """``body`` when it is a JSON-RPC error answering a request with an id (its message
    without the SDK's validation wording), else None."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or parsed.get("jsonrpc") != "2.0" or parsed.get("id") is None:
        return None
    error = parsed.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("code"), int):
        return None
    if error["code"] in _OUR_WORDS:
        return None
    message = str(error.get("message", ""))
    if "validation error" in message.lower() or "pydantic" in message or len(message) > 300:
        error["message"] = "invalid params" if error["code"] == -32602 else "invalid request"
        error.pop("data", None)
    return json.dumps(parsed, separators=(",", ":")).encode()


def _sdk_message(body: bytes, status: int) -> str:
    """What the SDK said, without its parser's or pydantic's wording."""
    text = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        text = str(parsed["error"].get("message", ""))
    if status >= 500:
        return "the MCP server failed to handle the request"
    if text.startswith(("Validation error", "Parse error")) or not text or len(text) > 300:
        return "the request is not an MCP JSON-RPC message this server takes"
    return text
