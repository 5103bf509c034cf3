"""The MCP server over streamable HTTP, as a WSGI app for the facade's ``/mcp``.

The SDK's HTTP server is ASGI (Starlette); the facade is WSGI under gunicorn ``gthread``.
``a2wsgi`` bridges them: each worker process runs one event loop in a thread of its own,
where the SDK's session manager lives and the tools' gRPC calls run; every request is
handed to that loop and its response streamed back by the worker thread serving it.

Everything is made lazily, on the first ``/mcp`` request of a process (after gunicorn's
fork, like the gRPC channel), so a facade nobody asks for MCP never imports the SDK.

The server is stateless (``stateless_http``): gunicorn gives each request to any worker,
so no MCP session may live in one worker's memory. With protocol 2026-07-28 every call is
one POST and its response stream, and cancelling is closing that stream, which the worker
notices when a write fails (the SDK's keepalive pings and the progress notifications make
writes). The token is each request's ``Authorization`` header, forwarded to the engine.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PATH", "McpHttpApp"]

PATH = "/mcp"
"""Where the facade serves MCP."""

_START_TIMEOUT = 10.0


class McpHttpApp:
    """A WSGI app serving agentik's MCP tools (:mod:`web_facade.mcp.server`) at :data:`PATH`."""

    def __init__(self, target: str) -> None:
        self.target = target
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

            server = build_server(EngineAccess(self.target, from_request=True))
            # The facade's host guard (web_facade/hosts.py) has checked the Host header
            # already, with the facade's own rules.
            security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            asgi = server.streamable_http_app(
                streamable_http_path=PATH, stateless_http=True, transport_security=security
            )
            loop = asyncio.new_event_loop()
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
            self._wsgi = _wsgi_app(asgi, loop)
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
