"""A server span per ``AgentEngine`` RPC, child of the span the caller sent in metadata.

Installed on the engine's gRPC server only when tracing is on (``agentik.tracing``).
The caller's W3C ``traceparent`` metadata (the facade's HTTP span) becomes the parent, and
the span is current while the method runs: a run started by ``Run`` opens its own span
(``agentik.run``) under it. Health and reflection calls are not traced.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from agentik import tracing

__all__ = ["TracingInterceptor"]

_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class TracingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps the unary and server-streaming methods of ``service`` in server spans."""

    def __init__(self, service: str) -> None:
        self._prefix = f"/{service}/"
        self._tracer = trace.get_tracer("agentik.rpc")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(self._prefix):
            return handler
        name = method[1:]
        attributes = {
            "rpc.system": "grpc",
            "rpc.service": self._prefix[1:-1],
            "rpc.method": method[len(self._prefix) :],
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(handler.unary_unary, name, attributes),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(handler.unary_stream, name, attributes),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    def _start(self, name: str, attributes: dict[str, str], context: Any) -> Any:
        metadata = {key: value for key, value in context.invocation_metadata() or ()}
        return self._tracer.start_as_current_span(
            name,
            context=tracing.extract(metadata),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )

    def _unary(
        self, behaviour: Any, name: str, attributes: dict[str, str]
    ) -> Callable[[Any, Any], Awaitable[Any]]:
        async def traced(request: Any, context: Any) -> Any:
            with self._start(name, attributes, context) as span:
                try:
                    return await behaviour(request, context)
                finally:
                    _status(span, context)

        return traced

    def _stream(
        self, behaviour: Any, name: str, attributes: dict[str, str]
    ) -> Callable[[Any, Any], AsyncIterator[Any]]:
        async def traced(request: Any, context: Any) -> AsyncIterator[Any]:
            with self._start(name, attributes, context) as span:
                try:
                    async for response in behaviour(request, context):
                        yield response
                finally:
                    _status(span, context)

        return traced


def _status(span: Any, context: Any) -> None:
    """The RPC's status code on its span (an aborted call's code is set by then)."""
    code = context.code()
    if code is None or code == grpc.StatusCode.OK or code == 0:
        return
    status = code if isinstance(code, grpc.StatusCode) else None
    label = status.name if status is not None else str(code)
    span.set_attribute("rpc.grpc.status_code", status.value[0] if status is not None else code)
    span.set_status(Status(StatusCode.ERROR, label))
