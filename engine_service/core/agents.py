"""Several agents on one engine: each a profile of its own (prompt, model, tools, approval,
limits) over the engine's one store and one tool registry.

A conversation belongs to one agent, named when it is created and kept with it; a run
uses its conversation's agent. A conversation stored before agents existed (its agent
``""``) belongs to the default agent.

An agent sees the engine's tools through a :class:`ToolView`: the registry's tools whose
names match its allow-list (globs), live, so MCP tools that connect later join the agents
whose globs match them.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from engine_service.core.chat import ChatModel, ToolSpec
from engine_service.core.errors import InvalidInput, Overloaded
from engine_service.core.hitl import ASK_USER
from engine_service.core.limits import RunLimits
from engine_service.core.models import Session
from engine_service.core.registry import ToolRegistry
from engine_service.core.tool import Tool

__all__ = ["AgentNotFound", "AgentProfile", "Agents", "ToolView", "unmatched"]


class AgentNotFound(InvalidInput):
    """A request names an agent this engine does not serve."""

    code = "agent_not_found"


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


class ToolView(ToolRegistry):
    """The tools of ``registry`` an agent may use: the names matching ``allowed`` (None:
    every tool), ``ask_user`` only when ``ask_user``. It shares the registry's entries,
    so tools registered later are seen at once; registering through a view registers in
    the registry."""

    def __init__(
        self, registry: ToolRegistry, allowed: Sequence[str] | None, *, ask_user: bool
    ) -> None:
        super().__init__()
        self._entries = registry._entries
        self.allowed = None if allowed is None else tuple(allowed)
        self.ask_user = ask_user

    def offers(self, name: str) -> bool:
        """Whether this agent may call the tool ``name`` (registered or not). Another
        agent (source ``agent:NAME``) only when listed as that, never by a glob."""
        if name == ASK_USER:
            return self.ask_user
        entry = self._entries.get(name)
        if entry is not None and entry.source.startswith("agent:"):
            return self.allowed is not None and entry.source in self.allowed
        return self.allowed is None or _matches(name, self.allowed)

    def get(self, name: str) -> Tool | None:
        return super().get(name) if self.offers(name) else None

    def source_of(self, name: str) -> str | None:
        return super().source_of(name) if self.offers(name) else None

    def names(self) -> list[str]:
        return [name for name in self._entries if self.offers(name)]

    def specs(self) -> list[ToolSpec]:
        return [spec for spec in super().specs() if self.offers(spec.name)]

    def describe(self) -> list[tuple[str, str, str]]:
        return [row for row in super().describe() if self.offers(row[0])]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.offers(name) and name in self._entries

    def __len__(self) -> int:
        return len(self.names())

    def __iter__(self) -> Iterator[Tool]:
        return iter([self._entries[name].tool for name in self.names()])


@dataclass(frozen=True, slots=True)
class AgentProfile:
    """What one agent runs with."""

    name: str
    model: ChatModel
    tools: ToolRegistry
    """Its view of the engine's tools (:class:`ToolView`)."""
    limits: RunLimits
    """Its prompt, rounds, approvals and context budget, with the engine's run limits."""
    description: str = ""
    max_runs: int = 0
    """Its runs in flight at once; 0: no limit of its own."""

    @property
    def about(self) -> str:
        """How a refusal names it: ``agent 'support' (model 'small-model')``."""
        return f"agent {self.name!r} (model {self.model.name!r})"


class Agents:
    """The engine's agents by name, and which one is the default."""

    def __init__(self, profiles: Iterable[AgentProfile], default: str) -> None:
        self._profiles = {profile.name: profile for profile in profiles}
        self._running: Counter[str] = Counter()
        """Runs in flight by agent (``max_runs``)."""
        self._run_agents: dict[str, str] = {}
        """The agent of each session's run in flight."""
        if default not in self._profiles:
            raise ValueError(f"the default agent {default!r} has no profile")
        self.default = default

    @classmethod
    def single(cls, model: ChatModel, tools: ToolRegistry, limits: RunLimits) -> Agents:
        """One agent, ``agentik``, with every tool: an engine built without agents."""
        return cls([AgentProfile("agentik", model, tools, limits)], "agentik")

    def get(self, name: str) -> AgentProfile:
        """The agent called ``name`` ("": the default); ``AgentNotFound`` when none is."""
        profile = self._profiles.get(name or self.default)
        if profile is None:
            names = list(self._profiles)
            more = f" and {len(names) - 20} more (ListAgents)" if len(names) > 20 else ""
            raise AgentNotFound(
                f"agent {name[:64]!r} is not served here; the agents are: "
                f"{', '.join(names[:20])}{more}"
            )
        return profile

    def named(self, name: str) -> AgentProfile:
        """The agent called ``name``, which must be given (``GetAgent``)."""
        if not name:
            raise InvalidInput("name is required: the name of an agent (see ListAgents)")
        return self.get(name)

    def name_of(self, stored: str) -> str:
        """The agent a conversation stored with ``stored`` belongs to."""
        return stored or self.default

    def stored_as(self, name: str) -> list[str] | None:
        """What the store holds for the conversations of agent ``name`` (a listing's
        filter): ``[name]``, and ``""`` too for the default agent (conversations stored
        before agents existed); None for no name (every agent). ``AgentNotFound`` for an
        agent not served."""
        if not name:
            return None
        profile = self.get(name)
        return [profile.name, ""] if profile.name == self.default else [profile.name]

    def for_run(self, session: Session, requested: str) -> AgentProfile:
        """The agent a run of ``session`` runs as: the session's own. A request naming
        another agent for it is refused (a conversation never changes its agent), and so
        is one over the agent's ``max_runs``."""
        own = self.name_of(session.agent)
        if requested and requested != own:
            raise InvalidInput(
                f"conversation {session.id!r} belongs to agent {own!r}, not {requested!r}; "
                "a conversation keeps the agent it was created with"
            )
        profile = self.get(own)
        if profile.max_runs and self._running[profile.name] >= profile.max_runs:
            raise Overloaded(
                f"agent {profile.name!r} is running its maximum of {profile.max_runs} runs"
            )
        return profile

    def of_session(self, session: Session) -> AgentProfile:
        """The session's own agent, for a run resumed there (no ``max_runs`` check: the run
        is running already); the default agent when the configuration no longer has it."""
        try:
            return self.get(self.name_of(session.agent))
        except AgentNotFound:
            return self.get("")

    def __iter__(self) -> Iterator[AgentProfile]:
        return iter(list(self._profiles.values()))

    def __len__(self) -> int:
        return len(self._profiles)

    def __contains__(self, name: object) -> bool:
        return name in self._profiles

    def started(self, session_id: str, agent: str) -> None:
        """A run of ``agent`` started in ``session_id``."""
        self._running[agent] += 1
        self._run_agents[session_id] = agent

    def ended(self, session_id: str) -> None:
        """The run in flight in ``session_id`` ended."""
        agent = self._run_agents.pop(session_id, None)
        if agent is not None:
            self._running[agent] -= 1
            if self._running[agent] <= 0:
                del self._running[agent]

    def swap_model(self, old: ChatModel, new: ChatModel) -> None:
        """Every agent with the model ``old`` gets ``new`` (tests swap the default one)."""
        for name, profile in list(self._profiles.items()):
            if profile.model is old:
                self._profiles[name] = replace(profile, model=new)

    def models(self) -> list[ChatModel]:
        """Each distinct model once (several agents may share one)."""
        seen: dict[int, ChatModel] = {}
        for profile in self._profiles.values():
            seen.setdefault(id(profile.model), profile.model)
        return list(seen.values())


def unmatched(
    patterns: Sequence[str], names: Iterable[str], pending: Sequence[str] = ()
) -> list[str]:
    """The ``patterns`` that match none of ``names``, nor could match a tool of a source
    whose tools are not known yet (``pending``: name prefixes such as ``server__``)."""
    known = list(names)
    missing = []
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(name, pattern) for name in known):
            continue
        if any(pattern.startswith(prefix) for prefix in pending):
            continue
        missing.append(pattern)
    return missing
