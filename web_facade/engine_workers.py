"""The engine workers' own addresses (``agentik engine --workers N``), made into one
round-robin gRPC target the facade balances its calls over (``web_facade.engine_client``).

Each worker names every worker's address in its health answers (:data:`WORKERS_METADATA`)
and its own (:data:`WORKER_METADATA`). :func:`resolve` makes the list IP addresses (a
wildcard host is the target's host), or refuses one that cannot make one target from here
(:class:`Unbalanceable`); :func:`reachable` checks that each answers from here;
:func:`warm` waits until each is connected on a new channel, so round robin picks among all.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = [
    "CHECK_TIMEOUT",
    "WORKERS_METADATA",
    "WORKER_METADATA",
    "Unbalanceable",
    "aio_warm",
    "balanced_target",
    "host_port",
    "reachable",
    "resolve",
    "warm",
]

WORKERS_METADATA = "agentik-workers"
"""The engine's health answer's metadata key listing its workers' own addresses
(``engine_service.server.WORKERS_METADATA``)."""

WORKER_METADATA = "agentik-worker"
"""The key naming the worker that answered (``engine_service.server.WORKER_METADATA``)."""

CHECK_TIMEOUT = 2.0
"""Deadline of a discovery's health checks, in seconds."""

_WILDCARDS = ("", "0.0.0.0", "::")


class Unbalanceable(Exception):
    """The workers' addresses cannot make one round-robin target from here."""


def host_port(target: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``HOST:PORT`` or ``[IPv6]:PORT`` target; None for the other
    forms (a list, ``dns:``, ``unix:``), which name their engines themselves."""
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or "," in target or "/" in target:
        return None
    if host.startswith("["):
        return (host[1:-1], int(port)) if host.endswith("]") else None
    if ":" in host:
        return None  # a scheme: ipv4:..., unix:..., dns:...
    return host, int(port)


def resolve(listed: str, target_host: str) -> tuple[str, ...]:
    """The workers' ``HOST:PORT`` addresses as IP addresses (a wildcard host, the engine
    listening on every interface, is the host the target names)."""
    resolved = []
    for addr in listed.split(","):
        host, _, port = addr.strip().rpartition(":")
        host = host.strip("[]")
        if not port.isdigit():
            raise Unbalanceable(f"the engine names a worker address {addr!r} without a port")
        if host in _WILDCARDS:
            host = target_host
        resolved.append((_ip_of(host), int(port)))
    if len({ip.version for ip, _ in resolved}) > 1:
        raise Unbalanceable("the workers' addresses mix IPv4 and IPv6")
    return tuple(f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}" for ip, port in resolved)


def _ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise Unbalanceable(f"the workers' host {host!r} does not resolve: {exc}") from None
    ips = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
    if len(ips) > 1 and not all(ip.is_loopback for ip in ips):
        raise Unbalanceable(f"the workers' host {host!r} names several machines")
    # localhost: IPv4 first, where a loopback engine listens by default.
    return sorted(ips, key=lambda ip: ip.version)[0]


def balanced_target(workers: tuple[str, ...]) -> str:
    """The gRPC target listing ``workers`` (resolved ``IP:PORT`` addresses, one family)."""
    return ("ipv6:" if workers[0].startswith("[") else "ipv4:") + ",".join(workers)


def warm(channel: Any, workers: int) -> None:
    """Health checks over the new round-robin ``channel`` until ``workers`` different workers
    have answered (so each is connected: round robin picks only among the connected ones,
    and the first calls would all go to the first worker up), for at most a few seconds."""
    health: Any = health_pb2_grpc.HealthStub(channel)
    answered: set[str] = set()
    deadline = time.monotonic() + CHECK_TIMEOUT
    while len(answered) < workers and time.monotonic() < deadline:
        try:
            _, call = health.Check.with_call(
                health_pb2.HealthCheckRequest(), timeout=CHECK_TIMEOUT, wait_for_ready=True
            )
        except grpc.RpcError:
            return
        worker = dict(call.initial_metadata() or ()).get(WORKER_METADATA, "")
        if worker in answered:
            time.sleep(0.01)  # the others are still connecting
        answered.add(worker)


async def aio_warm(channel: Any, workers: int) -> None:
    """:func:`warm` for a ``grpc.aio`` channel."""
    health: Any = health_pb2_grpc.HealthStub(channel)
    answered: set[str] = set()
    deadline = time.monotonic() + CHECK_TIMEOUT
    while len(answered) < workers and time.monotonic() < deadline:
        call = health.Check(
            health_pb2.HealthCheckRequest(), timeout=CHECK_TIMEOUT, wait_for_ready=True
        )
        try:
            await call
        except grpc.RpcError:
            return
        worker = dict(await call.initial_metadata() or ()).get(WORKER_METADATA, "")
        if worker in answered:
            await asyncio.sleep(0.01)
        answered.add(worker)


def reachable(workers: tuple[str, ...]) -> bool:
    """Whether each worker answers a health check on its own address."""
    for addr in workers:
        channel = grpc.insecure_channel(addr, options=[("grpc.use_local_subchannel_pool", 1)])
        health: Any = health_pb2_grpc.HealthStub(channel)
        try:
            health.Check(health_pb2.HealthCheckRequest(), timeout=CHECK_TIMEOUT)
        except grpc.RpcError:
            return False
        finally:
            channel.close()
    return True
