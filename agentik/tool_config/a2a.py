"""Typed, validated ``[[a2a.agents]]`` entries: other A2A agents the LLM may call as tools.

Each entry names one remote agent and where its card is::

    [[a2a.agents]]
    name = "research"                  # the tool's name: [A-Za-z0-9_-], at most 64, unique
    url = "https://research.example.com/"   # the agent's base URL (its card is read from
                                       # /.well-known/agent-card.json) or the card's own URL
    headers = { Authorization = "Bearer ${RESEARCH_TOKEN}" }  # sent with every request
    endpoint = "https://internal:8000/" # optional: call here, whatever the card says
    description = "..."                # optional: replaces the description from the card
    connect_timeout = 10.0             # seconds to read the card
    call_timeout = 120.0               # seconds per call (default: [tools] timeout)

or, for the simple case, ``AGENTIK_A2A_AGENTS="research=https://host/,other=https://host2/"``
(it replaces the file's entries). ``${NAME}`` in ``headers`` is the engine's environment
variable ``NAME`` (a missing one is an error), so secrets stay out of the file.

This module does not import the A2A SDK: the config loads without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

from agentik.tool_config.tables import (
    NAME,
    ConfigTableError,
    TableReader,
    check_keys,
    display_url,
)

__all__ = [
    "A2A_AGENTS_ENV",
    "CARD_PATH",
    "DEFAULT_CONNECT_TIMEOUT",
    "MAX_AGENT_NAME",
    "A2aAgentConfig",
    "parse_a2a_agents",
    "parse_a2a_agents_env",
]

A2A_AGENTS_ENV = "AGENTIK_A2A_AGENTS"
CARD_PATH = "/.well-known/agent-card.json"
DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_AGENT_NAME = 64
"""The longest function name the OpenAI API accepts."""


@dataclass(frozen=True, slots=True)
class A2aAgentConfig:
    """One remote A2A agent offered to the LLM as a tool."""

    name: str
    url: str
    """As configured: the agent's base URL or its card's URL."""
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    endpoint: str = ""
    """Where calls go; empty: the interface the card names."""
    description: str = ""
    """Replaces the tool description made from the card; empty: from the card."""
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    call_timeout: float | None = None
    """Seconds per call; None means the engine's ``[tools] timeout``."""

    @property
    def source(self) -> str:
        """The registry source string of this agent's tool."""
        return f"a2a:{self.name}"

    @property
    def card_url(self) -> str:
        """Where the card is read: ``url`` itself when it names a ``.json`` file."""
        if urlsplit(self.url).path.endswith(".json"):
            return self.url
        return self.url.rstrip("/") + CARD_PATH

    @property
    def target(self) -> str:
        """The card's URL for logs and listings (no credentials or query)."""
        return display_url(self.card_url)


def _agent(table: Mapping[str, object], label: str, env: Mapping[str, str]) -> A2aAgentConfig:
    check_keys(table, [key.name for key in fields(A2aAgentConfig)], label)
    entry = TableReader(table, label, env)
    name = entry.name(MAX_AGENT_NAME)
    url = entry.url("url", required=True) or ""
    return A2aAgentConfig(
        name=name,
        url=url,
        headers=entry.mapping("headers", header_names=True),
        endpoint=entry.url("endpoint") or "",
        description=entry.string("description") or "",
        connect_timeout=entry.seconds("connect_timeout") or DEFAULT_CONNECT_TIMEOUT,
        call_timeout=entry.seconds("call_timeout"),
    )


def _unique(agents: list[A2aAgentConfig], where: str) -> tuple[A2aAgentConfig, ...]:
    seen: set[str] = set()
    for agent in agents:
        if agent.name in seen:
            raise ConfigTableError(f"{where}: the agent name {agent.name!r} is used twice")
        seen.add(agent.name)
    return tuple(agents)


def parse_a2a_agents(
    tables: object, where: str, env: Mapping[str, str]
) -> tuple[A2aAgentConfig, ...]:
    """Validate the ``[[a2a.agents]]`` tables read from ``where`` (a file name)."""
    if not isinstance(tables, list):
        raise ConfigTableError(f"a2a.agents in {where} must be an array of tables ([[a2a.agents]])")
    agents: list[A2aAgentConfig] = []
    for number, table in enumerate(tables, start=1):
        label = f"[[a2a.agents]] entry {number} in {where}"
        if not isinstance(table, dict):
            raise ConfigTableError(f"{label} must be a table")
        agents.append(_agent(table, label, env))
    return _unique(agents, f"[[a2a.agents]] in {where}")


def parse_a2a_agents_env(value: str) -> tuple[A2aAgentConfig, ...]:
    """``name=URL,name=URL`` from ``AGENTIK_A2A_AGENTS``."""
    agents: list[A2aAgentConfig] = []
    for number, item in enumerate(value.split(","), start=1):
        item = item.strip()
        if not item:
            continue
        name, equals, url = item.partition("=")
        name = name.strip()
        label = f"item {number} of {A2A_AGENTS_ENV}"
        if not equals or not NAME.match(name) or len(name) > MAX_AGENT_NAME:
            raise ConfigTableError(
                f"{label} must be NAME=URL with a NAME of 1 to {MAX_AGENT_NAME} characters of "
                f"A-Z a-z 0-9 _ -; got {item!r}"
            )
        agents.append(_agent({"name": name, "url": url.strip()}, label, {}))
    return _unique(agents, A2A_AGENTS_ENV)
