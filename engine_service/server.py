"""The engine's gRPC server: AgentEngine, health and reflection on one ``grpc.aio`` server.

Start: the configured MCP servers connect in the background once the port serves; one
that fails never stops the engine (its tools are absent, the log says why).

Shutdown (SIGTERM/SIGINT, or ``stop``): health turns NOT_SERVING, new runs are refused
with UNAVAILABLE, runs in flight get ``shutdown_grace`` seconds to finish, the rest are
interrupted and stored as interrupted, the MCP connections close, then the server stops.

Storage: while the store cannot write (a full disk, a locked database), health says
NOT_SERVING; it says SERVING again once a write probe succeeds.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2

from engine_service import tracing
from engine_service.auth import Gate
from engine_service.build import build_a2a_agents, build_mcp_sources
from engine_service.config import Settings, refuse_open_exposure
from engine_service.core.bounds import GRPC_MESSAGE_LIMIT
from engine_service.core.engine import Engine
from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.servicer import AgentEngineServicer
from engine_service.workers import redact_store

__all__ = ["SERVICE_NAME", "EngineServer", "run_engine"]

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AgentEngine"].full_name
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
"""Reflection under its stable name, which newer tools ask first; grpcio-reflection serves
only ``v1alpha``, whose messages are the same on the wire."""


def _enable_reflection(server: grpc.aio.Server, names: tuple[str, ...]) -> None:
    """Serve reflection as ``v1alpha`` (grpcio-reflection) and as ``v1``."""
    names = (*names, reflection.SERVICE_NAME, REFLECTION_V1)
    reflection.enable_server_reflection(names, server)
    v1 = reflection.aio.ReflectionServicer(names)
    handler = grpc.method_handlers_generic_handler(
        REFLECTION_V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                v1.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))


def _interceptors() -> list[grpc.aio.ServerInterceptor]:
    """A server span per RPC while tracing is on (``engine_service.tracing``), else none."""
    if not tracing.enabled():
        return []
    from engine_service.tracing_rpc import TracingInterceptor

    return [TracingInterceptor(SERVICE_NAME)]


class EngineServer:
    """A started engine behind a gRPC port."""

    def __init__(self, engine: Engine, settings: Settings, *, reuse_port: bool = False) -> None:
        """``reuse_port``: bind with SO_REUSEPORT, sharing the port with the other
        workers of ``agentik engine --workers N``; without it a taken port fails."""
        refuse_open_exposure(settings, settings.grpc_addr, "engine")
        self.gate = Gate.from_settings(settings)
        self.engine = engine
        self.settings = settings
        self.health = HealthServicer()
        self.mcp = build_mcp_sources(settings, engine.tools)
        self.a2a = build_a2a_agents(settings, engine.tools)
        self.port = 0
        self._health_updates: set[asyncio.Task[None]] = set()
        engine.on_storage_change(self._storage_changed)
        limit = settings.max_message_bytes
        interceptors: list[grpc.aio.ServerInterceptor] = []
        self.metrics: Any = None
        self._metrics_server: Any = None
        self.metrics_port = 0
        if settings.metrics_addr:
            refuse_open_exposure(settings, settings.metrics_addr, "metrics endpoint")
            # Loaded only when metrics are on: prometheus_client costs memory otherwise.
            from engine_service.metrics import EngineMetrics, GrpcMetrics

            self.metrics = EngineMetrics()
            engine.observe(self.metrics)
            self.metrics.watch_mcp(self.mcp)
            self.metrics.watch_a2a(self.a2a)
            # Unary calls; the streams (Run, Subscribe) are timed by the servicer's hook.
            interceptors.append(GrpcMetrics(self.metrics))
        self.server = grpc.aio.server(
            interceptors=[*_interceptors(), *interceptors],
            options=[
                ("grpc.max_receive_message_length", limit),
                # What most clients accept; every event and page the engine sends is
                # bounded under it by [engine] max_event_bytes (core.bounds).
                ("grpc.max_send_message_length", GRPC_MESSAGE_LIMIT),
                ("grpc.so_reuseport", 1 if reuse_port else 0),
            ],
        )
        pb_grpc.add_AgentEngineServicer_to_server(
            AgentEngineServicer(
                engine, self.gate, self.metrics.stream_opened if self.metrics else None
            ),
            self.server,
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        _enable_reflection(
            self.server,
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name),
        )

    async def start(self) -> int:
        """Bind, recover abandoned runs, serve; returns the bound port."""
        self.port = self.server.add_insecure_port(self.settings.grpc_addr)
        if not self.port:
            raise OSError(f"cannot bind the engine to {self.settings.grpc_addr}")
        await self.engine.start()
        await self.server.start()
        if self.metrics is not None:
            from engine_service.metrics import serve_metrics

            try:
                self._metrics_server = serve_metrics(self.metrics, self.settings.metrics_addr)
            except OSError as exc:
                await self.server.stop(grace=None)
                raise OSError(
                    f"cannot serve metrics on {self.settings.metrics_addr}: {exc.strerror}"
                ) from exc
            self.metrics_port = self._metrics_server.server_port
        self.mcp.start()
        self.a2a.start()
        await self._set_health(self.engine.storage_ok)
        return self.port

    async def _set_health(self, serving: bool) -> None:
        serving = serving and self.engine.accepting
        status = health_pb2.HealthCheckResponse.NOT_SERVING
        if serving:
            status = health_pb2.HealthCheckResponse.SERVING  # type: ignore[assignment]
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    def _storage_changed(self, ok: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._set_health(ok))
        self._health_updates.add(task)
        task.add_done_callback(self._health_updates.discard)

    async def stop(self) -> None:
        await self.health.enter_graceful_shutdown()
        await self.engine.shutdown(self.settings.shutdown_grace)
        await asyncio.gather(self.mcp.stop(), self.a2a.stop())
        await self.server.stop(grace=1.0)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        await self.engine.store.close()


def _redacted(url: str) -> str:
    """``url`` without credentials it may carry (``https://user:key@host`` → ``host``)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


async def run_engine(settings: Settings, engine: Engine, *, reuse_port: bool = False) -> None:
    """Serve until SIGTERM or SIGINT, then shut down cleanly."""
    server = EngineServer(engine, settings, reuse_port=reuse_port)
    port = await server.start()
    host = settings.grpc_addr.rsplit(":", 1)[0]
    store = redact_store(settings.store)
    log.info("agentik engine listening on %s:%d (store %s)", host, port, store)
    if server.metrics_port:
        metrics_host = settings.metrics_addr.rsplit(":", 1)[0]
        log.info("engine metrics on http://%s:%d/metrics", metrics_host, server.metrics_port)
    if engine.model.name == "offline":
        log.warning(
            "using the built-in OFFLINE model: answers are canned echoes. "
            "Set OPENAI_BASE_URL and/or OPENAI_API_KEY to use a real LLM."
        )
    else:
        endpoint = getattr(engine.model, "base_url", "")
        log.info("LLM: %s%s", engine.model.name, f" at {_redacted(endpoint)}" if endpoint else "")
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()

    def now() -> None:  # a second signal: do not wait for the runs
        stopped = engine.interrupt_all()
        log.warning("stopping now: %d runs in flight interrupted (their answers kept)", stopped)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, now)
    if engine.runs_in_flight:
        log.info(
            "shutting down: waiting up to %gs for %d runs in flight (signal again to stop "
            "them now)",
            settings.shutdown_grace,
            engine.runs_in_flight,
        )
    await server.stop()
    log.info("engine stopped")
