"""Requests whose bytes are not the method's message: INVALID_ARGUMENT, in our words.

gRPC answers a request it cannot parse (bytes that are not protobuf, a string field that is
not UTF-8, nesting past protobuf's recursion limit) with UNKNOWN and protobuf's own text
(``Unexpected <class 'google.protobuf.message.DecodeError'>: ...``): a server error for a
client's mistake, and internal wording. Any client that does not use our stubs can send such
bytes. ``MalformedRequests`` wraps every method's deserializer so a failure to parse becomes
a marker, and the method answers the marker with INVALID_ARGUMENT naming the method, before
the servicer (or the health and reflection services) sees anything.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc

__all__ = ["MalformedRequests"]

_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class _Malformed:
    """What a request that failed to parse becomes; ``reason`` is our words for why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _reason(exc: Exception) -> str:
    text = str(exc)
    if "UTF-8" in text:
        return "a string field holds bytes that are not UTF-8"
    return "its bytes are not a valid protobuf message (or nest too deep)"


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:  # DecodeError, RecursionError, ...: the client's bytes
            return _Malformed(_reason(exc))

    return parse


async def _refuse(context: _Context, method: str, malformed: _Malformed) -> None:
    context.set_trailing_metadata((("agentik-error", "invalid_argument"),))
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT, f"the {method} request is malformed: {malformed.reason}"
    )


def _unary_request(behaviour: Any, method: str, streaming: bool) -> Any:
    if streaming:

        async def stream(request: Any, context: _Context) -> AsyncIterator[Any]:
            if isinstance(request, _Malformed):
                await _refuse(context, method, request)
            async for response in behaviour(request, context):
                yield response

        return stream

    async def unary(request: Any, context: _Context) -> Any:
        if isinstance(request, _Malformed):
            await _refuse(context, method, request)
        return await behaviour(request, context)

    return unary


async def _checked(requests: AsyncIterator[Any], context: _Context, method: str) -> Any:
    async for request in requests:
        if isinstance(request, _Malformed):
            await _refuse(context, method, request)
        yield request


def _stream_request(behaviour: Any, method: str, streaming: bool) -> Any:
    if streaming:

        async def stream(requests: AsyncIterator[Any], context: _Context) -> AsyncIterator[Any]:
            async for response in behaviour(_checked(requests, context, method), context):
                yield response

        return stream

    async def unary(requests: AsyncIterator[Any], context: _Context) -> Any:
        return await behaviour(_checked(requests, context, method), context)

    return unary


class MalformedRequests(grpc.aio.ServerInterceptor):
    """Every method of the server: a request that does not parse is INVALID_ARGUMENT."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = str(handler_call_details.method).rpartition("/")[2] or "this"
        kinds = (
            (handler.unary_unary, grpc.unary_unary_rpc_method_handler, _unary_request, False),
            (handler.unary_stream, grpc.unary_stream_rpc_method_handler, _unary_request, True),
            (handler.stream_unary, grpc.stream_unary_rpc_method_handler, _stream_request, False),
            (handler.stream_stream, grpc.stream_stream_rpc_method_handler, _stream_request, True),
        )
        for behaviour, make, wrap, streaming in kinds:
            if behaviour is not None:
                return make(
                    wrap(behaviour, method, streaming),
                    request_deserializer=_safe(handler.request_deserializer),
                    response_serializer=handler.response_serializer,
                )
        return handler
