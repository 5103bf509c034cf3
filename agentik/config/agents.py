"""``[[agents]]``: the agents the engine runs beside the default one, each an entry of
:class:`AgentConfig` (docs/agents.md); its system prompt inline or from a file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from agentik.config.checks import check_llm_url, check_pattern, check_skills
from agentik.config.entries import HEADERS, Entry, array_reader
from agentik.config.values import setting
from agentik.limits import COMPACTION_MODES, check_modalities

__all__ = ["MAX_PROMPT_FILE_BYTES", "AgentConfig", "read_agents"]

MAX_PROMPT_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """``[[agents]]`` (docs/agents.md); a key left out (None) is [llm]'s, [tools]' or [a2a]'s."""

    name: str = field(metadata={"name": 64})
    description: str = setting("", required=False)
    model: str | None = None
    base_url: str | None = setting(None, check=check_llm_url)
    api_key: str | None = setting(None, secret=True, expand=True)
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, metadata=HEADERS)
    system_prompt: str | None = setting(None, doc="or system_prompt_file (relative to the config)")
    tools: tuple[str, ...] | None = setting(None, each=partial(check_pattern, colon=":"))
    """Globs over tool names (``agent:NAME`` for a local agent); None: every tool."""
    approval: tuple[str, ...] | None = setting(None, each=partial(check_pattern, colon=":"))
    ask_user: bool | None = None
    max_tool_rounds: int | None = None
    context_tokens: int | None = setting(None, lo=0)
    reserve_output_tokens: int | None = setting(None, lo=0)
    compaction: str | None = setting(None, choices=COMPACTION_MODES)
    max_runs: int = setting(0, lo=0)
    skills: tuple[dict[str, Any], ...] | None = field(
        default=None, hash=False, metadata={"check": check_skills}
    )
    examples: tuple[str, ...] = ()
    input_modalities: tuple[str, ...] | None = setting(None, check=check_modalities)

    @property
    def own_endpoint(self) -> bool:
        """Whether the agent talks to an LLM endpoint other than ``[llm]``'s."""
        return bool(self.base_url or self.api_key or self.headers)


def _agent(entry: Entry, where: str, engine: bool) -> AgentConfig:
    """The facade (``engine=False``) skips api_key, headers, prompt: needs no engine-only ${VAR}."""
    skipped = ("system_prompt_file",) + (() if engine else ("api_key", "headers", "system_prompt"))
    table = {key: value for key, value in entry.table.items() if key not in skipped}
    agent = Entry(table, entry.label, entry.env).read(AgentConfig, system_prompt=None)
    if not engine:
        return agent
    entry.label = f"{entry.label} ({agent.name!r})"
    text, path = entry.table.get("system_prompt"), entry.table.get("system_prompt_file")
    if text is not None and path is not None:
        raise entry.fail("system_prompt", "give system_prompt or system_prompt_file, not both")
    if path is None:
        if text is not None and not isinstance(text, str):
            raise entry.fail("system_prompt", f"must be a string, not {type(text).__name__}")
        return replace(agent, system_prompt=text)
    if not isinstance(path, str) or not path.strip():
        raise entry.fail("system_prompt_file", "must be the path of a text file", path)
    file = os.path.join(os.path.dirname(where.strip("'\"")), os.path.expanduser(path.strip()))
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
        if len(data) > MAX_PROMPT_FILE_BYTES:
            raise entry.fail("system_prompt_file", f"is larger than {MAX_PROMPT_FILE_BYTES} bytes")
        return replace(agent, system_prompt=data.decode("utf-8"))
    except OSError as exc:
        raise entry.fail("system_prompt_file", f"cannot be read ({exc.strerror})", path) from None
    except UnicodeDecodeError:
        raise entry.fail("system_prompt_file", "is not UTF-8 text", path) from None


read_agents = array_reader("agents", _agent)
