"""Calls taken ahead: more than one waiting accept for each of the engine's gRPC methods.

``grpc.aio``'s server asks gRPC core for a method's next call only once the last one has
reached the event loop (one outstanding ``request_call`` per method): a burst of N calls
to ``Run`` is taken one call after another, each a few turns of the loop, and under load
each turn is long. gRPC core is built to be asked ahead (each outstanding request is
matched at once by a call that arrives). :class:`CallsAhead` keeps ``[engine]
accept_ahead`` more requests outstanding for every registered method, each call then
served by ``grpc.aio``'s own handler: the same servicers, interceptors, cancellation and
shutdown as the calls its own loop takes.

This leans on ``grpc.aio``'s private server API (``AioServer._request_registered_call``,
``cygrpc._handle_rpc``, ``cygrpc._schedule_rpc_coro``, ``cygrpc._MethodResolver``). Each
is checked before use; with a ``grpcio`` that lacks one, the engine logs it once and takes
calls ``grpc.aio``'s way (``tests/engine/test_accept.py`` fails on such a ``grpcio``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any

import grpc
from grpc._cython import cygrpc  # type: ignore[attr-defined]

__all__ = ["CallsAhead", "Recording", "supported"]

_log = logging.getLogger(__name__)

_HANDLE_RPC_PARAMETERS = (
    "method_name",
    "method_resolver",
    "interceptors",
    "rpc_state",
    "loop",
    "concurrency_exceeded",
)
_SCHEDULE_PARAMETERS = ("rpc_coro", "rpc_state", "loop", "method_name")


def _parameters(function: Any) -> tuple[str, ...]:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return ()


def supported() -> str:
    """Empty when this ``grpcio`` has what :class:`CallsAhead` uses; else what it lacks."""
    if not hasattr(cygrpc, "AioServer") or not hasattr(
        cygrpc.AioServer, "_request_registered_call"
    ):
        return "AioServer._request_registered_call"
    if not hasattr(cygrpc, "_MethodResolver"):
        return "cygrpc._MethodResolver"
    if _parameters(getattr(cygrpc, "_handle_rpc", None)) != _HANDLE_RPC_PARAMETERS:
        return "cygrpc._handle_rpc" + str(_HANDLE_RPC_PARAMETERS)
    if _parameters(getattr(cygrpc, "_schedule_rpc_coro", None)) != _SCHEDULE_PARAMETERS:
        return "cygrpc._schedule_rpc_coro" + str(_SCHEDULE_PARAMETERS)
    return ""


class Recording:
    """Stands for a ``grpc.aio.Server`` in the generated ``add_*Servicer_to_server``
    functions: registers with the server and keeps each method's handler."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self.server = server
        self.handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self.server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler[Any, Any]]
    ) -> None:
        self.server.add_registered_method_handlers(service, handlers)
        self.handlers.update({f"/{service}/{name}": h for name, h in handlers.items()})


class CallsAhead:
    """``ahead`` more outstanding requests for each of ``handlers``' methods, kept from
    :meth:`start` (after the server's) until the server stops."""

    def __init__(
        self,
        server: grpc.aio.Server,
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]],
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        ahead: int,
    ) -> None:
        self._server = server
        self._handlers = dict(handlers)
        self._interceptors = tuple(interceptors)
        self.ahead = ahead
        self._takers: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[Any]] = set()

    @property
    def waiting(self) -> int:
        """Requests outstanding beside ``grpc.aio``'s own (``ahead`` for each method)."""
        return sum(not task.done() for task in self._takers)

    def start(self) -> None:
        if not self.ahead or not self._handlers:
            return
        lacking = supported()
        if lacking:
            _log.warning(
                "grpcio %s lacks %s: the engine takes each method's calls one at a time",
                grpc.__version__,
                lacking,
            )
            return
        core = self._server._server  # type: ignore[attr-defined]  # cygrpc.AioServer
        try:
            resolver = cygrpc._MethodResolver([], self._handlers)
        except TypeError as exc:
            _log.warning(
                "grpcio %s: %s: the engine takes each method's calls one at a time",
                grpc.__version__,
                exc,
            )
            return
        loop = asyncio.get_running_loop()
        for method in self._handlers:
            for _ in range(self.ahead):
                task = loop.create_task(self._take(core, resolver, method, loop))
                self._takers.add(task)
                task.add_done_callback(self._takers.discard)

    async def _take(
        self, core: Any, resolver: Any, method: str, loop: asyncio.AbstractEventLoop
    ) -> None:
        """Take ``method``'s calls one after another while the server runs."""
        name = method.encode()
        while core.is_running():
            try:
                state = await core._request_registered_call(name)
            except Exception:  # the server is stopping: its outstanding requests fail
                if core.is_running():
                    _log.exception("taking a call of %s failed", method)
                return
            call = cygrpc._handle_rpc(method, resolver, self._interceptors, state, loop, False)
            task = loop.create_task(
                cygrpc._schedule_rpc_coro(call, state, loop, method), name="rpc_task"
            )
            self._calls.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._calls.discard)

    async def stop(self, within: float = 1.0) -> None:
        """After the server stopped, whose outstanding requests then fail: the takers end.
        (Cancelled before, a taker would leave its request to a call nobody serves.)"""
        if self._takers:
            await asyncio.wait(set(self._takers), timeout=within)
        for task in set(self._takers):
            task.cancel()
