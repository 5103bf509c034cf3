"""The facade's view of the agents (``web_facade.agents``): which names its paths serve.
Each agent's A2A card settings are ``agentik.a2a.card``'s (tests/agentik/a2a/test_card.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.config import Settings, load_settings
from web_facade.agents import check_agent
from web_facade.errors import ApiError

CONFIG = """
[a2a]
name = "Front desk"

[[agents]]
name = "support"
description = "Answers customers"
examples = ["Where is my order?"]

[[agents]]
name = "researcher"
api_key = "${ONLY_THE_ENGINE_HAS_IT}"
skills = [{ id = "research", name = "Research", description = "Looks things up" }]
examples = ["Find three sources on X"]
"""


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    path = tmp_path / "agentik.toml"
    path.write_text(CONFIG)
    return load_settings(path, {}, mcp=False)


def test_the_served_names_are_the_default_agent_and_the_configured_ones(settings: Settings) -> None:
    for name in ("agentik", "support", "researcher"):
        assert check_agent(settings, name) == name
    with pytest.raises(ApiError) as caught:
        check_agent(settings, "nobody")
    assert (caught.value.status, caught.value.code) == (404, "agent_not_found")
    assert "support, researcher" in caught.value.message
