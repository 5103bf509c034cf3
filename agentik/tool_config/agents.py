"""``[[agents]]``: several agents served by one agentik (docs/agents.md lists the keys).

A key an entry leaves out (None) falls back to the top-level setting (``[llm]``, ``[tools]``,
``[a2a]``). ``[agent] name`` names the default agent: an entry of that name is its own
settings; without one it is the top-level settings alone. Which tool globs match which tools
is checked when the engine has its tools (``engine_service.core.agents``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from agentik.config import (
    ConfigError,
    Entry,
    _agent_name,
    _modalities,
    _patterns,
    _skills,
    _url,
    read_entries,
    setting,
    unique,
)
from agentik.limits import COMPACTION_MODES

__all__ = ["MAX_AGENTS", "MAX_PROMPT_FILE_BYTES", "AgentConfig", "read_agents"]

MAX_AGENTS = 256
"""The most ``[[agents]]`` entries one file may have."""
MAX_PROMPT_FILE_BYTES = 1024 * 1024
_SECRETS = ("api_key", "headers", "system_prompt")
AGENT_TOOL_PREFIX = "agent:"
_agent_patterns = partial(_patterns, colon=":")
"""``tools = ["agent:NAME"]`` offers the local agent NAME as a tool (delegation)."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """One ``[[agents]]`` entry; None (or empty) means the top-level setting."""

    name: str = field(metadata={"check": _agent_name})
    description: str = setting("", required=False)
    model: str | None = None
    base_url: str | None = setting(None, check=_url)
    api_key: str | None = setting(None, secret=True, expand=True)
    headers: dict[str, str] = field(
        default_factory=dict, repr=False, hash=False, metadata={"headers": True}
    )
    system_prompt: str | None = None
    tools: tuple[str, ...] | None = setting(None, check=_agent_patterns)
    """Globs over tool names (``agent:NAME`` for a local agent); None: every tool."""
    approval: tuple[str, ...] | None = setting(None, check=_agent_patterns)
    ask_user: bool | None = None
    max_tool_rounds: int | None = None
    context_tokens: int | None = setting(None, lo=0)
    reserve_output_tokens: int | None = setting(None, lo=0)
    compaction: str | None = setting(None, choices=COMPACTION_MODES)
    max_runs: int = setting(0, lo=0)
    skills: tuple[dict[str, Any], ...] | None = field(
        default=None, hash=False, metadata={"check": _skills}
    )
    examples: tuple[str, ...] = ()
    input_modalities: tuple[str, ...] | None = setting(None, check=_modalities)
    """What its model takes (``["text"]`` or ``["text", "image"]``); None: ``[llm]``'s."""

    @property
    def own_endpoint(self) -> bool:
        """Whether the agent talks to an LLM endpoint other than ``[llm]``'s."""
        return bool(self.base_url or self.api_key or self.headers)


def _prompt(entry: Entry, base_dir: str) -> str | None:
    """``system_prompt``, or the text of ``system_prompt_file`` (relative to the file)."""
    text, path = entry.table.get("system_prompt"), entry.table.get("system_prompt_file")
    if text is not None and path is not None:
        raise entry.fail("system_prompt", "give system_prompt or system_prompt_file, not both")
    if path is None:
        if text is not None and not isinstance(text, str):
            raise entry.fail("system_prompt", f"must be a string, not {type(text).__name__}")
        return text
    if not isinstance(path, str) or not path.strip():
        raise entry.fail("system_prompt_file", "must be the path of a text file", path)
    try:
        with open(os.path.join(base_dir, os.path.expanduser(path.strip())), "rb") as handle:
            data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
    except OSError as exc:
        raise entry.fail("system_prompt_file", f"cannot be read ({exc.strerror})", path) from None
    if len(data) > MAX_PROMPT_FILE_BYTES:
        raise entry.fail("system_prompt_file", f"is larger than {MAX_PROMPT_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise entry.fail("system_prompt_file", "is not UTF-8 text", path) from None


def read_agents(
    raw: object, where: str, env: Mapping[str, str], engine: bool = True
) -> tuple[AgentConfig, ...]:
    """The ``[[agents]]`` tables read from ``where`` (a quoted file name).

    ``engine=False`` (the web facade) keeps the secrets out: ``api_key`` and ``headers``
    are neither expanded nor kept, so a ``${VAR}`` only the engine has is not required,
    and no ``system_prompt_file`` is read (the facade may run where it is not)."""
    if isinstance(raw, list) and len(raw) > MAX_AGENTS:
        raise ConfigError(f"[[agents]] in {where}: at most {MAX_AGENTS} agents, got {len(raw)}")
    base_dir = os.path.dirname(where.strip("'\""))

    def read(entry: Entry) -> AgentConfig:
        skipped = ("system_prompt_file",) if engine else ("system_prompt_file", *_SECRETS)
        table = {key: value for key, value in entry.table.items() if key not in skipped}
        agent = Entry(table, entry.label, entry.env).read(AgentConfig, system_prompt=None)
        entry.label = f"{entry.label} ({agent.name!r})"
        return replace(agent, system_prompt=_prompt(entry, base_dir)) if engine else agent

    return unique(
        read_entries(raw, "agents", where, read, env), "agent", lambda _: f"[[agents]] in {where}"
    )
