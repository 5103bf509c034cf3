"""The engine's gRPC server: AgentEngine, A2A's gRPC binding, health and reflection on one
``grpc.aio`` server.

Start: the configured MCP servers connect in the background; one that fails never stops
the engine (its tools are absent, the log says why). Runs left running by a dead engine
are resumed before the port serves, once the tools have connected or failed.

Shutdown (SIGTERM/SIGINT, or ``stop``): health turns NOT_SERVING, new runs are refused
with UNAVAILABLE, runs in flight get ``shutdown_grace`` seconds to finish, the rest are
interrupted and stored as interrupted, the MCP connections close, then the server stops.

Storage: while the store cannot write (a full disk, a locked database), health says
NOT_SERVING; it says SERVING again once a write probe succeeds.

The LLM: its endpoint is checked at start and every ``llm_check_interval`` seconds
(``engine_service.llm.probe``); each health ``Check`` answer carries the result in its
initial metadata, ``agentik-llm: ok | unreachable | unknown model | unauthorized | offline |
checking``. A bad LLM never makes the engine NOT_SERVING: runs are refused by the LLM, named.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import grpc
from a2a.types import a2a_pb2_grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection, reflection_pb2

from agentik import tracing
from agentik.collector import settle
from agentik.config import Settings
from agentik.limits import GRPC_MESSAGE_LIMIT
from agentik.netcheck import refuse_open_exposure
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.a2a.servicer import SERVICE_NAME as A2A_SERVICE_NAME
from engine_service.a2a.servicer import A2aServicer
from engine_service.accept import CallsAhead, Recording
from engine_service.auth import Gate
from engine_service.build import build_a2a_agents, build_delivery_worker, build_mcp_sources
from engine_service.core.deliveries import Delivery, DeliveryStatus, SendResult
from engine_service.core.engine import Engine
from engine_service.core.errors import InvalidInput
from engine_service.core.hitl import ASK_USER, needs_approval
from engine_service.core.run_webhooks import PushConfigs, RunWebhooks
from engine_service.llm.probe import LlmWatch
from engine_service.malformed import MalformedRequests
from engine_service.servicer import RUN_METHOD, SUBSCRIBE_METHOD, AgentEngineServicer
from engine_service.stalled_writes import StalledWrites
from engine_service.stores import store_label
from engine_service.webhooks.a2a_push import A2aPush

__all__ = [
    "COMPANION_TICK",
    "LLM_METADATA",
    "METRICS_METADATA",
    "SERVICE_NAME",
    "WORKERS_METADATA",
    "WORKER_METADATA",
    "Companion",
    "EngineServer",
    "run_engine",
]

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["AgentEngine"].full_name
REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
"""Reflection under its stable name, which newer tools ask first; grpcio-reflection serves
only ``v1alpha``, whose messages are the same on the wire."""
REFLECTION_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _add_reflection_v1_descriptor() -> None:
    """Put ``grpc/reflection/v1/reflection.proto`` in the default pool, so reflection can
    describe the v1 service it lists (``buf curl --list-methods``, ``grpcurl describe``).

    grpcio-reflection ships only the ``v1alpha`` file; v1 is the same file under another
    package, so it is derived from it: same messages, fields and numbers.
    """
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(REFLECTION_V1_FILE)
        return
    except KeyError:
        pass
    file = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(file)
    old, new = f".{file.package}.", ".grpc.reflection.v1."
    file.name, file.package = REFLECTION_V1_FILE, "grpc.reflection.v1"
    file.options.java_package = "io.grpc.reflection.v1"
    file.options.java_outer_classname = "ServerReflectionProto"
    file.options.go_package = "google.golang.org/grpc/reflection/grpc_reflection_v1"
    for message in file.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old) :]
    for service in file.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old) :]
            method.output_type = new + method.output_type[len(old) :]
    pool.Add(file)


def _enable_reflection(server: grpc.aio.Server, names: tuple[str, ...]) -> None:
    """Serve reflection as ``v1alpha`` (grpcio-reflection) and as ``v1``."""
    _add_reflection_v1_descriptor()
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


PING_OPTIONS: list[tuple[str, int]] = [
    # Clients may ping a connection that carries calls once a second, also while nothing
    # else is sent (the facade's keepalive, [web] engine_keepalive, finds a stopped engine
    # so); faster pings are gRPC's "too many pings" and close the connection.
    ("grpc.http2.min_ping_interval_without_data_ms", 1000),
]

LLM_METADATA = "agentik-llm"
"""The health answer's metadata key for the LLM endpoint's state."""
METRICS_METADATA = "agentik-metrics"
"""The health answer's metadata key for where the engine serves /metrics (``HOST:PORT``),
present while it does: the facade's /metrics appends what it serves."""
WORKERS_METADATA = "agentik-workers"
"""The health answer's metadata key, on a worker of ``agentik engine --workers N``, for every
worker's own address (``HOST:PORT,HOST:PORT,...``): the facade dials each and balances its
calls over them (``web_facade.engine_client``)."""
WORKER_METADATA = "agentik-worker"
"""The health answer's metadata key, on such a worker, for its own address: which worker
answered (the facade waits until each has, before it balances over them)."""


class _Health(HealthServicer):
    """The standard health service; every ``Check`` answer also says the LLM's state and,
    while metrics are served, where."""

    def __init__(self, metadata: Callable[[], tuple[tuple[str, str], ...]]) -> None:
        super().__init__()
        self._metadata = metadata

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        await context.send_initial_metadata(self._metadata())
        reply: health_pb2.HealthCheckResponse = await super().Check(request, context)
        return reply


def _interceptors() -> list[grpc.aio.ServerInterceptor]:
    """A server span per RPC while tracing is on (``agentik.tracing``), else none."""
    if not tracing.enabled():
        return []
    from engine_service.tracing_rpc import TracingInterceptor

    return [TracingInterceptor(SERVICE_NAME)]


class EngineServer:
    """A started engine behind a gRPC port."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        *,
        reuse_port: bool = False,
        own_addr: str = "",
        workers: tuple[str, ...] = (),
    ) -> None:
        """``reuse_port``: bind with SO_REUSEPORT, sharing the port with the other
        workers of ``agentik engine --workers N``; without it a taken port fails.
        ``own_addr``: an address this worker also serves alone (the same services, behind
        the same gate); ``workers``: every worker's own address, said in health answers."""
        refuse_open_exposure(settings, settings.engine.grpc_addr, "engine")
        self.gate = Gate.from_settings(settings)
        self.engine = engine
        self.settings = settings
        self.llm = LlmWatch.of(engine.agents, settings.llm.check_interval)
        self.health = _Health(self._health_metadata)
        self.mcp = build_mcp_sources(settings, engine.tools)
        self.a2a = build_a2a_agents(settings, engine.tools)
        self.deliveries = build_delivery_worker(settings, engine, self._webhook_attempt)
        check = _guard(settings)
        pushers = [A2aPush(engine.store)]
        engine.notices.webhooks = RunWebhooks(self.deliveries, check, pushers)
        engine.notices.push = PushConfigs(engine.store, check, settings.webhooks.max_push_configs)
        engine.tools_settled = self._tools_settled
        self.port = 0
        self.own_addr = own_addr
        self.workers = workers
        self._health_updates: set[asyncio.Task[None]] = set()
        engine.on_storage_change(self._storage_changed)
        limit = settings.request_message_bytes
        interceptors: list[grpc.aio.ServerInterceptor] = []
        self.metrics: Any = None
        self._metrics_server: Any = None
        self.metrics_port = 0
        if settings.engine.metrics_addr:
            refuse_open_exposure(settings, settings.engine.metrics_addr, "metrics endpoint")
            # Loaded only when metrics are on: prometheus_client costs memory otherwise.
            from engine_service.metrics import EngineMetrics, GrpcMetrics

            self.metrics = EngineMetrics(engine.model.name)
            engine.observe(self.metrics)
            self.metrics.watch_mcp(self.mcp)
            self.metrics.watch_a2a(self.a2a)
            if settings.tools.python:  # pydantic loads only when Python tools are configured
                from engine_service.tools.python.tool import PythonTool

                self.metrics.watch_python(t for t in engine.tools if isinstance(t, PythonTool))
            # Unary calls; the streams (Run, Subscribe) are timed by the servicer's hook.
            interceptors.append(GrpcMetrics(self.metrics))
        # MalformedRequests last: the others wrap its handler and see its refusals.
        interceptors = [
            *_interceptors(),
            *interceptors,
            MalformedRequests({f"/{RUN_METHOD}", f"/{SUBSCRIBE_METHOD}"}, limit),
        ]
        self.server = grpc.aio.server(
            interceptors=interceptors,
            options=[
                # Twice the limit: a request over it but under this is refused by
                # MalformedRequests in our words, naming the limit, unparsed.
                ("grpc.max_receive_message_length", 2 * limit),
                # What most clients accept; every event and page the engine sends is
                # bounded under it by [engine] max_event_bytes (core.bounds).
                ("grpc.max_send_message_length", GRPC_MESSAGE_LIMIT),
                ("grpc.so_reuseport", 1 if reuse_port else 0),
                *PING_OPTIONS,
            ],
        )
        methods = Recording(self.server)  # for the calls taken ahead
        # Streams whose client stopped reading are cut past [engine] write_timeout.
        self.stalls = StalledWrites(
            settings.engine.write_timeout, self.metrics.stream_cut if self.metrics else None
        )
        pb_grpc.add_AgentEngineServicer_to_server(
            AgentEngineServicer(
                engine,
                self.gate,
                self.metrics.stream_opened if self.metrics else None,
                self.stalls,
            ),
            methods,  # type: ignore[arg-type]
        )
        # A2A's gRPC binding, on the same port and behind the same gate (docs/a2a.md).
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(  # type: ignore[no-untyped-call]
            A2aServicer(engine, self.gate, settings, self.stalls), methods
        )
        self.calls_ahead = CallsAhead(
            self.server, methods.handlers, interceptors, settings.engine.accept_ahead
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        _enable_reflection(
            self.server,
            (
                SERVICE_NAME,
                A2A_SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            ),
        )

    def _webhook_attempt(self, delivery: Delivery, result: SendResult) -> None:
        if self.metrics is None:
            return
        outcome = "delivered" if result.ok else "retry"
        if delivery.status is DeliveryStatus.FAILED:
            outcome = "failed"
        self.metrics.webhook_attempt(delivery.kind, outcome)

    def _health_metadata(self) -> tuple[tuple[str, str], ...]:
        said: tuple[tuple[str, str], ...] = ((LLM_METADATA, self.llm.state),)
        if self.metrics_port:
            host = self.settings.engine.metrics_addr.rsplit(":", 1)[0]
            said += ((METRICS_METADATA, f"{host}:{self.metrics_port}"),)
        if self.workers:
            said += ((WORKERS_METADATA, ",".join(self.workers)),)
        if self.own_addr:
            said += ((WORKER_METADATA, self.own_addr),)
        return said

    async def start(self) -> int:
        """Bind, recover abandoned runs, serve; returns the bound port."""
        self.port = self.server.add_insecure_port(self.settings.engine.grpc_addr)
        if not self.port:
            raise OSError(f"cannot bind the engine to {self.settings.engine.grpc_addr}")
        if self.own_addr and not self.server.add_insecure_port(self.own_addr):
            raise OSError(f"cannot bind the engine worker to {self.own_addr}")
        # The tools connect first: a run the engine resumes at its start needs them.
        self.mcp.start()
        self.a2a.start()
        await self.engine.start()
        await self.server.start()
        self.calls_ahead.start()
        if self.metrics is not None:
            from engine_service.metrics import serve_metrics

            try:
                self._metrics_server = serve_metrics(
                    self.metrics, self.settings.engine.metrics_addr
                )
            except OSError as exc:
                await self.server.stop(grace=None)
                raise OSError(
                    f"cannot serve metrics on {self.settings.engine.metrics_addr}: {exc.strerror}"
                ) from exc
            self.metrics_port = self._metrics_server.server_port
        self.llm.start()
        self.deliveries.start()
        await self._set_health(self.engine.storage_ok)
        return self.port

    async def _tools_settled(self) -> None:
        """Until each MCP server and A2A agent has connected or failed once (its connect
        timeout, plus a second): a resumed run needs the tools its calls name."""
        wait = max(
            [s.config.connect_timeout for s in self.mcp]
            + [a.config.connect_timeout for a in self.a2a],
            default=0.0,
        )
        await asyncio.gather(self.mcp.wait_settled(wait + 1.0), self.a2a.wait_settled(wait + 1.0))

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
        await self.engine.shutdown(self.settings.engine.shutdown_grace)
        await asyncio.gather(
            self.mcp.stop(), self.a2a.stop(), self.llm.stop(), self.deliveries.stop()
        )
        await self.server.stop(grace=1.0)
        await self.calls_ahead.stop()
        await self.stalls.close()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        await self.engine.store.close()


def _guard(settings: Settings) -> Callable[[str], None]:
    """The SSRF guard's check of a webhook URL as a run asks for it, in the core's words."""
    from engine_service.webhooks.guard import WebhookRefused, check_url

    allow_private = settings.webhooks.allow_private

    def check(url: str) -> None:
        try:
            check_url(url, allow_private=allow_private)
        except WebhookRefused as exc:
            raise InvalidInput(str(exc)) from None

    return check


def _redacted(url: str) -> str:
    """``url`` without credentials it may carry (``https://user:key@host`` → ``host``)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


def llm_lines(engine: Engine) -> list[tuple[int, str]]:
    """The start-up lines (level, text) on the models: the default agent's, then each
    other agent's own; whether each endpoint answers follows from the first check."""
    agents, default = engine.agents, engine.model
    others = [p for p in agents if p.name != agents.default and p.model is not default]

    def at(model: object) -> str:
        endpoint = getattr(model, "base_url", "")
        return f" at {_redacted(endpoint)}" if endpoint else ""

    lines: list[tuple[int, str]] = []
    if default.name != "offline":
        lines.append((logging.INFO, f"LLM: {default.name}{at(default)}"))
    elif own := [repr(p.name) for p in others if p.model.name != "offline"]:
        others_have = (
            f"agent {own[0]} has an LLM endpoint of its own"
            if len(own) == 1
            else f"agents {', '.join(own)} have LLM endpoints of their own"
        )
        lines.append(
            (
                logging.WARNING,
                f"the default agent {agents.default!r} uses the built-in OFFLINE model: its "
                f"answers are canned echoes ({others_have}). Set OPENAI_BASE_URL and/or "
                "OPENAI_API_KEY ([llm]) to give it a real LLM.",
            )
        )
    else:
        lines.append(
            (
                logging.WARNING,
                "using the built-in OFFLINE model: answers are canned echoes. "
                "Set OPENAI_BASE_URL and/or OPENAI_API_KEY to use a real LLM.",
            )
        )
    for profile in others:
        lines.append(
            (
                logging.INFO,
                f"LLM of agent {profile.name!r}: {profile.model.name}{at(profile.model)}",
            )
        )
    return lines


def startup_lines(settings: Settings, engine: Engine) -> list[str]:
    """What an operator checks first: auth, the tools loaded, which wait for a person."""
    if settings.auth_enabled:
        kinds = [f"{len(settings.auth.tokens)} tokens"] if settings.auth.tokens else []
        kinds += ["JWT"] if settings.auth.jwt_key_file else []
        auth = f"auth: on ({', '.join(kinds)})"
    else:
        auth = "auth: off (no tokens; serves loopback only unless AGENTIK_ALLOW_ANONYMOUS)"
    names = [name for name, _, _ in engine.tools.describe()]
    tools = f"tools: {len(names)} loaded ({', '.join(names) or 'none'})"
    if (servers := len(settings.mcp.servers)) == 1:
        tools += "; MCP tools join as their server connects"
    elif servers:
        tools += f"; MCP tools join as their {servers} servers connect"
    gated = [n for n in names if n != ASK_USER and needs_approval(n, settings.tools.approval)]
    if settings.tools.approval:
        patterns = ", ".join(settings.tools.approval)
        approval = f"approval needed: {', '.join(gated) or 'none loaded yet'} ({patterns})"
    else:
        approval = "approval needed: none (AGENTIK_TOOLS_APPROVAL)"
    return [auth, tools, approval]


class Companion(Protocol):
    """A server this process runs beside the engine (``agentik serve``: the web facade's
    workers, ``web_facade/serve_web.py``): started once the engine listens, looked at every
    :data:`COMPANION_TICK` seconds, stopped before the engine stops."""

    def start(self) -> None: ...

    def check(self) -> bool:
        """False once it cannot run: the engine then stops too."""
        ...

    def stop(self) -> bool:
        """Stop (blocking; run in a thread); whether it ended cleanly."""
        ...

    def hurry(self) -> None:
        """A second signal: stop now, not after the grace."""
        ...

    def close(self) -> None:
        """Release what it holds (and end what still runs); called last, in every case."""
        ...


COMPANION_TICK = 0.5
"""Seconds between two looks at the companion."""


async def run_engine(
    settings: Settings,
    engine: Engine,
    *,
    reuse_port: bool = False,
    own_addr: str = "",
    workers: tuple[str, ...] = (),
    companion: Companion | None = None,
) -> bool:
    """Serve until SIGTERM or SIGINT (or until the ``companion`` fails), then shut down
    cleanly: the companion first, then the engine. True when a signal stopped it and the
    companion ended cleanly. ``reuse_port``, ``own_addr``, ``workers``: a worker of
    ``agentik engine --workers N``, see :class:`EngineServer`."""
    server = EngineServer(
        engine, settings, reuse_port=reuse_port, own_addr=own_addr, workers=workers
    )
    try:
        port = await server.start()
    except BaseException:
        if companion is not None:
            companion.close()
        raise
    settle(settings.engine.gc_threshold)  # what start-up made stays: the collector skips it
    try:
        return await _serve(settings, engine, server, port, own_addr, companion)
    finally:
        if companion is not None:
            companion.close()


async def _serve(
    settings: Settings,
    engine: Engine,
    server: EngineServer,
    port: int,
    own_addr: str,
    companion: Companion | None,
) -> bool:
    host = settings.engine.grpc_addr.rsplit(":", 1)[0]
    store = store_label(settings.engine.store)
    own = f" and on its own {own_addr}" if own_addr else ""
    log.info("agentik engine listening on %s:%d%s (store %s)", host, port, own, store)
    if server.metrics_port:
        metrics_host = settings.engine.metrics_addr.rsplit(":", 1)[0]
        log.info("engine metrics on http://%s:%d/metrics", metrics_host, server.metrics_port)
    for level, line in llm_lines(engine):
        log.log(level, "%s", line)
    for line in startup_lines(settings, engine):
        log.info("%s", line)
    # The LLM's line, "llm: ok (...)" or a warning with its fix, comes from its first probe.
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    if companion is None:
        await stopping.wait()
    else:
        companion.start()
        while companion.check():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), COMPANION_TICK)
            if stopping.is_set():
                break

    def now() -> None:  # a second signal: do not wait for the runs
        if companion is not None:
            companion.hurry()
        stopped = engine.stop_all()
        log.warning("stopping now: %d runs in flight interrupted (their answers kept)", stopped)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, now)
    clean = True
    if companion is not None:  # it goes first: the web ends its streams cleanly
        clean = await asyncio.to_thread(companion.stop) and stopping.is_set()
    if engine.runs_in_flight and engine.hands_over:
        log.info(
            "shutting down: handing %d runs in flight over to the other replicas (tools "
            "running get up to %gs to finish)",
            engine.runs_in_flight,
            settings.engine.shutdown_grace,
        )
    elif engine.runs_in_flight:
        log.info(
            "shutting down: waiting up to %gs for %d runs in flight (signal again to stop "
            "them now)",
            settings.engine.shutdown_grace,
            engine.runs_in_flight,
        )
    await server.stop()
    log.info("engine stopped")
    return clean
