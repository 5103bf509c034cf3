"""The engine's Prometheus metrics, served on ``metrics_addr`` (``AGENTIK_METRICS_ADDR``).

Imported only when metrics are on: ``prometheus_client`` is not loaded otherwise, and
nothing here runs per streamed event. Runs are counted once at their start and once at
their end (tokens from the LLM's usage, tool calls from the run's list); gRPC calls once
each (``GrpcMetrics``); MCP servers, A2A agents and Python tools' stranded calls are read
when Prometheus scrapes. docs/operations.md lists every metric.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeAlias

import grpc
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from engine_service.core.observe import RunReport, ToolOutcome

if TYPE_CHECKING:
    from engine_service.tools.a2a.sources import A2aAgentSources
    from engine_service.tools.a2a.tool import A2aAgentSource
    from engine_service.tools.mcp.sources import McpToolSources
    from engine_service.tools.mcp.tool import McpToolSource
    from engine_service.tools.python.tool import PythonTool

__all__ = ["EngineMetrics", "GrpcMetrics", "serve_metrics"]

DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
FIRST_TOKEN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
RPC_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60, 300, 900)
"""Streams (Run, Subscribe) last as long as a run: the buckets reach that far."""


class _SourceStatus(Collector):
    """A gauge per source, 1 while it is ready, read at scrape time."""

    def __init__(
        self,
        metric: str,
        help_text: str,
        label: str,
        sources: Iterable[McpToolSource | A2aAgentSource],
    ) -> None:
        self.metric, self.help_text, self.label = metric, help_text, label
        self.sources = sources

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.metric, self.help_text, labels=[self.label, "state"])
        for source in self.sources:
            up = 1.0 if source.state.value == "ready" else 0.0
            family.add_metric([source.config.name, source.state.value], up)
        yield family


class _StrandedCalls(Collector):
    """A gauge per ``[[tools.python]]`` tool: its calls still running after a timeout or an
    interrupt (``ToolThreads``), read at scrape time."""

    def __init__(self, tools: Iterable[PythonTool]) -> None:
        self.tools = tools

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "agentik_python_tool_stranded_calls",
            "Calls of a Python tool still running after their timeout or interrupt.",
            labels=["tool"],
        )
        for tool in self.tools:
            family.add_metric([tool.name], float(tool.threads.stranded))
        yield family


class EngineMetrics:
    """The engine's metrics, in a registry of their own; also the run observer."""

    def __init__(self, model: str = "") -> None:
        """``model``: the engine's model, whose token series exist from the start."""
        disable_created_metrics()  # type: ignore[no-untyped-call]  # *_created: noise
        self.registry = CollectorRegistry()
        r = self.registry
        self.runs_started = Counter("agentik_runs_started", "Runs started.", registry=r)
        self.runs_finished = Counter(
            "agentik_runs_finished", "Runs ended, by outcome.", ["outcome"], registry=r
        )
        self.agent_runs_finished = Counter(
            "agentik_agent_runs_finished",
            "Runs ended, by agent (docs/agents.md) and outcome.",
            ["agent", "outcome"],
            registry=r,
        )
        self.runs_active = Gauge("agentik_runs_active", "Runs in flight.", registry=r)
        self.run_duration = Histogram(
            "agentik_run_duration_seconds",
            "Run duration from start to end, by outcome.",
            ["outcome"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.first_token = Histogram(
            "agentik_run_first_token_seconds",
            "Time from a run's start to the LLM's first text, reasoning or tool call.",
            buckets=FIRST_TOKEN_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "agentik_llm_tokens",
            "LLM tokens as the LLM's usage reports them, by direction (input, output, and"
            " cached: the part of input served from the LLM's prompt cache) and model.",
            ["direction", "model"],
            registry=r,
        )
        self.tool_calls = Counter(
            "agentik_tool_calls",
            "Engine tool calls, by tool and outcome (ok, error, timeout, unknown_tool).",
            ["tool", "outcome"],
            registry=r,
        )
        self.llm_errors = Counter(
            "agentik_llm_errors", "Runs failed by the LLM, by error code.", ["code"], registry=r
        )
        self.rpc_seconds = Histogram(
            "agentik_grpc_server_handling_seconds",
            "gRPC calls served, by method and status code (streams: until they end).",
            ["method", "code"],
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.streams_open = Gauge(
            "agentik_grpc_streams_open", "Server streams open, by method.", ["method"], registry=r
        )
        self.streams_cut = Counter(
            "agentik_grpc_streams_cut",
            "Server streams cut because a message waited past [engine] write_timeout for a"
            " client that does not read, by method.",
            ["method"],
            registry=r,
        )
        self.webhook_attempts = Counter(
            "agentik_webhook_attempts",
            "Webhook delivery attempts, by kind (run, a2a) and outcome (delivered, retry,"
            " failed: the delivery gave up and is kept for admins).",
            ["kind", "outcome"],
            registry=r,
        )
        self.runs_finished.labels("success")  # the usual series exist from the start
        self.model = model
        for direction in ("input", "output", "cached"):
            self.tokens.labels(direction, model)

    def stream_opened(self, method: str, context: Any) -> None:
        """Count a server stream as open until it ends, then time it (once per stream)."""
        started = time.monotonic()
        streams = self.streams_open.labels(method)
        streams.inc()

        def ended(context: Any) -> None:
            streams.dec()
            code = _code(context, None)
            self.rpc_seconds.labels(method, code).observe(time.monotonic() - started)

        context.add_done_callback(ended)

    def stream_cut(self, method: str) -> None:
        """A server stream cut for a client that does not read (``stalled_writes``)."""
        self.streams_cut.labels(method).inc()

    def watch_mcp(self, sources: McpToolSources) -> None:
        if len(sources):
            help_text = "1 while the MCP server is connected and its tools are offered, else 0."
            self.registry.register(
                _SourceStatus("agentik_mcp_server_up", help_text, "server", sources)
            )

    def watch_a2a(self, agents: A2aAgentSources) -> None:
        if len(agents):
            help_text = "1 while the remote A2A agent's card is read and its tool offered, else 0."
            self.registry.register(
                _SourceStatus("agentik_a2a_agent_up", help_text, "agent", agents)
            )

    def watch_python(self, tools: Iterable[PythonTool]) -> None:
        tools = list(tools)
        if tools:
            self.registry.register(_StrandedCalls(tools))

    def webhook_attempt(self, kind: str, outcome: str) -> None:
        """Count one delivery attempt (``outcome``: delivered, retry or failed)."""
        self.webhook_attempts.labels(kind, outcome).inc()

    # -- RunObserver ----------------------------------------------------------------

    def run_started(self, report: RunReport) -> None:
        self.runs_started.inc()
        self.runs_active.inc()

    def run_finished(self, report: RunReport) -> None:
        self.runs_active.dec()
        self.runs_finished.labels(report.outcome).inc()
        if report.agent:  # one of the configured agents: a bounded label
            self.agent_runs_finished.labels(report.agent, report.outcome).inc()
        self.run_duration.labels(report.outcome).observe(report.duration)
        ttft = report.time_to_first_token
        if ttft is not None:
            self.first_token.observe(ttft)
        model = report.model or self.model
        for direction, count in (
            ("input", report.input_tokens),
            ("output", report.output_tokens),
            ("cached", report.cached_tokens),
        ):
            if count:
                self.tokens.labels(direction, model).inc(count)
        for name, outcome in report.tool_calls:
            # A name the LLM made up is not a label: the series would be unbounded.
            tool = "(unknown)" if outcome == ToolOutcome.UNKNOWN else name
            self.tool_calls.labels(tool, outcome).inc()
        if report.failed_in == "llm":
            self.llm_errors.labels(report.error_code).inc()


def serve_metrics(metrics: EngineMetrics, addr: str) -> Any:
    """Serve ``GET /metrics`` on ``addr`` from a thread; returns the server (``shutdown``)."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    server, _thread = start_http_server(int(port), host, registry=metrics.registry)
    return server


Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


class GrpcMetrics(grpc.aio.ServerInterceptor):
    """Times every unary gRPC call by method and status code."""

    def __init__(self, metrics: EngineMetrics) -> None:
        self.metrics = metrics
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method: str = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(handler, method.lstrip("/"))
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def _wrap(self, handler: Handler, method: str) -> Handler:
        # Streams are left alone: wrapping one costs a hop per message (about 1 µs, some
        # 2% of the engine's CPU per event). Run and Subscribe are timed from the
        # servicer's hook instead (``EngineMetrics.stream_opened``).
        if handler.unary_unary is None:
            return handler
        behavior = handler.unary_unary
        rpc_seconds = self.metrics.rpc_seconds

        async def timed(request: Any, context: Any) -> Any:
            started = time.monotonic()
            error: BaseException | None = None
            try:
                return await behavior(request, context)
            except BaseException as exc:
                error = exc
                raise
            finally:
                code = _code(context, error)
                rpc_seconds.labels(method, code).observe(time.monotonic() - started)

        return grpc.unary_unary_rpc_method_handler(
            timed,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _code(context: Any, error: BaseException | None) -> str:
    """The status the call ended with, as its name (OK, NOT_FOUND, ...)."""
    try:
        code = context.code()
    except Exception:
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    if isinstance(code, int) and not isinstance(code, bool):
        for status in grpc.StatusCode:
            if status.value[0] == code:
                return status.name
    if error is None:
        try:
            cancelled = bool(context.cancelled())
        except Exception:
            cancelled = False
        return "CANCELLED" if cancelled else "OK"
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        return "CANCELLED"
    return "UNKNOWN"
