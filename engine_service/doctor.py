"""``agentik doctor``: checks what a start would need and says what is wrong and how to fix it.

In order: the configuration (file and environment, exposure without tokens, the Python tools
it names; warnings for the tool and approval names that match no tool, as a start logs, and
for ``AGENTIK_*`` variables nothing reads), the store (opened and written as the engine
would: SQLite creates and migrates its file), the LLM endpoint (``GET /models``: reachable,
key accepted, model listed), each MCP server (connected, its tools listed) and each remote
A2A agent (its card read). It runs beside or without a running agentik and changes nothing
else. Exit status: 0 when all is well (warnings or not), 1 when something is wrong, 2 when
the configuration itself cannot be read.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agentik.config import ConfigError, Settings, load_settings
from agentik.netcheck import refuse_open_exposure

__all__ = ["Finding", "doctor", "known_env"]

OK_MARK = "ok"
FAIL_MARK = "FAIL"
WARN_MARK = "warn"


@dataclass(frozen=True, slots=True)
class Finding:
    """One checked thing: ``mark`` is ok, warn or FAIL."""

    mark: str
    what: str
    detail: str
    fix: str = ""


def doctor(config: str | None, out: Callable[[str], None] = print) -> int:
    """Run every check, print one line per finding (and its fix), return the exit status."""
    logging.basicConfig(level="CRITICAL")  # the findings say it; the sources' logs would repeat
    try:
        settings = load_settings(config, os.environ)
    except ConfigError as exc:
        _print([Finding(FAIL_MARK, "config", str(exc), "correct the setting named above")], out)
        return 2
    findings = [*_config(settings, config), *_environment(os.environ), _store(settings)]
    findings += asyncio.run(_remote(settings))
    _print(findings, out)
    failed = sum(f.mark == FAIL_MARK for f in findings)
    warned = sum(f.mark == WARN_MARK for f in findings)
    out("")
    warnings = f"{warned} warning{'s' * (warned != 1)}"
    if failed:
        out(f"{failed} problem{'s' * (failed != 1)} found" + (f", {warnings}" if warned else ""))
    else:
        out("all checks passed" + (f", {warnings}" if warned else ""))
    return 1 if failed else 0


def _print(findings: list[Finding], out: Callable[[str], None]) -> None:
    width = max(len(f.what) for f in findings)
    for f in findings:
        out(f"{f.mark:<4}  {f.what:<{width}}  {f.detail}")
        if f.fix:
            out(f"{'':<4}  {'':<{width}}  fix: {f.fix}")


def _config(settings: Settings, path: str | None) -> list[Finding]:
    """The configuration as a start would take it, and the start-up warnings it would log
    (tool and approval names that match no tool)."""
    source = path or os.environ.get("AGENTIK_CONFIG") or "defaults and the environment"
    try:
        refuse_open_exposure(settings, settings.engine.grpc_addr, "engine")
        refuse_open_exposure(settings, settings.web.http_addr, "web facade")
    except ConfigError as exc:
        fix = "add tokens ([[auth.tokens]]) or listen on 127.0.0.1"
        return [Finding(FAIL_MARK, "config", str(exc), fix)]
    from engine_service.build import build_tools, delegation_tools, warn_unmatched

    try:
        registry = build_tools(settings)  # a [[tools.python]] function that does not import
        delegation_tools(settings, registry)  # an agent:NAME naming no agent
    except ConfigError as exc:
        return [Finding(FAIL_MARK, "config", str(exc), "fix the entry named above")]
    auth = "auth on" if settings.auth_enabled else "auth off (loopback only)"
    where = f"engine {settings.engine.grpc_addr}, web {settings.web.http_addr}, {auth}"
    fix = "correct the name (agentik tools lists the tools), or remove the entry"
    return [
        Finding(OK_MARK, "config", f"{source}; {where}"),
        *(Finding(WARN_MARK, "tools", said, fix) for said in warn_unmatched(settings, registry)),
    ]


_OTHER_ENV = frozenset(
    {
        "AGENTIK_TOKEN",  # the clients' token: agentik chat, grpc, mcp
        "AGENTIK_PARENT_PID",  # agentik.parent_watch: a child's parent
        "AGENTIK_SUPERVISE",  # agentik.supervisor
        "AGENTIK_SERVE_WEB_SOCKET",  # web_facade.serve_web: what a web worker inherits
        "AGENTIK_SERVE_WEB_HEARTBEAT",
        "AGENTIK_SERVE_WEB_AGE",
        "AGENTIK_SERVE_WEB_BALANCE",
        "AGENTIK_SERVE_METRICS_DIR",
        "AGENTIK_SCREENSHOT_DIR",  # the tests: docs/chat.md's screenshots
    }
)
"""The ``AGENTIK_*`` variables that are not settings and are read all the same."""
_OTHER_PREFIXES = ("AGENTIK_REQUIRE_", "AGENTIK_TEST_")
"""The test suite's own variables (``.ci/run``, tests/)."""


def known_env() -> frozenset[str]:
    """Every ``AGENTIK_*`` variable agentik or its tests read."""
    from agentik.config import setting_env_names

    return frozenset(setting_env_names()) | _OTHER_ENV


def _environment(env: Mapping[str, str]) -> list[Finding]:
    """A warning per ``AGENTIK_*`` variable nothing reads: a misspelt setting is ignored."""
    known = known_env()
    findings = []
    for name in sorted(env):
        if not name.startswith("AGENTIK_") or name in known or name.startswith(_OTHER_PREFIXES):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        findings.append(
            Finding(
                WARN_MARK,
                "env",
                f"{name} is not an agentik setting: it is ignored{hint}",
                "rename it, or unset it (README.md's Configuration lists the settings)",
            )
        )
    return findings


def _store(settings: Settings) -> Finding:
    from engine_service.core.errors import StorageUnavailable
    from engine_service.stores import DriverMissing, open_store, redacted_url, sqlite_file

    where = redacted_url(settings.engine.store)
    path = sqlite_file(settings.engine.store)

    async def check() -> None:
        store = open_store(settings.engine.store)
        try:
            await store.check_writable()
        finally:
            await store.close()

    try:
        asyncio.run(check())
    except DriverMissing as exc:
        fix = "install the driver: .venv/bin/pip install -e '.[postgres]'"
        return Finding(FAIL_MARK, "store", str(exc), fix)
    except ValueError as exc:
        return Finding(FAIL_MARK, "store", str(exc), "set AGENTIK_STORE ([engine] store)")
    except StorageUnavailable as exc:
        return Finding(
            FAIL_MARK,
            "store",
            f"{where}: {exc.message}",
            "make the database reachable and writable, or set AGENTIK_STORE",
        )
    except OSError as exc:  # its directory cannot be made
        return Finding(
            FAIL_MARK,
            "store",
            f"{where}: {exc.strerror or exc}: {exc.filename}",
            "make the database's directory writable, or set AGENTIK_STORE",
        )
    except RuntimeError as exc:  # a schema newer than this code
        return Finding(FAIL_MARK, "store", f"{where}: {exc}", "upgrade agentik")
    if settings.engine.store == "memory://":
        return Finding(WARN_MARK, "store", "memory:// keeps nothing across restarts")
    return Finding(
        OK_MARK, "store", f"{where} ({path}, writable)" if path else f"{where} (writable)"
    )


async def _remote(settings: Settings) -> list[Finding]:
    """The LLM endpoints, the MCP servers and the A2A agents."""
    return [*await _llms(settings), *await _sources(settings)]


async def _llms(settings: Settings) -> list[Finding]:
    """A finding per distinct endpoint and model of the agents (``llm`` for the default
    agent's, ``llm NAME`` for another's own), as the engine's LLM check probes them."""
    from engine_service.build import build_agents, build_model
    from engine_service.core.limits import RunLimits
    from engine_service.core.registry import ToolRegistry
    from engine_service.llm.probe import llm_targets, probe_target

    agents = build_agents(settings, ToolRegistry(), build_model(settings), RunLimits())
    targets = llm_targets(agents)
    try:
        statuses = await asyncio.gather(*(probe_target(target) for target in targets))
    finally:
        await asyncio.gather(*(target.model.aclose() for target in targets))
    findings = []
    if agents.get("").model.name == "offline":
        offline = "the built-in offline model (no OPENAI_BASE_URL or OPENAI_API_KEY)"
        if not targets:
            findings.append(Finding(OK_MARK, "llm", offline))
        else:  # others have an endpoint: the default agent's may have been forgotten
            findings.append(
                Finding(
                    WARN_MARK,
                    "llm",
                    f"the default agent {agents.default!r} uses {offline}",
                    "set OPENAI_BASE_URL and/or OPENAI_API_KEY ([llm]) to give it a real LLM",
                )
            )
    for target, status in zip(targets, statuses, strict=True):
        mark = OK_MARK if status.ok else FAIL_MARK if status.failed else WARN_MARK
        what = "llm" if target.default else f"llm {', '.join(target.agents)}"
        findings.append(Finding(mark, what, f"{status.state}: {status.detail}", status.fix))
    return findings


async def _sources(settings: Settings) -> list[Finding]:
    if not settings.mcp.servers and not settings.a2a.agents:
        return []
    from engine_service.build import build_a2a_agents, build_mcp_sources, connected_briefly
    from engine_service.core.registry import ToolRegistry

    registry = ToolRegistry()
    sources = build_mcp_sources(settings, registry)
    agents = build_a2a_agents(settings, registry)
    servers, remote = await connected_briefly(
        sources, agents, lambda: (sources.describe(), agents.describe())
    )
    findings = []
    for name, transport, target, status in servers:
        ready = status.startswith("ready")
        findings.append(
            Finding(
                OK_MARK if ready else FAIL_MARK,
                f"mcp {name}",
                f"{transport} {target}: {status}",
                ""
                if ready
                else "check the server's command or URL in [[mcp.servers]] (docs/mcp.md)",
            )
        )
    for name, card, status in remote:
        ready = status.startswith("ready")
        findings.append(
            Finding(
                OK_MARK if ready else FAIL_MARK,
                f"a2a {name}",
                f"{card}: {status}",
                ""
                if ready
                else "start the agent, or fix its url in AGENTIK_A2A_AGENTS / [[a2a.agents]]",
            )
        )
    return findings
