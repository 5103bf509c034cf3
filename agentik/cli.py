"""The ``agentik`` command: ``engine``, ``web``, ``serve``, ``tools``, ``doctor``, ``migrate``,
``grpc``, ``chat`` and ``mcp``; ``agentik --version``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentik import tracing
from agentik.config import ConfigError, Settings, load_settings
from agentik.netcheck import refuse_open_exposure, refuse_taken_address
from agentik.parent_watch import stop_with_parent
from engine_service.workers import check_workers, run_workers, worker_argv, worker_count

if TYPE_CHECKING:
    from engine_service.server import Companion

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Settings:
    try:
        return load_settings(args.config, os.environ)
    except ConfigError as exc:
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def _logging(settings: Settings) -> None:
    from agentik.logs import configure_logging

    configure_logging(settings.log.level, settings.log.format)


def _engine(args: argparse.Namespace, companion: Companion | None = None) -> int:
    """``agentik engine``; with a ``companion`` (``agentik serve``: the web facade's
    workers) the engine runs it beside itself and exits 1 when it failed."""
    from agentik.a2a.card import check_cards
    from engine_service.auth import Gate
    from engine_service.build import build_engine
    from engine_service.server import run_engine
    from engine_service.store_lock import StoreLock, lock_store

    settings = _settings(args)
    _logging(settings)
    workers = 1 if args.worker else args.workers or settings.engine.workers
    held: StoreLock | None = None
    try:
        refuse_open_exposure(settings, settings.engine.grpc_addr, "engine")
        Gate.from_settings(settings)  # an unreadable JWT key stops here, named
        check_cards(settings)  # the A2A cards (gRPC's extended card): skills, signing key
        check_workers(settings, workers)
        if not args.worker:  # workers share the port their supervisor checked
            refuse_taken_address(settings.engine.grpc_addr, "engine", "AGENTIK_GRPC_ADDR")
        if workers > 1 and settings.engine.metrics_addr:
            raise ConfigError(
                "metrics_addr is set with more than one engine worker: each worker would "
                "need a port of its own; run one engine per metrics port instead"
            )
        if workers == 1:
            _tracing()
            # Before the store opens: a second engine on a SQLite file stops here.
            held = lock_store(settings.engine.store)
            engine = build_engine(settings)
        else:  # the tools every worker would build: a function that cannot load stops here
            from engine_service.build import build_tools

            build_tools(settings)
    except (ValueError, ConfigError) as exc:
        kind = exc.kind if isinstance(exc, ConfigError) else ConfigError.kind
        print(f"agentik: {kind}: {exc}", file=sys.stderr)
        if held is not None:
            held.release()
        if companion is not None:
            companion.close()
        return 2
    if workers > 1:  # engine_service/workers.py: this process supervises N engines
        return run_workers(settings, workers, worker_argv(args.config))
    try:
        # serve's arguments have no worker list: only a worker of ``--workers N`` gets one
        addrs: list[str] = getattr(args, "worker_addrs", None) or []
        own = addrs[getattr(args, "worker_index", 0)] if addrs else ""
        clean = asyncio.run(
            run_engine(
                settings,
                engine,
                reuse_port=args.worker,
                own_addr=own,
                workers=tuple(addrs),
                companion=companion,
            )
        )
    except RuntimeError as exc:  # grpc's bind failure, if the address was taken meanwhile
        if "Failed to bind" not in str(exc):
            raise
        print(
            f"agentik: the engine cannot listen on {settings.engine.grpc_addr}: the address is in "
            "use (by another program) or not this machine's; set AGENTIK_GRPC_ADDR",
            file=sys.stderr,
        )
        return 2
    finally:
        tracing.shutdown()  # exports the spans still waiting
        if held is not None:
            held.release()  # once the store is closed: the next engine may take the file
    return 0 if clean or companion is None else 1


def _tracing() -> None:
    """Traces on when OTEL_* variables configure an exporter (docs/tracing.md)."""
    if tracing.setup("agentik-engine"):
        logging.getLogger("engine_service").info("%s", tracing.describe(os.environ))


def _tools(args: argparse.Namespace) -> int:
    """Print every tool the LLM would be offered, connecting to the MCP servers and
    reading the remote agents' cards briefly."""
    from engine_service.build import (
        build_a2a_agents,
        build_agents,
        build_mcp_sources,
        build_tools,
        connected_briefly,
        delegation_tools,
    )
    from engine_service.core.agents import AgentNotFound
    from engine_service.core.limits import RunLimits
    from engine_service.llm.offline import OfflineChatModel

    settings = _settings(args)
    print(f"agentik tools: {_tools_source(args.config)}", file=sys.stderr)
    # The table says why a server is absent; its log lines would only repeat that.
    logging.basicConfig(level=settings.log.level if settings.log.level == "DEBUG" else "CRITICAL")
    try:
        registry = build_tools(settings)
        delegation_tools(settings, registry)
        run = RunLimits(approval=settings.tools.approval)
        profile = build_agents(settings, registry, OfflineChatModel(), run).get(args.agent)
    except ConfigError as exc:  # a [[tools.python]] function that does not load
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
        return 2
    except AgentNotFound as exc:
        print(f"agentik: {exc.message}", file=sys.stderr)
        return 2
    sources = build_mcp_sources(settings, registry)
    agents = build_a2a_agents(settings, registry)

    def snapshot() -> tuple[
        list[tuple[str, str, str]], list[tuple[str, str, str, str]], list[tuple[str, str, str]]
    ]:
        return registry.describe(), sources.describe(), agents.describe()

    if len(sources) or len(agents):
        tools, servers, remote = asyncio.run(connected_briefly(sources, agents, snapshot))
    else:
        tools, servers, remote = registry.describe(), [], []
    gated = [
        (name, source, status, _gate(name, profile.limits.approval))
        for name, source, status in tools
        if not args.agent or name in profile.tools
    ]
    _table(("TOOL", "SOURCE", "STATUS", "A PERSON"), gated)
    if servers:
        print()
        _table(("MCP SERVER", "TRANSPORT", "TARGET", "STATUS"), servers)
    if remote:
        print()
        _table(("A2A AGENT", "CARD", "STATUS"), remote)
    return 0


def _tools_source(config: str | None) -> str:
    """Which settings ``agentik tools`` read: it builds the tools itself, and an engine
    already running was started with its own."""
    if config:
        source = f"{config} (--config) and the environment"
    elif file := os.environ.get("AGENTIK_CONFIG"):
        source = f"{file} (AGENTIK_CONFIG) and the environment"
    else:
        source = "the defaults and the environment (no --config or AGENTIK_CONFIG)"
    return (
        f"the tools of {source}; a running engine offers what its own settings name: "
        "give this command the same --config and environment"
    )


def _gate(name: str, approval: tuple[str, ...]) -> str:
    """Whether a call of the tool waits for a person, for the ``tools`` table."""
    from engine_service.core.hitl import ASK_USER, needs_approval

    if name == ASK_USER:
        return "answers"
    return "approves" if needs_approval(name, approval) else "-"


def _doctor(args: argparse.Namespace) -> int:
    """Check the configuration, the store, the LLM, the MCP servers and the A2A agents."""
    from engine_service.doctor import doctor

    return doctor(args.config)


def _migrate(args: argparse.Namespace) -> int:
    """Apply the configured store's schema migrations, printing the version before/after."""
    from engine_service.core.errors import StorageUnavailable
    from engine_service.stores import migrate_store, store_label

    settings = _settings(args)
    _logging(settings)
    where = store_label(settings.engine.store)
    try:
        versions = migrate_store(settings.engine.store)
    except ValueError as exc:
        print(f"agentik: configuration error: {exc}", file=sys.stderr)
        return 2
    except StorageUnavailable as exc:
        print(f"agentik: cannot migrate {where}: {exc.message}", file=sys.stderr)
        return 2
    except RuntimeError as exc:
        print(f"agentik: cannot migrate {where}: {exc}", file=sys.stderr)
        return 2
    if versions is None:
        print(f"{where}: an in-memory store has no schema to migrate")
        return 0
    before, after = versions
    if before == after:
        print(f"{where}: schema version {after}, up to date")
    else:
        print(f"{where}: schema version {before} -> {after}")
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max([len(header[i]), *(len(row[i]) for row in rows)]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [f"{cell:<{width}}" for cell, width in zip(row[:-1], widths[:-1], strict=True)]
        print("  ".join([*cells, row[-1]]))


class _Version(argparse.Action):
    """``--version``: the installed distribution's version, looked up only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("agentik")
        except PackageNotFoundError:  # run from a source tree that was never installed
            installed = "unknown (not installed)"
        print(f"agentik {installed}")
        parser.exit()


_CONFIG_HELP = "TOML config file (default: $AGENTIK_CONFIG, else built-in defaults)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentik", description="The agentik agent runtime.")
    parser.add_argument("--version", action=_Version)
    parser.add_argument("--config", help=_CONFIG_HELP)
    commands = parser.add_subparsers(dest="command", required=True)
    engine = commands.add_parser("engine", help="run the gRPC engine")
    engine.set_defaults(handler=_engine)
    engine.add_argument(
        "--workers",
        type=worker_count,
        metavar="N",
        help="engine processes on one address (default: $AGENTIK_ENGINE_WORKERS, else 1; "
        "more than 1 needs a PostgreSQL store)",
    )
    engine.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # a child
    # A child's own address among every worker's (engine_service/workers.py).
    engine.add_argument(
        "--worker-addrs",
        type=lambda text: [addr for addr in text.split(",") if addr],
        default=[],
        help=argparse.SUPPRESS,
    )
    engine.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    tools = commands.add_parser(
        "tools",
        help="list the tools the LLM is offered with this configuration (--config and the "
        "environment; a running engine offers what its own configuration names)",
    )
    tools.add_argument(
        "--agent",
        metavar="NAME",
        default="",
        help="only the tools this agent is offered, and its approvals (docs/agents.md)",
    )
    tools.set_defaults(handler=_tools)
    commands.add_parser(
        "doctor",
        help="check the configuration, the store, the LLM, the MCP servers and the A2A "
        "agents; say what is wrong and how to fix it",
    ).set_defaults(handler=_doctor)
    commands.add_parser(
        "migrate", help="apply the store's schema migrations (SQLite or PostgreSQL)"
    ).set_defaults(handler=_migrate)
    from engine_service.grpc_call import add_command as add_grpc

    add_grpc(commands)
    try:
        from web_facade.cli import add_commands
    except ImportError:  # the facade is optional for an engine-only install
        pass
    else:
        add_commands(commands, _engine)
    from agentik_chat.cli import add_command as add_chat

    add_chat(commands)
    from agentik_mcp.cli import add_command as add_mcp

    add_mcp(commands)
    for command in commands.choices.values():
        # Before or after the command: SUPPRESS leaves the top-level value when not given here.
        command.add_argument("--config", default=argparse.SUPPRESS, help=_CONFIG_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    stop_with_parent()
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
