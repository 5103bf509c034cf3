"""OpenTelemetry traces, on only when the standard ``OTEL_*`` variables ask for them.

Both processes call :func:`setup` once they run (the engine at start, each gunicorn
worker after its fork: the batch exporter's thread does not survive a fork). With no
exporter configured it returns False and imports nothing: the OpenTelemetry SDK and the
OTLP exporter (about 12 MB) stay out of the process, the engine's runs keep the core's
no-op tracer (``core.trace.NO_TRACER``) and the facade installs no middleware. The
core's spans go through ``engine_service.otel_tracer`` once this turned tracing on.

What turns traces on (the specification's variables and their meaning):

- ``OTEL_TRACES_EXPORTER``: a comma-separated list of ``otlp`` (OTLP over
  http/protobuf) and ``console`` (spans as JSON on standard output); ``none`` is off.
  Unset, traces are on only when an OTLP endpoint is set (then ``otlp``). Other names are
  logged and ignored, as the specification asks.
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` (``/v1/traces`` is appended) or
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as is); default
  ``http://localhost:4318/v1/traces``. Headers, timeout, compression and certificates
  are read by the exporter from their ``OTEL_EXPORTER_OTLP_*`` variables.
- ``OTEL_SDK_DISABLED=true`` turns everything off, whatever else is set.
- ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES`` name the service (default
  ``agentik-engine`` and ``agentik-web``); ``OTEL_TRACES_SAMPLER[_ARG]``,
  ``OTEL_BSP_*`` and ``OTEL_PROPAGATORS`` are read by the SDK as usual.

The trace context crosses from the facade to the engine as W3C ``traceparent`` gRPC
metadata (:func:`trace_metadata`, :func:`extract`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

__all__ = [
    "describe",
    "enabled",
    "exporters",
    "extract",
    "setup",
    "shutdown",
    "trace_metadata",
]

log = logging.getLogger(__name__)

OTLP = "otlp"
CONSOLE = "console"
_KNOWN = (OTLP, CONSOLE)
_DEFAULT_ENDPOINT = "http://localhost:4318"
_PROTOCOL = "http/protobuf"

_provider: Any = None
"""The SDK's TracerProvider of this process while tracing is on, else None."""


def exporters(environ: Mapping[str, str]) -> list[str]:
    """The exporters ``environ`` configures (``otlp``, ``console``); empty: tracing off."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    listed = environ.get("OTEL_TRACES_EXPORTER", "")
    names = [name.strip().lower() for name in listed.split(",") if name.strip()]
    if not names:
        endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        return [OTLP] if any(environ.get(key, "").strip() for key in endpoints) else []
    if "none" in names:
        return []
    chosen: list[str] = []
    for name in names:
        if name not in _KNOWN:
            log.warning(
                "OTEL_TRACES_EXPORTER: %r is not an exporter agentik has (%s); ignored",
                name,
                ", ".join(_KNOWN),
            )
        elif name not in chosen:
            chosen.append(name)
    return chosen


def _otlp_endpoint(environ: Mapping[str, str]) -> str:
    explicit = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if explicit:
        return explicit
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip() or _DEFAULT_ENDPOINT
    return f"{base.rstrip('/')}/v1/traces"


def describe(environ: Mapping[str, str]) -> str | None:
    """Where spans go, for the start-up log (None when tracing is off); imports nothing."""
    names = exporters(environ)
    if not names:
        return None
    where = [f"OTLP to {_otlp_endpoint(environ)}" if n == OTLP else "the console" for n in names]
    return "traces: " + " and ".join(where)


def setup(service_name: str) -> bool:
    """Start tracing in this process if the environment configures an exporter.

    ``service_name`` is the default ``service.name`` (``OTEL_SERVICE_NAME`` wins). Safe to
    call again: the first call decides. True when tracing is on.
    """
    global _provider
    if _provider is not None:
        return True
    names = exporters(os.environ)
    if not names:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning(
            "OTEL_* variables ask for traces but the OpenTelemetry SDK is not installed: "
            "pip install 'agentik[tracing]'; tracing stays off"
        )
        return False

    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_exporter(name)))
    trace.set_tracer_provider(provider)
    _provider = provider
    return True


def _exporter(name: str) -> Any:
    if name == CONSOLE:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    for key in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = os.environ.get(key, "").strip()
        if protocol:
            if protocol != _PROTOCOL:
                log.warning(
                    "%s=%s: agentik exports OTLP over %s only (port 4318 by default)",
                    key,
                    protocol,
                    _PROTOCOL,
                )
            break
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def enabled() -> bool:
    """Whether :func:`setup` turned tracing on in this process."""
    return _provider is not None


def shutdown() -> None:
    """Export the spans still waiting and stop the exporters (at process exit)."""
    global _provider
    provider, _provider = _provider, None
    if provider is not None:
        provider.shutdown()


def trace_metadata() -> list[tuple[str, str]]:
    """The current span's context as W3C ``traceparent`` (and ``tracestate``) metadata.

    Only while tracing is on (it imports the propagators).
    """
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return list(carrier.items())


def extract(carrier: Mapping[str, str]) -> Any:
    """The OpenTelemetry context a caller sent in ``carrier`` (its trace's parent span)."""
    from opentelemetry import propagate

    return propagate.extract(carrier)
