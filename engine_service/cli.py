"""The ``agentik`` command: ``engine``, ``web``, ``serve`` and ``tools``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence

from engine_service.config import ConfigError, Settings, load_settings

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Settings:
    try:
        return load_settings(args.config, os.environ)
    except ConfigError as exc:
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _engine(args: argparse.Namespace) -> int:
    from engine_service.build import build_engine
    from engine_service.server import run_engine

    settings = _settings(args)
    _logging(settings)
    try:
        engine = build_engine(settings)
    except ValueError as exc:
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
        return 2
    asyncio.run(run_engine(settings, engine))
    return 0


def _tools(args: argparse.Namespace) -> int:
    from engine_service.build import build_tools

    settings = _settings(args)
    registry = build_tools(settings)
    rows = registry.describe()
    width = max((len(name) for name, _, _ in rows), default=4)
    print(f"{'TOOL':<{width}}  SOURCE    STATUS")
    for name, source, status in rows:
        print(f"{name:<{width}}  {source:<8}  {status}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentik", description="The agentik agent runtime.")
    parser.add_argument(
        "--config", help="TOML config file (default: $AGENTIK_CONFIG, else built-in defaults)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("engine", help="run the gRPC engine").set_defaults(handler=_engine)
    commands.add_parser("tools", help="list the tools the LLM is offered").set_defaults(
        handler=_tools
    )
    try:
        from web_facade.cli import add_commands
    except ImportError:  # the facade is optional for an engine-only install
        pass
    else:
        add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
