"""The facade's gRPC connection to the engine: one channel per worker process.

The channel is made lazily, on the first call in a process, never at import: gunicorn
forks its workers from a master that must hold no gRPC channel (gRPC's threads and
sockets do not survive a fork). A sync channel is thread-safe, so the worker's threads
share it. If the process forked after the channel was made, the child makes its own.

Every engine call made while a request is handled carries that request's
``Authorization`` header and, while tracing is on, its span
(:mod:`web_facade.engine_credentials`): the facade checks no credentials itself, the
engine does.

The target may name several engines (``ipv4:A:P,B:P``, a DNS name with several
addresses, ...; see :mod:`agentik.addresses`). The channel balances calls over all of
them (``round_robin``: each call goes to the next ready engine; one that is down is left
out until it reconnects) and retries the calls that are safe to repeat when an engine was
unavailable (:data:`RETRIED_METHODS`). A cut event stream is resumed by the relay
(:mod:`web_facade.stream.relay`), not by the channel.

Engine workers (``agentik engine --workers N``) share one port, where the kernel hands each
connection, not each call, to a process. Each worker also listens on an address of its own
and names every worker's address in its health answers (``agentik-workers``). A client made
with ``discover=True`` (the facade's) and a ``HOST:PORT`` target asks for that list in the
background, after its first call and then every :data:`DISCOVERY_INTERVAL` seconds
(:data:`QUIET_INTERVAL` while there is none); once each listed worker answers on its
own address, the engine calls go over one more channel whose target lists them all
(``ipv4:A:P1,A:P2,...``), round robin: each call to the next worker that is up, so the
workers share the calls evenly whatever the kernel does. A worker that is down is left out
until it reconnects (at the same address, gRPC reconnects by itself); a new list (the set
restarted on new ports) replaces the channel; no list (a single engine again) or a listed
worker that cannot be reached (a NAT, a firewall in between) leaves the calls on the
target's own channels. Health checks always go to the target.

With ``[web] stream_reader = "asyncio"`` the event streams go over ``grpc.aio`` channels
of the worker's one asyncio loop (:mod:`web_facade.aio_loop`), with the same options;
those calls carry the forwarded metadata explicitly, taken while the request is handled.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from typing import Any, Final

import grpc
import grpc.aio
import grpc.experimental
from flask import current_app
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentik.config import Settings
from agentik.limits import GRPC_MESSAGE_LIMIT
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from web_facade import aio_loop
from web_facade.engine_credentials import ForwardCredentials
from web_facade.engine_workers import (
    CHECK_TIMEOUT,
    WORKERS_METADATA,
    Unbalanceable,
    aio_warm,
    balanced_target,
    host_port,
    reachable,
    resolve,
    warm,
)

__all__ = [
    "DISCOVERY_INTERVAL",
    "QUIET_INTERVAL",
    "RETRIED_METHODS",
    "SERVICE_CONFIG",
    "UNARY_TIMEOUT",
    "EngineClient",
    "current_engine",
    "current_settings",
    "install",
]

log = logging.getLogger(__name__)

UNARY_TIMEOUT = 30.0
"""Deadline of the engine's unary calls (sessions, messages, interrupt), in seconds."""

DISCOVERY_INTERVAL = 2.0
"""Seconds between two asks for the engine workers' own addresses (one health check) while
the calls are balanced over them or the engine does not answer."""

QUIET_INTERVAL = 30.0
"""Seconds between two asks while the engine lists no workers (a single engine) or lists
workers that do not answer from here."""

_EXTENSION = "agentik"
_SERVICE = "agentik.engine.v1.AgentEngine"

RETRIED_METHODS = (
    "GetSession",
    "ListSessions",
    "ListMessages",
    "GetRun",
    "ListRuns",
    "ListRunChains",
    "ListAgents",
    "GetAgent",
    "GetPushConfig",
    "ListPushConfigs",
    "ListFailedWebhooks",
    "Authenticate",
    "RenameSession",
    "Interrupt",
    "Subscribe",
)
"""The engine methods the channel tries again (on another engine, if there are several)
when the one it picked was unavailable. Reads are safe to repeat: every ``Get*`` and
``List*`` method, and ``Authenticate`` (it checks credentials and changes nothing).
``RenameSession`` is too: setting the same title twice leaves the same session.
``Interrupt`` is: a second one finds the run stopped and answers ``interrupted: false``.
``Subscribe`` is only a read, and gRPC retries a stream only until its first answer
arrives. Not retried: ``CreateSession`` (a repeat would make a second session), ``Run``
(a second run), and ``DeleteSession``: a repeat after a delete that took effect would
turn the success into NOT_FOUND, so a caller that saw UNAVAILABLE looks and deletes
again itself."""

SERVICE_CONFIG: dict[str, Any] = {
    "loadBalancingConfig": [{"round_robin": {}}],
    "methodConfig": [
        {
            "name": [{"service": _SERVICE, "method": method} for method in RETRIED_METHODS],
            "retryPolicy": {
                "maxAttempts": 5,
                "initialBackoff": "0.05s",
                "maxBackoff": "0.5s",
                "backoffMultiplier": 2,
                "retryableStatusCodes": ["UNAVAILABLE"],
            },
        }
    ],
}
"""The channel's service config: round robin over every engine address, and retries."""

_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    # The engine sends nothing larger: its events and pages are bounded under this by
    # [engine] max_event_bytes (engine_service/core/bounds.py).
    ("grpc.max_receive_message_length", GRPC_MESSAGE_LIMIT),
    # Reconnect fast after an engine restart instead of backing off for up to 2 minutes.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # Event streams are read by the relay thread that waits for them, not handed over by
    # the channel's spin thread: one thread switch less per event.
    (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1),
    # Round robin over the engines and retries of the safe calls; the target's resolver
    # gives no service config of its own that could replace this one.
    ("grpc.service_config", json.dumps(SERVICE_CONFIG)),
    ("grpc.service_config_disable_resolution", 1),
    ("grpc.enable_retries", 1),
    # This client's own connections: gRPC otherwise shares them between channels with the
    # same target and options, process-wide, and a new client would inherit the backoff of
    # an older one's connection to an engine that stopped at that address (its calls then
    # fail UNAVAILABLE at once); and several channels to engine workers on one port would
    # all ride one connection.
    ("grpc.use_local_subchannel_pool", 1),
]


KEEPALIVE_TIMEOUT: Final = 10.0
"""The longest wait for a ping's answer, in seconds."""


def keepalive_options(interval: float) -> list[tuple[str, Any]]:
    """Pings on a connection with calls open, every ``interval`` seconds: an engine that
    answers none within ``min(KEEPALIVE_TIMEOUT, interval)`` (stopped, a frozen VM, a silent
    partition, while its socket is still open) fails its calls with UNAVAILABLE, so a stream
    ends or is resumed instead of sending heartbeats for ever. The engine takes a ping every
    second (``engine_service.server.PING_OPTIONS``)."""
    if interval <= 0:
        return []
    timeout = max(1000, round(min(KEEPALIVE_TIMEOUT, interval) * 1000))
    return [
        ("grpc.keepalive_time_ms", max(1000, round(interval * 1000))),
        ("grpc.keepalive_timeout_ms", timeout),
        # grpcio 1.85 times a keepalive ping's answer by this one (default 1 minute); the
        # option above is what older versions read.
        ("grpc.http2.ping_timeout_ms", timeout),
        # A subscription waiting for a conversation's next turn receives nothing for long:
        # ping all the same (gRPC stops after 2 pings without data otherwise).
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.keepalive_permit_without_calls", 0),
    ]


class EngineClient:
    """Stubs for the engine's services over lazily made, per-process channels.

    ``channels`` > 1 opens that many connections to the target and spreads the calls over
    them in turn: engine workers sharing one port (``agentik engine --workers N``,
    SO_REUSEPORT) each take the connections the kernel gives them, so one connection per
    facade worker would leave all of its calls on one engine process. ``discover``: learn
    the workers' own addresses and balance per call over them (the module's docstring).
    """

    def __init__(
        self,
        target: str,
        channels: int = 1,
        max_send_bytes: int = 0,
        *,
        discover: bool = False,
        keepalive: float = 0.0,
    ) -> None:
        """``max_send_bytes``: the largest request sent (the engine's limit, the settings'
        ``request_message_bytes``); a larger one fails here, not on the wire (0: gRPC's
        default, no limit). ``keepalive``: seconds between pings while calls are open
        (``[web] engine_keepalive``; 0: none)."""
        self.target = target
        self.channels = max(1, channels)
        self.discover = discover and host_port(target) is not None
        self._options = list(_CHANNEL_OPTIONS) + keepalive_options(keepalive)
        if max_send_bytes > 0:
            self._options.append(("grpc.max_send_message_length", max_send_bytes))
        self._lock = threading.Lock()
        self._pid = 0
        self._channel: Any = None
        self._channels: list[Any] = []
        self._stubs: list[pb_grpc.AgentEngineStub] = []
        self._turn = itertools.count()
        self._health: Any = None
        self._stop = threading.Event()
        self._workers: tuple[str, ...] = ()
        self._balanced: Any = None
        self._balanced_stub: pb_grpc.AgentEngineStub | None = None
        self._unreachable: tuple[str, ...] = ()
        self._aio_pid = 0
        self._aio_channels: list[Any] = []
        self._aio_stubs: list[pb_grpc.AgentEngineStub] = []
        self._aio_balanced: Any = None
        self._aio_balanced_stub: pb_grpc.AgentEngineStub | None = None
        self._aio_workers: tuple[str, ...] = ()

    @property
    def workers(self) -> tuple[str, ...]:
        """The engine workers' addresses the calls are balanced over, resolved (empty: the
        calls go over the target's own channels)."""
        return self._workers if self._pid == os.getpid() else ()

    def _connect(self) -> None:
        with self._lock:
            if self._channel is not None and self._pid == os.getpid():
                return
            # Channels inherited through fork are unusable; drop them without closing.
            self._channels = [
                grpc.insecure_channel(self.target, options=self._options)
                for _ in range(self.channels)
            ]
            self._channel = self._channels[0]
            self._stubs = [
                pb_grpc.AgentEngineStub(grpc.intercept_channel(channel, ForwardCredentials()))
                for channel in self._channels
            ]
            self._health = health_pb2_grpc.HealthStub(self._channel)
            self._workers, self._balanced, self._balanced_stub = (), None, None
            self._unreachable = ()
            self._pid = os.getpid()
            if self.discover:
                self._stop = threading.Event()
                threading.Thread(
                    target=self._watch,
                    args=(self._stop, self._pid),
                    name="agentik-engine-workers",
                    daemon=True,
                ).start()

    @property
    def engine(self) -> pb_grpc.AgentEngineStub:
        """The ``agentik.engine.v1.AgentEngine`` stub: over the engine workers' own
        addresses once known, else the next connection's to the target, in turn."""
        if self._pid != os.getpid():
            self._connect()
        balanced = self._balanced_stub
        if balanced is not None:
            return balanced
        stubs = self._stubs
        return stubs[0] if len(stubs) == 1 else stubs[next(self._turn) % len(stubs)]

    @property
    def health(self) -> Any:
        """The standard ``grpc.health.v1.Health`` stub (always the target's)."""
        if self._pid != os.getpid():
            self._connect()
        return self._health

    # --- the engine workers' own addresses ---------------------------------------------

    def _watch(self, stop: threading.Event, pid: int) -> None:
        """Ask for the workers' addresses now and again (:meth:`_discover` says when)."""
        while not stop.is_set() and os.getpid() == pid:
            wait: float | None = DISCOVERY_INTERVAL
            try:
                wait = self._discover(stop)
            except Exception:  # the thread must outlive whatever one ask ran into
                log.exception("asking the engine for its workers' addresses failed")
            if wait is None:
                return
            stop.wait(wait)

    def _discover(self, stop: threading.Event) -> float | None:
        """One ask; seconds until the next, or None when this target can never be balanced
        here (stop asking). Soon (``DISCOVERY_INTERVAL``) while the calls are balanced (the
        set may restart on new ports) or the engine does not answer; seldom
        (``QUIET_INTERVAL``) while it lists no workers, or workers that do not answer."""
        health = self._health
        if health is None:  # closed meanwhile
            return None
        try:
            _, call = health.Check.with_call(health_pb2.HealthCheckRequest(), timeout=CHECK_TIMEOUT)
        except grpc.RpcError:
            return DISCOVERY_INTERVAL  # the engine is down or starting: keep what we have
        listed = dict(call.initial_metadata() or ()).get(WORKERS_METADATA, "")
        target = host_port(self.target)
        assert target is not None  # discover is only set for such targets
        try:
            workers = resolve(listed, target[0]) if listed else ()
        except Unbalanceable as exc:
            log.warning("engine calls stay on %s, not balanced per worker: %s", self.target, exc)
            return None
        if workers == self._workers:
            return DISCOVERY_INTERVAL if workers else QUIET_INTERVAL
        if workers and not reachable(workers):
            if workers != self._unreachable:
                log.warning(
                    "the engine workers' own addresses (%s) do not answer from here: engine "
                    "calls stay on %s, balanced per connection by the engine's host",
                    ", ".join(workers),
                    self.target,
                )
                self._unreachable = workers
            return QUIET_INTERVAL
        channel = stub = None
        if workers:
            channel = grpc.insecure_channel(balanced_target(workers), options=self._options)
            stub = pb_grpc.AgentEngineStub(grpc.intercept_channel(channel, ForwardCredentials()))
            warm(channel, len(workers))
        with self._lock:
            if stop.is_set():  # closed meanwhile
                old = channel
            else:
                old = self._balanced
                self._workers, self._balanced, self._balanced_stub = workers, channel, stub
        if old is not None:
            # Its workers are gone (the set restarted elsewhere, or one engine replaced it).
            old.close()
        if workers:
            log.info("engine calls balanced over its %d workers: %s", len(workers), workers)
        return DISCOVERY_INTERVAL if workers else QUIET_INTERVAL

    # --- grpc.aio ---------------------------------------------------------------------

    @property
    def aio_engine(self) -> pb_grpc.AgentEngineStub:
        """The ``AgentEngine`` stub over this process's ``grpc.aio`` channels (the workers'
        own addresses once known, else the next connection's to the target, in turn), for
        calls made on :func:`web_facade.aio_loop.event_loop`."""
        if self._pid != os.getpid():
            self._connect()  # and the discovery of the workers, if asked
        if self._aio_pid != os.getpid() or self._aio_workers != self.workers:
            self._aio_connect()
        balanced = self._aio_balanced_stub
        if balanced is not None:
            return balanced
        stubs = self._aio_stubs
        return stubs[0] if len(stubs) == 1 else stubs[next(self._turn) % len(stubs)]

    def _aio_options(self) -> list[tuple[str, Any]]:
        return [
            option
            for option in self._options
            if option[0] != grpc.experimental.ChannelOptions.SingleThreadedUnaryStream
        ]

    def _aio_connect(self) -> None:
        with self._lock:
            workers = self.workers
            if self._aio_pid != os.getpid():
                channels = aio_loop.run(self._aio_open(self.target, self.channels))
                self._aio_channels = channels
                self._aio_stubs = [pb_grpc.AgentEngineStub(channel) for channel in channels]
                self._aio_balanced, self._aio_balanced_stub = None, None
                self._aio_workers = ()
                self._aio_pid = os.getpid()
            if workers == self._aio_workers:
                return
            old = self._aio_balanced
            self._aio_balanced = self._aio_balanced_stub = None
            if workers:
                target = balanced_target(workers)
                (channel,) = aio_loop.run(self._aio_open(target, 1, len(workers)))
                self._aio_balanced = channel
                self._aio_balanced_stub = pb_grpc.AgentEngineStub(channel)
            self._aio_workers = workers
            if old is not None:
                aio_loop.run(_close_all([old]), timeout=5.0)

    async def _aio_open(self, target: str, count: int, workers: int = 0) -> list[Any]:
        # Made on the loop's thread: an aio channel belongs to the loop it was made on.
        options = self._aio_options()
        channels = [grpc.aio.insecure_channel(target, options=options) for _ in range(count)]
        if workers:
            await aio_warm(channels[0], workers)
        return channels

    def close(self) -> None:
        """Close this process's channels (a later call makes new ones)."""
        with self._lock:
            self._stop.set()
            if self._channel is not None and self._pid == os.getpid():
                for channel in self._channels:
                    channel.close()
                if self._balanced is not None:
                    self._balanced.close()
            self._channel = self._health = None
            self._channels, self._stubs = [], []
            self._workers, self._balanced, self._balanced_stub = (), None, None
            self._pid = 0
            if self._aio_channels and self._aio_pid == os.getpid():
                channels = self._aio_channels
                if self._aio_balanced is not None:
                    channels = [*channels, self._aio_balanced]
                aio_loop.run(_close_all(channels), timeout=5.0)
            self._aio_channels, self._aio_stubs = [], []
            self._aio_balanced = self._aio_balanced_stub = None
            self._aio_workers = ()
            self._aio_pid = 0


async def _close_all(channels: list[Any]) -> None:
    for channel in channels:
        await channel.close()


def install(app: Any, settings: Settings, client: EngineClient) -> None:
    """Attach the settings and the engine client to a Flask app."""
    app.extensions[_EXTENSION] = (settings, client)


def current_engine() -> EngineClient:
    """The engine client of the app handling this request."""
    client: EngineClient = current_app.extensions[_EXTENSION][1]
    return client


def current_settings() -> Settings:
    """The settings of the app handling this request."""
    settings: Settings = current_app.extensions[_EXTENSION][0]
    return settings
