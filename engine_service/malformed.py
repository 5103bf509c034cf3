"""Requests whose bytes are not the method's message: INVALID_ARGUMENT, in our words.

gRPC answers a request it cannot parse (bytes that are not protobuf, a string field that is
not UTF-8, nesting past protobuf's recursion limit) with UNKNOWN and protobuf's own text
(``Unexpected <class 'google.protobuf.message.DecodeError'>: ...``): a server error for a
client's mistake, and internal wording. Any client that does not use our stubs can send such
bytes. ``MalformedRequests`` wraps every method's deserializer so that a failure to parse
becomes a ``Malformed`` marker, and the method answers the marker with INVALID_ARGUMENT
naming the method, before the servicer (or the health and reflection services) reads it.

Server streams the servicer checks itself (``refuse_malformed``, first thing in ``Run`` and
``Subscribe``) keep their behaviour unwrapped: a wrapper costs a hop per event.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeAlias

import grpc

__all__ = ["Malformed", "MalformedRequests", "refuse_malformed"]

_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class Malformed:
    """What a request that failed to parse becomes; ``reason`` is our words for why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _reason(exc: Exception) -> str:
    if "UTF-8" in str(exc):
        return "a string field holds bytes that are not UTF-8"
    return "its bytes are not a valid protobuf message (or nest too deep)"


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # DecodeError, RecursionError, ...: the client's bytes
            return Malformed(_reason(exc))

    return parse


async def refuse_malformed(context: _Context, method: str, request: object) -> None:
    """Abort with INVALID_ARGUMENT when ``request`` did not parse; else nothing."""
    if isinstance(request, Malformed):
        context.set_trailing_metadata((("agentik-error", "invalid_argument"),))
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the {method} request is malformed: {request.reason}",
        )


def _unary_request(behaviour: Any, method: str, streaming: bool) -> Any:
    if streaming and inspect.isasyncgenfunction(behaviour):

        async def stream(request: Any, context: _Context) -> AsyncIterator[Any]:
            await refuse_malformed(context, method, request)
            async for response in behaviour(request, context):
                yield response

        return stream

    # A unary answer, or a stream written with ``context.write`` (health's Watch).
    async def unary(request: Any, context: _Context) -> Any:
        await refuse_malformed(context, method, request)
        return await behaviour(request, context)

    return unary


async def _checked(requests: AsyncIterator[Any], context: _Context, method: str) -> Any:
    async for request in requests:
        await refuse_malformed(context, method, request)
        yield request


def _stream_request(behaviour: Any, method: str, streaming: bool) -> Any:
    if streaming and inspect.isasyncgenfunction(behaviour):

        async def stream(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
            async for response in behaviour(_checked(requests, context, method), context):
                yield response

        return stream

    async def unary(requests: AsyncIterator[Any], context: _Context) -> Any:  # or written
        return await behaviour(_checked(requests, context, method), context)

    return unary


def _guarded(handler: _Handler, method: str, self_checked: bool) -> _Handler:
    kinds = (
        (handler.unary_unary, grpc.unary_unary_rpc_method_handler, _unary_request, False),
        (handler.unary_stream, grpc.unary_stream_rpc_method_handler, _unary_request, True),
        (handler.stream_unary, grpc.stream_unary_rpc_method_handler, _stream_request, False),
        (handler.stream_stream, grpc.stream_stream_rpc_method_handler, _stream_request, True),
    )
    name = method.rpartition("/")[2]
    for behaviour, make, wrap, streaming in kinds:
        if behaviour is not None:
            return make(
                behaviour if self_checked else wrap(behaviour, name, streaming),
                request_deserializer=_safe(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
    return handler


class MalformedRequests(grpc.aio.ServerInterceptor):
    """Every method of the server: a request that does not parse is INVALID_ARGUMENT.

    ``self_checked``: full method names (``/package.Service/Method``) whose behaviour calls
    ``refuse_malformed`` itself; only their deserializer is replaced. Install it last, so
    the other interceptors (metrics, traces) see the refusal like any other answer.
    """

    def __init__(self, self_checked: Collection[str] = ()) -> None:
        self._self_checked = frozenset(self_checked)
        self._guarded: dict[str, tuple[_Handler, _Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method)
        cached = self._guarded.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]  # the same object each time: the metrics cache theirs on it
        guarded = _guarded(handler, method, method in self._self_checked)
        self._guarded[method] = (handler, guarded)
        return guarded
