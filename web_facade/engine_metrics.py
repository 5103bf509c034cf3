"""The engine's metrics inside the facade's ``GET /metrics``: one scrape shows both.

The engine says where it serves Prometheus metrics in its health answer's metadata
(``agentik-metrics: HOST:PORT``, present while ``AGENTIK_METRICS_ADDR`` is set; ``agentik
serve`` sets it to a free loopback port). The facade reads that endpoint and appends its
``agentik_*`` series. An engine that serves none adds nothing; one that cannot be read adds
a comment saying so, never an error: the facade's own series are still served.
"""

from __future__ import annotations

import urllib.request

import grpc
from grpc_health.v1 import health_pb2

from web_facade.engine_client import current_engine

__all__ = ["ENGINE_METRICS_TIMEOUT", "engine_metrics"]

ENGINE_METRICS_TIMEOUT = 2.0
"""Seconds for each step: the engine's health answer, then its metrics."""
METRICS_METADATA = "agentik-metrics"
_LIMIT = 8 * 1024 * 1024
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy


def engine_metrics() -> bytes:
    """The engine's ``agentik_*`` series in the Prometheus text format, or ``b""``."""
    try:
        _, call = current_engine().health.Check.with_call(
            health_pb2.HealthCheckRequest(service=""), timeout=ENGINE_METRICS_TIMEOUT
        )
    except grpc.RpcError:
        return b"# agentik: the engine's metrics are not included: the engine is unreachable\n"
    addr = dict(call.initial_metadata() or ()).get(METRICS_METADATA)
    if not isinstance(addr, str) or ":" not in addr:
        return b""
    try:
        with _DIRECT.open(_url(addr), timeout=ENGINE_METRICS_TIMEOUT) as response:
            text: bytes = response.read(_LIMIT)
    except OSError:
        return b"# agentik: the engine's metrics are not included: its endpoint did not answer\n"
    return _agentik_series(text)


def _url(addr: str) -> str:
    """``http://HOST:PORT/metrics``; a wildcard host is reached on loopback."""
    host, _, port = addr.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{int(port)}/metrics"


def _agentik_series(text: bytes) -> bytes:
    """The lines of ``agentik_*`` families (HELP, TYPE and samples): no name the facade's
    own registry could also have."""
    kept = [
        line
        for line in text.splitlines()
        if line.startswith((b"agentik_", b"# HELP agentik_", b"# TYPE agentik_"))
    ]
    return b"".join(line + b"\n" for line in kept)
