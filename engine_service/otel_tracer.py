"""The core's ``core.trace.Tracer`` over OpenTelemetry, for the engine's runs once
``agentik.tracing.setup`` turned tracing on (docs/tracing.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from agentik import tracing
from engine_service.core.trace import AttributeValue, Span, Tracer

__all__ = ["OtelTracer", "tracer"]


class _OtelSpan:
    """``core.trace.Span`` over an OpenTelemetry span."""

    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: AttributeValue) -> None:
        self._span.set_attribute(key, value)

    def event(self, name: str) -> None:
        self._span.add_event(name)

    def fail(self, code: str, message: str = "") -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("error.type", code)
        self._span.set_status(Status(StatusCode.ERROR, message or None))


class OtelTracer:
    """``core.trace.Tracer`` over an OpenTelemetry tracer.

    A span cut by cancellation (an interrupted run, a client that left) is marked
    ``agentik.cancelled``, not failed; any other exception fails it with its class name.
    """

    def __init__(self, otel_tracer: Any) -> None:
        self._tracer = otel_tracer

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue]
    ) -> AbstractContextManager[Span]:
        return self._span(name, attributes)

    @contextmanager
    def _span(self, name: str, attributes: Mapping[str, AttributeValue]) -> Iterator[Span]:
        import asyncio  # here: the web workers import this module, and never need asyncio

        with self._tracer.start_as_current_span(
            name, attributes=attributes, record_exception=False, set_status_on_exception=False
        ) as otel_span:
            span = _OtelSpan(otel_span)
            try:
                yield span
            except asyncio.CancelledError:
                otel_span.set_attribute("agentik.cancelled", True)
                raise
            except Exception as exc:
                otel_span.record_exception(exc)
                span.fail(type(exc).__name__, str(exc))
                raise


def tracer(name: str = "agentik") -> Tracer:
    """The tracer for the core's spans (tracing must be on)."""
    from opentelemetry import trace

    assert tracing.enabled(), "tracing.setup() turned nothing on"
    return OtelTracer(trace.get_tracer(name))
