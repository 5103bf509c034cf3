"""Requests whose bytes are not the method's message: INVALID_ARGUMENT, in our words.

gRPC answers a request it cannot parse (bytes that are not protobuf, a string field that is
not UTF-8, nesting past protobuf's recursion limit) with UNKNOWN and protobuf's own text
(``Unexpected <class 'google.protobuf.message.DecodeError'>: ...``): a server error for a
client's mistake, and internal wording. Any client that does not use our stubs can send such
bytes. ``MalformedRequests`` wraps every method's deserializer so that a failure to parse
becomes a ``Malformed`` marker, and the method answers the marker with INVALID_ARGUMENT
naming the method, before the servicer (or the health and reflection services) reads it.
A request over the engine's size limit is refused the same way, unparsed, naming the limit
(``agentik-error: payload_too_large``).

Server streams the servicer checks itself (``refuse_malformed``, first thing in ``Run`` and
``Subscribe``) keep their behaviour unwrapped: a wrapper costs a hop per event.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, TypeAlias

import grpc

from engine_service.errors import abort

__all__ = ["Malformed", "MalformedRequests", "refuse_malformed"]

_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


class Malformed:
    """What a request that failed to parse becomes; ``reason`` is our words for why.
    ``code`` is the ``agentik-error`` trailer: ``payload_too_large`` for a request over
    the engine's size limit (parsed never), else ``invalid_argument``."""

    __slots__ = ("code", "reason")

    def __init__(self, reason: str, code: str = "invalid_argument") -> None:
        self.reason = reason
        self.code = code


def _reason(exc: Exception) -> str:
    if "UTF-8" in str(exc):
        return "a string field holds bytes that are not UTF-8"
    return "its bytes are not a valid protobuf message (or nest too deep)"


def _safe(
    deserializer: Callable[[bytes], Any] | None, max_bytes: int = 0
) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        if max_bytes and len(raw) > max_bytes:
            return Malformed(
                f"it is {len(raw)} bytes, more than the engine takes in one request:"
                f" {max_bytes} bytes (AGENTIK_MAX_MESSAGE_BYTES, or twice"
                " AGENTIK_MAX_BODY_BYTES when that is larger)",
                "payload_too_large",
            )
        try:
            return deserializer(raw)
        except Exception as exc:  # DecodeError, RecursionError, ...: the client's bytes
            return Malformed(_reason(exc))

    return parse


async def refuse_malformed(context: _Context, method: str, request: object) -> None:
    """Abort with INVALID_ARGUMENT when ``request`` did not parse; else nothing."""
    if isinstance(request, Malformed):
        context.set_trailing_metadata((("agentik-error", request.code),))
        what = "too large" if request.code == "payload_too_large" else "malformed"
        await abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the {method} request is {what}: {request.reason}",
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


def _guarded(handler: _Handler, method: str, self_checked: bool, max_bytes: int) -> _Handler:
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
                request_deserializer=_safe(handler.request_deserializer, max_bytes),
                response_serializer=handler.response_serializer,
            )
    return handler


class MalformedRequests(grpc.aio.ServerInterceptor):
    """Every method of the server: a request that does not parse is INVALID_ARGUMENT.

    ``self_checked``: full method names (``/package.Service/Method``) whose behaviour calls
    ``refuse_malformed`` itself; only their deserializer is replaced. Install it last, so
    the other interceptors (metrics, traces) see the refusal like any other answer.
    """

    def __init__(self, self_checked: Collection[str] = (), max_bytes: int = 0) -> None:
        """``max_bytes``: a request larger is refused unparsed, INVALID_ARGUMENT naming the
        limit (0: no limit of its own); gRPC takes up to twice that (``server``), so what
        comes close to the limit gets our words, not gRPC's."""
        self._self_checked = frozenset(self_checked)
        self._max_bytes = max_bytes
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
        guarded = _guarded(handler, method, method in self._self_checked, self._max_bytes)
        self._guarded[method] = (handler, guarded)
        return guarded
