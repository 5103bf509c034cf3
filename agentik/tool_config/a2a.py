"""``[[a2a.agents]]``: other A2A agents the LLM may call as tools (docs/a2a.md).

An entry has ``name`` (the tool's name), ``url`` (the agent's base URL, whose card is read
from /.well-known/agent-card.json, or the card's own URL), and optionally ``headers`` (``${NAME}``
is the engine's environment variable), ``endpoint``, ``description``, ``connect_timeout``,
``call_timeout``. ``AGENTIK_A2A_AGENTS="name=URL,..."`` replaces the file's entries. The A2A
SDK is not imported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from agentik.config import (
    NAME,
    ConfigError,
    Entry,
    _agent_name,
    _url,
    read_entries,
    setting,
    unique,
)
from agentik.tool_config import display_url

__all__ = ["A2A_AGENTS_ENV", "CARD_PATH", "DEFAULT_CONNECT_TIMEOUT", "A2aAgentConfig"]

A2A_AGENTS_ENV = "AGENTIK_A2A_AGENTS"
CARD_PATH = "/.well-known/agent-card.json"
DEFAULT_CONNECT_TIMEOUT = 10.0
MAX_AGENT_NAME = 64
"""The longest function name the OpenAI API accepts."""


@dataclass(frozen=True, slots=True)
class A2aAgentConfig:
    """One remote A2A agent offered to the LLM as a tool."""

    name: str = field(metadata={"check": _agent_name})
    url: str = field(metadata={"check": _url})
    """As configured: the agent's base URL or its card's URL."""
    headers: dict[str, str] = field(
        default_factory=dict, repr=False, hash=False, metadata={"headers": True}
    )
    endpoint: str = setting("", check=_url)
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


def read_a2a_agents(raw: object, where: str, env: Mapping[str, str]) -> tuple[A2aAgentConfig, ...]:
    """The ``[[a2a.agents]]`` tables read from ``where`` (a quoted file name)."""
    agents = read_entries(raw, "a2a.agents", where, lambda e: e.read(A2aAgentConfig), env)
    return unique(agents, "agent", lambda _: f"[[a2a.agents]] in {where}")


def parse_a2a_agents_env(value: str) -> tuple[A2aAgentConfig, ...]:
    """``name=URL,name=URL`` from ``AGENTIK_A2A_AGENTS``."""
    agents: list[A2aAgentConfig] = []
    for number, item in enumerate((item.strip() for item in value.split(",")), start=1):
        name, equals, url = item.partition("=")
        label = f"item {number} of {A2A_AGENTS_ENV}"
        if item and (not equals or not NAME.match(name.strip()) or len(name.strip()) > 64):
            raise ConfigError(
                f"{label} must be NAME=URL with a NAME of 1 to {MAX_AGENT_NAME} characters of "
                f"A-Z a-z 0-9 _ -; got {item!r}"
            )
        if item:
            table = {"name": name.strip(), "url": url.strip()}
            agents.append(Entry(table, label, {}).read(A2aAgentConfig))
    return unique(tuple(agents), "agent", lambda _: A2A_AGENTS_ENV)
