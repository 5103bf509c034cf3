"""The facade's gRPC connection to the engine: one channel per worker process.

The channel is made lazily, on the first call in a process, never at import: gunicorn
forks its workers from a master that must hold no gRPC channel (gRPC's threads and
sockets do not survive a fork). A sync channel is thread-safe, so the worker's threads
share it. If the process forked after the channel was made, the child makes its own.

Every engine call made while a request is handled carries that request's
``Authorization`` header as the ``authorization`` metadata: the facade checks no
credentials itself, the engine does (a header gRPC cannot carry goes as an empty bearer,
which the engine refuses like any malformed one). While tracing is on
(``agentik.tracing``) it also carries the current span as W3C ``traceparent``
metadata, so the engine's spans join the request's trace.

The target may name several engines (``ipv4:A:P,B:P``, a DNS name with several
addresses, ...; see :mod:`agentik.config`). The channel balances calls over all of
them (``round_robin``: each call goes to the next ready engine; one that is down is left
out until it reconnects) and retries the calls that are safe to repeat when an engine was
unavailable (:data:`RETRIED_METHODS`). A cut event stream is resumed by the relay
(:mod:`web_facade.stream.relay`), not by the channel.

With ``[web] stream_reader = "asyncio"`` the event streams go over ``grpc.aio`` channels
of the worker's one asyncio loop (:mod:`web_facade.aio_loop`), with the same options;
those calls carry the forwarded metadata explicitly, taken while the request is handled.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

import grpc
import grpc.aio
import grpc.experimental
from flask import current_app, has_request_context, request
from grpc_health.v1 import health_pb2_grpc

from agentik import tracing
from agentik.config import Settings
from agentik.limits import GRPC_MESSAGE_LIMIT
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from web_facade import aio_loop

__all__ = [
    "RETRIED_METHODS",
    "SERVICE_CONFIG",
    "UNARY_TIMEOUT",
    "EngineClient",
    "current_engine",
    "current_settings",
    "forwarded_authorization",
    "forwarded_metadata",
    "forwardable",
    "install",
]

UNARY_TIMEOUT = 30.0
"""Deadline of the engine's unary calls (sessions, messages, interrupt), in seconds."""

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


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


def forwarded_authorization() -> str | None:
    """The ``authorization`` metadata value for the request being handled, or None.

    A relay thread has no request context: a stream that may reopen its engine call
    takes this value when it opens and passes it as metadata itself.
    """
    if not has_request_context():
        return None
    value = request.headers.get("Authorization")
    return None if value is None else forwardable(value)


def forwardable(value: str) -> str:
    """``value`` if gRPC metadata can carry it (printable ASCII), else an empty bearer."""
    if len(value) <= 8192 and value.isascii() and value.isprintable():
        return value
    return "Bearer"


def forwarded_metadata() -> tuple[tuple[str, str], ...] | None:
    """The metadata :class:`_ForwardCredentials` would add now (authorization, trace
    context), for a call made later on a thread without the request (a relay's reopening)."""
    authorization = forwarded_authorization()
    metadata = [] if authorization is None else [("authorization", authorization)]
    if tracing.enabled():
        metadata += tracing.trace_metadata()
    return tuple(metadata) or None


class _ForwardCredentials(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the current request's ``Authorization`` header to each engine call, and the
    current span's trace context while tracing is on."""

    @staticmethod
    def _details(details: Any) -> Any:
        value = forwarded_authorization()
        traced = tracing.enabled()
        if value is None and not traced:
            return details
        metadata = list(details.metadata or ())
        if value is not None:
            metadata.append(("authorization", value))
        if traced and not any(key == "traceparent" for key, _ in metadata):
            metadata += tracing.trace_metadata()
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)


class EngineClient:
    """Stubs for the engine's services over lazily made, per-process channels.

    ``channels`` > 1 opens that many connections and spreads the calls over them in turn:
    engine workers sharing one port (``agentik engine --workers N``, SO_REUSEPORT) each
    take the connections the kernel gives them, so one connection per facade worker would
    leave all of its calls on one engine process.
    """

    def __init__(self, target: str, channels: int = 1, max_send_bytes: int = 0) -> None:
        """``max_send_bytes``: the largest request sent (the engine's limit, the settings'
        ``request_message_bytes``); a larger one fails here, not on the wire (0: gRPC's
        default, no limit)."""
        self.target = target
        self.channels = max(1, channels)
        self._options = list(_CHANNEL_OPTIONS)
        if max_send_bytes > 0:
            self._options.append(("grpc.max_send_message_length", max_send_bytes))
        self._lock = threading.Lock()
        self._pid = 0
        self._channel: Any = None
        self._channels: list[Any] = []
        self._stubs: list[pb_grpc.AgentEngineStub] = []
        self._turn = itertools.count()
        self._health: Any = None
        self._aio_pid = 0
        self._aio_channels: list[Any] = []
        self._aio_stubs: list[pb_grpc.AgentEngineStub] = []

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
                pb_grpc.AgentEngineStub(grpc.intercept_channel(channel, _ForwardCredentials()))
                for channel in self._channels
            ]
            self._health = health_pb2_grpc.HealthStub(self._channel)
            self._pid = os.getpid()

    @property
    def engine(self) -> pb_grpc.AgentEngineStub:
        """The ``agentik.engine.v1.AgentEngine`` stub (the next connection's, in turn)."""
        if self._pid != os.getpid():
            self._connect()
        stubs = self._stubs
        return stubs[0] if len(stubs) == 1 else stubs[next(self._turn) % len(stubs)]

    @property
    def health(self) -> Any:
        """The standard ``grpc.health.v1.Health`` stub."""
        if self._pid != os.getpid():
            self._connect()
        return self._health

    @property
    def aio_engine(self) -> pb_grpc.AgentEngineStub:
        """The ``AgentEngine`` stub over this process's ``grpc.aio`` channels (the next
        one's, in turn), for calls made on :func:`web_facade.aio_loop.event_loop`."""
        if self._aio_pid != os.getpid():
            self._aio_connect()
        stubs = self._aio_stubs
        return stubs[0] if len(stubs) == 1 else stubs[next(self._turn) % len(stubs)]

    def _aio_connect(self) -> None:
        with self._lock:
            if self._aio_stubs and self._aio_pid == os.getpid():
                return
            channels = aio_loop.run(self._aio_open())
            self._aio_channels = channels
            self._aio_stubs = [pb_grpc.AgentEngineStub(channel) for channel in channels]
            self._aio_pid = os.getpid()

    async def _aio_open(self) -> list[Any]:
        # Made on the loop's thread: an aio channel belongs to the loop it was made on.
        options = [
            option
            for option in self._options
            if option[0] != grpc.experimental.ChannelOptions.SingleThreadedUnaryStream
        ]
        return [
            grpc.aio.insecure_channel(self.target, options=options) for _ in range(self.channels)
        ]

    def close(self) -> None:
        """Close this process's channels (a later call makes new ones)."""
        with self._lock:
            if self._channel is not None and self._pid == os.getpid():
                for channel in self._channels:
                    channel.close()
            self._channel = self._health = None
            self._channels, self._stubs = [], []
            self._pid = 0
            if self._aio_channels and self._aio_pid == os.getpid():
                channels = self._aio_channels
                aio_loop.run(_close_all(channels), timeout=5.0)
            self._aio_channels, self._aio_stubs = [], []
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
