"""``agentik web`` (the facade under gunicorn) and ``agentik serve`` (engine + web).

``agentik.cli`` calls :func:`add_commands` when the facade is installed.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from agentik.config import (
    ConfigError,
    Settings,
    load_settings,
    refuse_open_exposure,
    refuse_taken_address,
)
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
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
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
    """Run the engine and the facade as two child processes until a signal or a death;
    the web stops first (it ends its streams cleanly), then the engine. Once the settings
    are checked this process becomes ``agentik.supervisor`` (an exec: the same pid)."""
    settings = _settings(args, engine_too=True)
    grace = settings.engine.shutdown_grace
    exec_supervisor(
        [_engine_argv(args), gunicorn_argv()],
        serve_env(settings, _child_env(args)),
        stop_timeout=_STOP_TIMEOUT,
        started=(
            f"agentik: engine on {settings.engine.grpc_addr}, web on http://{settings.web.http_addr}"
        ),
        stopping=(
            f"agentik: stopping; runs in flight get up to {grace:g}s to "
            "finish (press Ctrl-C again to stop them now)"
        ),
        log_format=settings.log.format,
    )


def add_commands(subparsers: Any) -> None:
    """Add ``web`` and ``serve`` to the ``agentik`` command."""
    subparsers.add_parser(
        "web", help="run the web facade (REST+SSE) under gunicorn on AGENTIK_HTTP_ADDR"
    ).set_defaults(handler=_web)
    subparsers.add_parser(
        "serve", help="run the engine and the web facade together (local use)"
    ).set_defaults(handler=_serve)
