"""The facade's access log and Prometheus metrics (``GET /metrics``).

A WSGI middleware around the Flask app times every request to its last byte — an SSE
stream is logged and measured when it ends — and counts the bytes sent. One access line
per request, on the ``agentik.access`` logger: method, path (never the query string),
route, status, duration, bytes and the client address; never a header, so never a token.

Metrics are labelled by the route template (``/agentik/conversations/<conversation_id>``),
never the raw path, so ids do not multiply the series, and by the method when it is one of
the standard ones (:data:`METHODS`), ``other`` when not: no label takes a value the client
chose, so the series stay a closed set whatever is sent. Under gunicorn every worker writes
its values to ``PROMETHEUS_MULTIPROC_DIR`` (a private directory ``gunicorn_conf`` makes),
and ``GET /metrics`` sums them over the workers. docs/operations.md lists the metrics.
"""

from __future__ import annotations

import glob
import logging
import os
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from flask import Flask, Response, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as prometheus_multiprocess

from agentik.logs import FIELDS
from web_facade.engine_metrics import engine_metrics
from web_facade.errors import error_response

__all__ = [
    "METHODS",
    "REFUSAL_REASONS",
    "ROUTE_KEY",
    "count_refusal",
    "install_observability",
    "method_label",
]

access_log = logging.getLogger("agentik.access")

ROUTE_KEY = "agentik.route"
"""The WSGI environ key where the matched route template is left for the middleware."""
UNMATCHED = "(unmatched)"
METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
"""The HTTP methods that label metrics as themselves (RFC 9110 and PATCH); any other
method is counted as ``other``."""

HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

REQUEST_SECONDS = Histogram(
    "agentik_http_request_duration_seconds",
    "HTTP requests served, by method, route template and status (streams: until they end).",
    ["method", "route", "status"],
    buckets=HTTP_BUCKETS,
)
STREAMS_OPEN = Gauge(
    "agentik_http_streams_open",
    "SSE streams open, by route template.",
    ["route"],
    multiprocess_mode="livesum",
)
EDGE_REFUSALS = Counter(
    "agentik_http_refused_total",
    "Requests the web worker answered itself before any thread: 408 (head or body too slow), "
    "503 (no thread free), 414/431 (a head that could never be valid); and answers it cut "
    "because the client stopped reading (write_timeout).",
    ["reason"],
)
REFUSAL_REASONS = ("head_timeout", "body_timeout", "busy", "too_large", "write_timeout")
"""The ``reason`` label's values: a closed set."""


def count_refusal(reason: str, status: int, remote: str) -> None:
    """Count and log (on ``agentik.access``) a request the worker refused itself."""
    EDGE_REFUSALS.labels(reason if reason in REFUSAL_REASONS else "too_large").inc()
    if access_log.isEnabledFor(logging.INFO):
        access_log.info(
            "%s refused by the worker: %d %s",
            remote or "-",
            status,
            reason,
            extra={
                FIELDS: {
                    "event": "http_refused",
                    "remote": remote,
                    "status": status,
                    "reason": reason,
                }
            },
        )


def method_label(method: str) -> str:
    """The metrics label of a request method: itself when standard, else ``other``."""
    return method if method in METHODS else "other"


StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class _Exchange:
    """One request's response on its way out: counts bytes, ends the measure at close."""

    __slots__ = ("body", "environ", "sent", "started", "status", "stream_route")

    def __init__(self, environ: dict[str, Any], started: float) -> None:
        self.environ = environ
        self.started = started
        self.status = 0
        self.sent = 0
        self.body: Iterable[bytes] = ()
        self.stream_route = ""

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        try:
            for chunk in self.body:
                sent += len(chunk)
                yield chunk
        finally:
            self.sent += sent

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.finish()

    def finish(self) -> None:
        duration = time.monotonic() - self.started
        environ = self.environ
        method = environ.get("REQUEST_METHOD", "")
        route = environ.get(ROUTE_KEY) or UNMATCHED
        status = self.status or 500
        if self.stream_route:
            STREAMS_OPEN.labels(self.stream_route).dec()
        REQUEST_SECONDS.labels(method_label(method), route, str(status)).observe(duration)
        if access_log.isEnabledFor(logging.INFO):
            path = environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")
            remote = environ.get("REMOTE_ADDR", "")
            access_log.info(
                '%s "%s %s" %d %.3fs %dB',
                remote or "-",
                method,
                path,
                status,
                duration,
                self.sent,
                extra={
                    FIELDS: {
                        "event": "http_request",
                        "remote": remote,
                        "method": method,
                        "path": path,
                        "route": route,
                        "status": status,
                        "duration_s": round(duration, 4),
                        "bytes": self.sent,
                    }
                },
            )


class _Observed:
    """The WSGI middleware (see the module doc)."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        exchange = _Exchange(environ, time.monotonic())

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            exchange.status = int(status[:3])
            if not exchange.stream_route:
                for name, value in headers:
                    if name.lower() == "content-type" and value.startswith("text/event-stream"):
                        exchange.stream_route = environ.get(ROUTE_KEY) or UNMATCHED
                        STREAMS_OPEN.labels(exchange.stream_route).inc()
                        break
            return start_response(status, headers, exc_info)

        try:
            exchange.body = self.app(environ, start)
        except BaseException:
            exchange.finish()
            raise
        return exchange


def _remember_route() -> None:
    rule = request.url_rule
    request.environ[ROUTE_KEY] = rule.rule if rule is not None else UNMATCHED


MERGE_ATTEMPTS = 5
"""Reads of the workers' metric files before ``GET /metrics`` gives up with a 503."""

_UNREADABLE = (OSError, ValueError, RuntimeError, struct.error)
"""What reading a metric file raises while a worker makes it (created, not yet sized: a new
worker's) or removes it (a dead worker's, as it is replaced)."""


class _MetricsBusy(Exception):
    """The workers' metric files could not be read whole (see :data:`_UNREADABLE`)."""


def _workers_metrics(directory: str) -> bytes:
    """The metrics of every worker, summed from their files; a file that cannot be read
    alone is left out for this scrape (its worker is being born or has just died)."""
    merge = prometheus_multiprocess.MultiProcessCollector.merge
    files = sorted(glob.glob(os.path.join(directory, "*.db")))
    for attempt in range(MERGE_ATTEMPTS):
        try:
            metrics = merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        except _UNREADABLE:
            time.sleep(0.002 * (attempt + 1))
            files = [name for name in files if _readable(name)]
            continue
        registry = CollectorRegistry()
        registry.register(_Merged(metrics))
        return generate_latest(registry)
    raise _MetricsBusy


class _Merged:
    """Metrics already collected, as a collector of a registry."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics

    def collect(self) -> Any:
        return self.metrics


def _readable(name: str) -> bool:
    try:
        prometheus_multiprocess.MultiProcessCollector.merge([name])  # type: ignore[no-untyped-call]
    except _UNREADABLE:
        return False
    return True


def metrics_response() -> Response:
    """The metrics of every worker (multi-process mode) or of this process; 503 with
    ``Retry-After`` when the workers' files stay unreadable (never a 500)."""
    if directory := os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        try:
            payload = _workers_metrics(directory)
        except _MetricsBusy:
            message = "the web workers' metrics could not be read now; try again"
            return error_response(503, "metrics_busy", message)
    else:
        payload = generate_latest(REGISTRY)
    payload += engine_metrics()  # web_facade/engine_metrics.py: one scrape shows both
    return Response(payload, content_type=CONTENT_TYPE_LATEST)


def install_observability(app: Flask) -> None:
    """The access log, the HTTP metrics and ``GET /metrics``; call before the other hooks."""
    app.before_request_funcs.setdefault(None, []).insert(0, _remember_route)
    app.add_url_rule("/metrics", "metrics", metrics_response, methods=["GET"])
    app.wsgi_app = _Observed(app.wsgi_app)  # type: ignore[method-assign]
