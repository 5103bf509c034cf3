"""The agents the facade serves endpoints for (docs/agents.md), from its own settings:
``[agent] name`` (the default agent) and the ``[[agents]]`` tables, read without their
secrets. Which tools and model each has is the engine's to say (``ListAgents``).

An A2A path names its agent (``/a2a/{agent}/``); one the settings do not name is a 404
``agent_not_found`` before any engine call.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agentik.config import Settings
from web_facade.errors import ApiError

__all__ = ["agent_card_config", "check_agent"]


def check_agent(settings: Settings, name: str) -> str:
    """``name`` when the settings serve that agent, else a 404 ``agent_not_found``."""
    known = [settings.agent.name, *(a.name for a in settings.agent.agents)]
    if name not in known:
        raise ApiError(
            404,
            "agent_not_found",
            f"agent {name[:64]!r} is not served here; the agents are: "
            f"{', '.join(dict.fromkeys(known))}",
        )
    return name


def agent_card_config(settings: Settings, name: str, root: Any, skills: Any) -> Any:
    """The A2A card settings of agent ``name``: ``root`` (the server's card settings) with
    the agent's name, description and skills (``skills`` parses a skill list into the
    public and the extended-only skills). The default agent without an ``[[agents]]`` entry
    keeps the root card's. The agent's name is the ``tenant`` of its card's gRPC interface."""
    own = next((a for a in settings.agent.agents if a.name == name), None)
    if own is None:
        return root
    configured = own.skills
    if configured is None:
        configured = (
            {
                "id": "chat",
                "name": own.name,
                "description": own.description or f"Answers messages as the agent {own.name}.",
                "tags": ["chat"],
                "examples": list(own.examples),
            },
        )
    elif own.examples:
        configured = tuple({"examples": list(own.examples), **skill} for skill in configured)
    public, extended = skills(configured)
    return replace(
        root,
        tenant=own.name,
        name=own.name,
        description=own.description or root.description,
        skills=public,
        extended_skills=extended,
    )
