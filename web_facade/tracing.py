"""A server span per HTTP request, installed only while tracing is on.

The span is the root of a turn's trace (or the child of a ``traceparent`` the client
sent): the engine calls made while it is current carry it as gRPC metadata
(:mod:`web_facade.engine_client`). It is made as WSGI middleware, not in Flask's request
hooks, because a streamed response outlives the request context: the span ends when the
server closes the body, so an SSE stream's span lasts as long as the stream. Health and
metrics scrapes are not traced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from flask import Flask

__all__ = ["UNTRACED_PATHS", "install_tracing"]

UNTRACED_PATHS = frozenset({"/health", "/metrics"})
"""Paths polled by probes and scrapers: a span each would bury the turns."""

_PREFIX = "HTTP_"


def install_tracing(app: Flask) -> None:
    """Wrap ``app`` in the tracing middleware, and name each span by its route."""
    from flask import request

    app.wsgi_app = _TracingMiddleware(app.wsgi_app)  # type: ignore[method-assign]

    @app.before_request
    def name_span() -> None:
        rule = request.url_rule
        if rule is not None:
            span = trace.get_current_span()
            span.update_name(f"{request.method} {rule.rule}")
            span.set_attribute("http.route", rule.rule)


def _headers(environ: dict[str, Any]) -> dict[str, str]:
    """The request's headers (lower-case names) that a propagator may read."""
    return {
        key[len(_PREFIX) :].lower().replace("_", "-"): value
        for key, value in environ.items()
        if key.startswith(_PREFIX)
    }


class _TracingMiddleware:
    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.tracer = trace.get_tracer("agentik.web")

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in UNTRACED_PATHS:
            return self.app(environ, start_response)
        method = environ.get("REQUEST_METHOD", "")
        span = self.tracer.start_span(
            method,
            context=propagate.extract(_headers(environ)),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        )

        def start(status: str, headers: Any, exc_info: Any = None) -> Any:
            code = int(status.split(" ", 1)[0])
            span.set_attribute("http.response.status_code", code)
            if code >= 500:
                span.set_status(Status(StatusCode.ERROR, status))
            return start_response(status, headers, exc_info)

        token = otel_context.attach(trace.set_span_in_context(span))
        try:
            body = self.app(environ, start)
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            span.end()
            raise
        finally:
            otel_context.detach(token)
        return _Body(body, span)


class _Body:
    """The response body; closing it ends the request's span."""

    def __init__(self, body: Iterable[bytes], span: Any) -> None:
        self._body = body
        self._span = span

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._body)

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            self._span.end()
