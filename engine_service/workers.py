"""``agentik engine --workers N``: N engine processes serving one address.

With more than one worker the ``agentik engine`` process serves nothing itself: it starts N
child engines (``agentik engine --worker``), each of which binds ``grpc_addr`` with
SO_REUSEPORT so the kernel spreads new connections across them, and each also listens on an
address of its own that the parent assigns (a free port on the same host,
:func:`private_addresses`, which the parent holds while the workers run, so no other
process takes it before its worker binds it). Every worker names all of those addresses in
its health answers (``agentik-workers``), so the facade can dial each worker directly and
balance per call rather than per connection (``web_facade.engine_client``). The parent
forwards SIGTERM/SIGINT to the children and exits once they have stopped; when one of them
dies on its own it stops the others and exits 1 (:func:`agentik.parent_watch.supervise`).

The children share nothing but the store, so the store must be one several engines may
share (PostgreSQL, see ``SessionStore.shared``): the choice is made here from the store
URL's scheme, without opening the store. A single engine (the default) binds its port
without SO_REUSEPORT, so a second engine started on a taken port fails loudly.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator, Mapping, Sequence
from urllib.parse import urlsplit

from agentik.config import ConfigError, Settings
from agentik.parent_watch import supervise

__all__ = [
    "SHARED_STORE_SCHEMES",
    "check_workers",
    "private_addresses",
    "redact_store",
    "run_workers",
    "worker_count",
    "worker_argv",
]

log = logging.getLogger(__name__)

SHARED_STORE_SCHEMES = ("postgresql", "postgres")
"""Store URL schemes whose store several engine processes may share."""

_STOP_MARGIN = 15.0
"""Seconds, beyond ``shutdown_grace``, a worker has to stop before it is killed."""


def worker_count(text: str) -> int:
    """``--workers``: a positive integer (for argparse)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {value}")
    return value


def check_workers(settings: Settings, workers: int) -> None:
    """``ConfigError`` when ``workers`` engines cannot share the configured store and
    address: a store only one process may use, or port 0 (each child would bind its own
    ephemeral port)."""
    if workers <= 1:
        return
    scheme = settings.engine.store.partition("://")[0].lower()
    if scheme not in SHARED_STORE_SCHEMES:
        kind = "SQLite" if scheme == "sqlite" else f"the {scheme}:// store"
        raise ConfigError(
            f"{workers} engine workers asked for, but {kind} serves one engine process; use "
            "PostgreSQL for several: AGENTIK_STORE=postgresql://... (or run one worker)"
        )
    if settings.engine.grpc_addr.rpartition(":")[2] == "0":
        raise ConfigError(
            f"{workers} engine workers asked for, but grpc_addr {settings.engine.grpc_addr} asks "
            "for an ephemeral port, which the workers could not share; give a fixed port "
            "(AGENTIK_GRPC_ADDR=HOST:PORT)"
        )


def redact_store(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for the log)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=f"{parts.username or ''}:***@{host}").geturl()


@contextlib.contextmanager
def private_addresses(grpc_addr: str, workers: int) -> Iterator[list[str]]:
    """``workers`` free ports on ``grpc_addr``'s host, as ``HOST:PORT`` addresses: each
    worker's own, held for the block. The ports are found by binding them all at once (so
    they differ), with SO_REUSEPORT and without listening: until the block ends no other
    process can bind them (one without SO_REUSEPORT, or another user's), while a worker,
    whose gRPC server binds with SO_REUSEPORT as the same user, can; a socket that does not
    listen takes none of the port's connections. (Released before the workers started,
    a port taken meanwhile made its worker fail to bind, and the set exit 1.)"""
    host, _, public = grpc_addr.rpartition(":")
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    probes: list[socket.socket] = []
    try:
        ports: list[int] = []
        while len(ports) < workers:
            probe = socket.socket(family, socket.SOCK_STREAM)
            probes.append(probe)  # held, so the port is not handed out again
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            probe.bind((bare, 0))
            port = int(probe.getsockname()[1])
            # The shared address's port is free until the workers bind it: the system may
            # hand it out here, and a worker's own address must never be the shared one.
            if str(port) != public:
                ports.append(port)
        yield [f"{host}:{port}" for port in ports]
    finally:
        for probe in probes:
            probe.close()


def worker_argv(config: str | None) -> list[str]:
    """The command of one child engine."""
    named = ["--config", os.path.abspath(config)] if config else []
    return [sys.executable, "-m", "agentik.cli", *named, "engine", "--worker"]


def run_workers(
    settings: Settings,
    workers: int,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``workers`` children ``argv`` until a signal or a death; the exit status.

    Each child gets ``--worker-addrs A,B,... --worker-index I``: every worker's own address
    (:func:`private_addresses`) and which one is its."""
    check_workers(settings, workers)
    with private_addresses(settings.engine.grpc_addr, workers) as addrs:
        log.info(
            "starting %d engine workers on %s, each also on its own address (%s) (store %s)",
            workers,
            settings.engine.grpc_addr,
            ", ".join(addrs),
            redact_store(settings.engine.store),
        )
        listed = ",".join(addrs)
        return supervise(
            [[*argv, "--worker-addrs", listed, "--worker-index", str(i)] for i in range(workers)],
            os.environ if env is None else env,
            stop_timeout=settings.engine.shutdown_grace + _STOP_MARGIN,
            together=True,
        )
