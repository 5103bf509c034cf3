"""``[[a2a.agents]]`` and ``AGENTIK_A2A_AGENTS``: remote A2A agents offered to the LLM as
tools, each an entry of :class:`A2aAgentConfig` (docs/a2a.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

from agentik.addresses import display_url
from agentik.config.checks import check_url
from agentik.config.entries import (
    DEFAULT_CONNECT_TIMEOUT,
    HEADERS,
    PER_CALL,
    Entry,
    array_reader,
    unique,
)
from agentik.config.errors import ConfigError
from agentik.config.values import NAME, setting

__all__ = [
    "A2A_AGENTS_ENV",
    "CARD_PATH",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "A2aAgentConfig",
    "parse_a2a_agents_env",
    "read_a2a_agents",
]

A2A_AGENTS_ENV = "AGENTIK_A2A_AGENTS"
CARD_PATH = "/.well-known/agent-card.json"
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class A2aAgentConfig:
    """``[[a2a.agents]]``: a remote A2A agent offered to the LLM as a tool (docs/a2a.md)."""

    name: str = field(metadata={"name": 64})
    url: str = setting(
        check=check_url, doc="the agent's base URL (card at CARD_PATH) or the card's"
    )
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, metadata=HEADERS)
    endpoint: str = setting("", check=check_url, doc="where calls go; empty: where the card says")
    description: str = setting("", doc="the tool's description; empty: from the card")
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    call_timeout: float | None = setting(None, doc=PER_CALL)
    max_response_bytes: int = setting(DEFAULT_MAX_RESPONSE_BYTES, lo=1024, hi=1 << 40)
    """The largest answer the engine reads from the agent: a JSON body, or one event of a
    stream; past it the call fails and the remote task is cancelled."""

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


def parse_a2a_agents_env(value: str) -> tuple[A2aAgentConfig, ...]:
    """``name=URL,name=URL`` from ``AGENTIK_A2A_AGENTS`` (it replaces the file's list)."""
    agents: list[A2aAgentConfig] = []
    for number, item in enumerate((item.strip() for item in value.split(",")), start=1):
        name, equals, url = (part.strip() for part in item.partition("="))
        label = f"item {number} of {A2A_AGENTS_ENV}"
        if item and (not equals or not NAME.match(name) or len(name) > 64):
            why = "must be NAME=URL with a NAME of 1 to 64 characters of A-Z a-z 0-9 _ -"
            raise ConfigError(f"{label} {why}; got {item!r}")
        if item:
            agents.append(Entry({"name": name, "url": url}, label, {}).read(A2aAgentConfig))
    return unique(agents, "agent", [A2A_AGENTS_ENV] * len(agents))


read_a2a_agents = array_reader("a2a.agents", lambda entry, *_: entry.read(A2aAgentConfig))
