"""Typed, validated ``[[agents]]`` entries: several agents served by one agentik.

Each entry is one agent; a key it leaves out falls back to the top-level setting
(``[llm]``, ``[tools]``, ``[a2a]``)::

    [[agents]]
    name = "researcher"                # the id rule: [A-Za-z0-9_-], at most 64, unique
    description = "Finds and cites sources"
    model = "gpt-4o"                   # default: [llm] model
    base_url = "https://api.example/v1"  # its own endpoint; default: [llm]
    api_key = "${RESEARCH_KEY}"        # ${NAME}: the engine's environment variable
    headers = { "X-Team" = "research" }
    system_prompt = "You research."    # or system_prompt_file = "prompts/research.md"
    tools = ["time__*", "agent:calc"]  # globs over tool names; default: every tool
    approval = ["fetch_*"]             # as [tools] approval
    ask_user = true                    # as [tools] ask_user
    max_tool_rounds = 4
    context_tokens = 32000             # and reserve_output_tokens, compaction, as in [llm]
    max_runs = 10                      # runs of this agent in flight at once; 0: no limit
    skills = [{ id = "research", name = "Research", description = "..." }]
    examples = ["Find three papers on ..."]

``[agent] name`` names the default agent (the one every surface serves when none is
named): an entry of that name is the default agent's own settings; without one the
default agent is the top-level settings alone, so a file without ``[[agents]]`` serves
one agent, as before.

This module imports no SDK and reads no tool: which globs match which tools is checked
when the engine has its tools (``engine_service.core.agents``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentik.limits import COMPACTION_MODES, check_modalities
from agentik.tool_config.tables import ConfigTableError, TableReader, check_keys

__all__ = ["MAX_AGENTS", "MAX_AGENT_NAME", "MAX_PROMPT_FILE_BYTES", "AgentConfig", "parse_agents"]

MAX_AGENT_NAME = 64
MAX_AGENTS = 256
"""The most ``[[agents]]`` entries one file may have."""
MAX_PROMPT_FILE_BYTES = 1024 * 1024
AGENT_TOOL_PREFIX = "agent:"
"""``tools = ["agent:NAME"]`` offers the local agent NAME as a tool (delegation)."""

_KEYS = (
    "name", "description", "model", "base_url", "api_key", "headers", "system_prompt",
    "system_prompt_file", "tools", "approval", "ask_user", "max_tool_rounds", "context_tokens",
    "reserve_output_tokens", "compaction", "max_runs", "skills", "examples",
    "input_modalities",
)  # fmt: skip
_PATTERN_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.*?[]!-:"
)


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """One ``[[agents]]`` entry; None (or empty) means the top-level setting."""

    name: str
    description: str = ""
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    system_prompt: str | None = None
    tools: tuple[str, ...] | None = None
    """Globs over tool names (``agent:NAME`` for a local agent); None: every tool."""
    approval: tuple[str, ...] | None = None
    ask_user: bool | None = None
    max_tool_rounds: int | None = None
    context_tokens: int | None = None
    reserve_output_tokens: int | None = None
    compaction: str | None = None
    max_runs: int = 0
    skills: tuple[dict[str, Any], ...] | None = field(default=None, hash=False)
    examples: tuple[str, ...] = ()
    input_modalities: tuple[str, ...] | None = None
    """What its model takes (``["text"]`` or ``["text", "image"]``); None: ``[llm]``'s."""

    @property
    def own_endpoint(self) -> bool:
        """Whether the agent talks to an LLM endpoint other than ``[llm]``'s."""
        return bool(self.base_url or self.api_key or self.headers)


class _Reader(TableReader):
    def integer(self, key: str, minimum: int) -> int | None:
        raw = self.table.get(key)
        if raw is None:
            return None
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise self.fail(key, f"must be an integer, not {type(raw).__name__}")
        if raw < minimum:
            raise self.fail(key, f"must be at least {minimum}", raw)
        return raw

    def boolean(self, key: str) -> bool | None:
        raw = self.table.get(key)
        if raw is None or isinstance(raw, bool):
            return raw
        raise self.fail(key, f"must be true or false, not {type(raw).__name__}")

    def patterns(self, key: str) -> tuple[str, ...] | None:
        items = self.strings(key)
        if items is None:
            return None
        for item in items:
            if not item or len(item) > 128 or not set(item) <= _PATTERN_CHARS:
                why = "has an entry that is not a tool name or glob"
                why += " (letters, digits, _ . - : * ? [ ] !)"
                raise self.fail(key, why, item)
        return tuple(dict.fromkeys(items))

    def prompt(self, base_dir: str) -> str | None:
        text = self.table.get("system_prompt")
        path = self.table.get("system_prompt_file")
        if text is not None and path is not None:
            raise self.fail("system_prompt", "give system_prompt or system_prompt_file, not both")
        if text is not None:
            if not isinstance(text, str):
                raise self.fail("system_prompt", f"must be a string, not {type(text).__name__}")
            return text
        if path is None:
            return None
        if not isinstance(path, str) or not path.strip():
            raise self.fail("system_prompt_file", "must be the path of a text file", path)
        full = os.path.join(base_dir, os.path.expanduser(path.strip()))
        try:
            with open(full, "rb") as handle:
                data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
        except OSError as exc:
            raise self.fail(
                "system_prompt_file", f"cannot be read ({exc.strerror})", path
            ) from None
        if len(data) > MAX_PROMPT_FILE_BYTES:
            raise self.fail("system_prompt_file", f"is larger than {MAX_PROMPT_FILE_BYTES} bytes")
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("system_prompt_file", "is not UTF-8 text", path) from None

    def skills(self) -> tuple[dict[str, Any], ...] | None:
        raw = self.table.get("skills")
        if raw is None:
            return None
        if not isinstance(raw, list):
            raise self.fail("skills", "must be an array of skill tables")
        for index, item in enumerate(raw):
            if not isinstance(item, dict) or not all(
                isinstance(item.get(k), str) and item[k] for k in ("id", "name", "description")
            ):
                raise self.fail("skills", f"skill {index} needs string id, name and description")
        return tuple(dict(item) for item in raw)


def _modalities(entry: _Reader) -> tuple[str, ...] | None:
    raw = entry.table.get("input_modalities")
    if raw is None:
        return None
    try:
        return check_modalities(raw)
    except ValueError as exc:
        raise entry.fail("input_modalities", str(exc), raw) from None


def _agent(
    table: Mapping[str, object], label: str, env: Mapping[str, str], base_dir: str, engine: bool
) -> AgentConfig:
    check_keys(table, _KEYS, label)
    entry = _Reader(table, label, env)
    name = entry.name(MAX_AGENT_NAME)
    compaction = entry.string("compaction")
    if compaction is not None and compaction.lower() not in COMPACTION_MODES:
        raise entry.fail("compaction", f"must be one of {', '.join(COMPACTION_MODES)}", compaction)
    api_key = entry.string("api_key")
    if api_key is not None and engine:
        api_key = entry.expand("api_key", api_key)
    headers = entry.mapping("headers", header_names=True) if engine else {}
    description = entry.table.get("description", "")
    if not isinstance(description, str):
        raise entry.fail("description", f"must be a string, not {type(description).__name__}")
    agent = AgentConfig(
        name=name,
        description=description.strip(),
        model=entry.string("model"),
        base_url=entry.url("base_url"),
        api_key=api_key if engine else None,
        headers=headers,
        system_prompt=entry.prompt(base_dir) if engine else None,
        tools=entry.patterns("tools"),
        approval=entry.patterns("approval"),
        ask_user=entry.boolean("ask_user"),
        max_tool_rounds=entry.integer("max_tool_rounds", 1),
        context_tokens=entry.integer("context_tokens", 0),
        reserve_output_tokens=entry.integer("reserve_output_tokens", 0),
        compaction=compaction.lower() if compaction is not None else None,
        max_runs=entry.integer("max_runs", 0) or 0,
        skills=entry.skills(),
        examples=entry.strings("examples") or (),
        input_modalities=_modalities(entry),
    )
    return agent


def parse_agents(
    tables: object, where: str, env: Mapping[str, str], engine: bool = True
) -> tuple[AgentConfig, ...]:
    """Validate the ``[[agents]]`` tables read from ``where`` (a file name, quoted).

    ``engine=False`` (the web facade) keeps the secrets out: ``api_key`` and ``headers``
    are neither expanded nor kept, so a ``${VAR}`` only the engine has is not required,
    and no ``system_prompt_file`` is read (the facade may run where it is not)."""
    if not isinstance(tables, list):
        raise ConfigTableError(f"agents in {where} must be an array of tables ([[agents]])")
    if len(tables) > MAX_AGENTS:
        raise ConfigTableError(
            f"[[agents]] in {where}: at most {MAX_AGENTS} agents, got {len(tables)}"
        )
    base_dir = os.path.dirname(where.strip("'\""))
    agents: list[AgentConfig] = []
    seen: set[str] = set()
    for number, table in enumerate(tables, start=1):
        label = f"[[agents]] entry {number} in {where}"
        if not isinstance(table, dict):
            raise ConfigTableError(f"{label} must be a table")
        agent = _agent(table, label, env, base_dir, engine)
        if agent.name in seen:
            raise ConfigTableError(
                f"[[agents]] in {where}: the agent name {agent.name!r} is used twice"
            )
        seen.add(agent.name)
        agents.append(agent)
    return tuple(agents)
