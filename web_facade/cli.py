"""``agentik web`` (the facade under gunicorn) and ``agentik serve`` (engine + web).

``engine_service.cli`` calls :func:`add_commands` when the facade is installed.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from types import FrameType
from typing import Any

from engine_service.config import ConfigError, Settings, load_settings, refuse_open_exposure
from engine_service.parent_watch import env_for_child

__all__ = ["add_commands", "gunicorn_argv"]

_STOP_TIMEOUT = 30.0
"""Seconds ``serve`` waits for a child to stop after SIGTERM before it kills it."""


def _settings(args: argparse.Namespace, *, engine_too: bool = False) -> Settings:
    """The settings, or exit 2 naming the problem; refuses to listen beyond loopback
    without authentication (for ``serve``, the engine's address and MCP servers as well)."""
    try:
        # [mcp] is the engine's: an ${VAR} only it needs must not stop the web.
        settings = load_settings(args.config, os.environ, mcp=engine_too)
        refuse_open_exposure(settings, settings.http_addr, "web facade")
        if engine_too:
            refuse_open_exposure(settings, settings.grpc_addr, "engine")
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
    return [sys.executable, "-m", "engine_service.cli", *config, "engine"]


def _serve(args: argparse.Namespace) -> int:
    """Run the engine and the facade as two child processes until a signal or a death."""
    settings = _settings(args, engine_too=True)
    env = _child_env(args)
    children: list[subprocess.Popen[bytes]] = []
    done = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        done.set()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # Own sessions: a Ctrl-C reaches the children once, through us, as SIGTERM.
        for argv in (_engine_argv(args), gunicorn_argv()):
            children.append(subprocess.Popen(argv, env=env_for_child(env), start_new_session=True))
        print(
            f"agentik: engine on {settings.grpc_addr}, web on http://{settings.http_addr}",
            file=sys.stderr,
        )
        watchers = [threading.Thread(target=_watch, args=(c, done), daemon=True) for c in children]
        for watcher in watchers:
            watcher.start()
        done.wait()
    finally:
        codes = _stop_all(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    failed = [code for code in codes if code not in (0, -signal.SIGTERM)]
    return 1 if failed else 0


def _watch(child: subprocess.Popen[bytes], done: threading.Event) -> None:
    child.wait()
    done.set()


def _stop_all(children: list[subprocess.Popen[bytes]]) -> list[int]:
    """Stop the web first (it ends its streams cleanly), then the engine; kill stragglers."""
    codes = []
    for child in reversed(children):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
        try:
            codes.append(child.wait(_STOP_TIMEOUT))
        except subprocess.TimeoutExpired:
            child.kill()
            codes.append(child.wait())
    return codes


def add_commands(subparsers: Any) -> None:
    """Add ``web`` and ``serve`` to the ``agentik`` command."""
    subparsers.add_parser(
        "web", help="run the web facade (REST+SSE) under gunicorn on AGENTIK_HTTP_ADDR"
    ).set_defaults(handler=_web)
    subparsers.add_parser(
        "serve", help="run the engine and the web facade together (local use)"
    ).set_defaults(handler=_serve)
