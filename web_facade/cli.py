"""``agentik web`` (the facade under gunicorn) and ``agentik serve`` (engine + web).

``agentik.cli`` calls :func:`add_commands` when the facade is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from agentik.config import ConfigError, Settings, load_settings
from agentik.netcheck import refuse_open_exposure, refuse_taken_address
from agentik.supervisor import exec_supervisor

__all__ = ["add_commands", "gunicorn_argv"]

_STOP_TIMEOUT = 30.0
"""Seconds ``serve`` waits for a child to stop after SIGTERM before it kills it."""


def _settings(args: argparse.Namespace, *, engine_too: bool = False) -> Settings:
    """The settings, or exit 2 naming the problem; refuses to listen beyond loopback
    without authentication (for ``serve``, the engine's address and MCP servers as well)."""
    from agentik.a2a.card import check_cards  # the A2A types, only for the commands that serve

    try:
        # [mcp] is the engine's: an ${VAR} only it needs must not stop the web.
        settings = load_settings(args.config, os.environ, mcp=engine_too)
        check_cards(settings)  # every agent's A2A card: its skills, the signing key
        refuse_open_exposure(settings, settings.web.http_addr, "web facade")
        refuse_taken_address(settings.web.http_addr, "web facade", "AGENTIK_HTTP_ADDR")
        if engine_too:
            refuse_open_exposure(settings, settings.engine.grpc_addr, "engine")
            refuse_taken_address(settings.engine.grpc_addr, "engine", "AGENTIK_GRPC_ADDR")
        return settings
    except ConfigError as exc:
        print(f"agentik: {exc.kind}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _child_env(args: argparse.Namespace) -> dict[str, str]:
    env = dict(os.environ)
    if args.config:
        # gunicorn's config module and each worker read the settings from the environment.
        env["AGENTIK_CONFIG"] = os.path.abspath(args.config)
    return env


def gunicorn_argv() -> list[str]:
    """The command that runs the facade under gunicorn with our config module."""
    return [sys.executable, "-m", "gunicorn", "--config", "python:web_facade.gunicorn_conf"]


def _web(args: argparse.Namespace) -> int:
    _settings(args)  # a bad setting stops here, with a message that names it
    argv = gunicorn_argv()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, _child_env(args))  # gunicorn takes over this process and its signals


def _engine_argv(args: argparse.Namespace) -> list[str]:
    config = ["--config", os.path.abspath(args.config)] if args.config else []
    return [sys.executable, "-m", "agentik.cli", *config, "engine"]


def serve_env(settings: Settings, env: dict[str, str]) -> dict[str, str]:
    """``env`` with the engine's metrics on a free loopback port, unless they are configured
    or there are several engine workers: the facade's ``/metrics`` then carries them
    (``web_facade.engine_metrics``)."""
    if settings.engine.metrics_addr or settings.engine.workers > 1:
        return env
    return {**env, "AGENTIK_METRICS_ADDR": "127.0.0.1:0"}


def _serve(args: argparse.Namespace) -> int:
    """Run the engine in this process and the facade's workers beside it
    (``web_facade/serve_web.py``: no gunicorn master) until a signal, or until the web cannot
    run; the web stops first (it ends its streams cleanly), then the engine. With several
    engine workers this process becomes ``agentik.supervisor`` of ``agentik engine
    --workers N`` and gunicorn (an exec: the same pid)."""
    settings = _settings(args, engine_too=True)
    grace = settings.engine.shutdown_grace
    started = f"agentik: engine on {settings.engine.grpc_addr}, web on http://{{web}}"
    # What a person watching sees: their streams end now; the runs go on, and are kept.
    stopping = (
        "agentik: stopping: the web first, so open streams end now (clients pick the turns "
        f"up again from /events); runs in flight get up to {grace:g}s to finish and are stored, "
        "interrupted if they do not (press Ctrl-C again to stop them now)"
    )
    if settings.engine.workers > 1:
        exec_supervisor(
            [_engine_argv(args), gunicorn_argv()],
            serve_env(settings, _child_env(args)),
            stop_timeout=_STOP_TIMEOUT,
            started=started.format(web=settings.web.http_addr),
            stopping=stopping,
            log_format=settings.log.format,
        )
    from agentik.supervisor import say
    from web_facade.serve_web import WebWorkers, bind, url_of

    os.environ.update(serve_env(settings, {}))  # the engine's metrics, for the facade's /metrics
    try:
        sock = bind(settings.web.http_addr)
    except OSError as exc:
        print(
            f"agentik: the web facade cannot listen on {settings.web.http_addr}: "
            f"{exc.strerror or exc}; set AGENTIK_HTTP_ADDR",
            file=sys.stderr,
        )
        return 2
    web = WebWorkers(
        sock,
        settings.web.workers,
        _child_env(args),
        max_restarts=settings.web.worker_restarts_per_minute,
        stop_timeout=_STOP_TIMEOUT,
        started=started.format(web=url_of(sock).removeprefix("http://")),
        stopping=stopping,
        say=lambda line: say(line, settings.log.format),
    )
    args.worker, args.workers = False, None  # `agentik engine`'s own options
    run_engine: Callable[[argparse.Namespace, WebWorkers], int] = args.run_engine
    return run_engine(args, web)


def add_commands(subparsers: Any, run_engine: Callable[..., int]) -> None:
    """Add ``web`` and ``serve`` to the ``agentik`` command; ``serve`` runs the engine with
    ``run_engine`` (``agentik engine``'s handler, which takes a companion)."""
    subparsers.add_parser(
        "web", help="run the web facade (REST+SSE) under gunicorn on AGENTIK_HTTP_ADDR"
    ).set_defaults(handler=_web)
    subparsers.add_parser(
        "serve", help="run the engine and the web facade together (local use)"
    ).set_defaults(handler=_serve, run_engine=run_engine)
