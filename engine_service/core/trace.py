"""The tracing port: the spans a run opens, with nothing behind them by default.

The core marks where a run, each LLM round and each tool call begin and end; an adapter
(``engine_service.otel_tracer``, OpenTelemetry) turns those marks into spans when tracing is
configured. With the default :data:`NO_TRACER` a mark costs one call that returns a
shared object, and nothing is imported: tracing that is off adds no memory and no work per
event. Spans are opened per run, per LLM round and per tool call, never per token.

The span opened by :meth:`Tracer.span` is the current one until it ends, so the spans
opened inside it (also in tasks started inside it) are its children.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Protocol, TypeAlias

__all__ = ["NO_TRACER", "AttributeValue", "NoTracer", "Span", "Tracer"]

AttributeValue: TypeAlias = str | int | float | bool


class Span(Protocol):
    """An open span: attributes and events may be added until it ends."""

    def set(self, key: str, value: AttributeValue) -> None:
        """Set one attribute."""

    def event(self, name: str) -> None:
        """Record that something happened now (e.g. the first token)."""

    def fail(self, code: str, message: str = "") -> None:
        """Mark the span failed with an error code (``error.type``) and a message."""


class Tracer(Protocol):
    """Opens spans; see :data:`NO_TRACER` for the one that records nothing."""

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue]
    ) -> AbstractContextManager[Span]:
        """A span named ``name``, current while the ``with`` block runs."""


class _NoSpan:
    """A span that records nothing; one shared instance is its own context manager."""

    __slots__ = ()

    def set(self, key: str, value: AttributeValue) -> None:
        pass

    def event(self, name: str) -> None:
        pass

    def fail(self, code: str, message: str = "") -> None:
        pass

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


_NO_SPAN = _NoSpan()


class NoTracer:
    """The tracer of an engine with tracing off: every span is the same no-op."""

    __slots__ = ()

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue]
    ) -> AbstractContextManager[Span]:
        return _NO_SPAN


NO_TRACER: Tracer = NoTracer()
