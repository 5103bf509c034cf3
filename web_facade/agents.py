"""The agents the facade serves endpoints for (docs/agents.md), from its own settings:
``[agent] name`` (the default agent) and the ``[[agents]]`` tables, read without their
secrets. Which tools and model each has is the engine's to say (``ListAgents``).

An A2A path names its agent (``/a2a/{agent}/``); one the settings do not name is a 404
``agent_not_found`` before any engine call.
"""

from __future__ import annotations

from agentik.config import Settings
from web_facade.errors import ApiError

__all__ = ["check_agent"]


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
