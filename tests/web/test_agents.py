"""The facade's view of the agents (``web_facade.agents``): which names its paths serve,
and each agent's A2A card settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentik.a2a.card import agent_card_config, card_config
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


def test_each_agent_has_its_own_card_name_description_and_skills(settings: Settings) -> None:
    root = card_config(settings)
    support = agent_card_config(settings, "support", root)
    assert (support.name, support.description) == ("support", "Answers customers")
    [skill] = support.skills
    assert (skill.id, list(skill.examples)) == ("chat", ["Where is my order?"])
    researcher = agent_card_config(settings, "researcher", root)
    [skill] = researcher.skills
    assert (skill.id, list(skill.examples)) == ("research", ["Find three sources on X"])
    # The default agent without an [[agents]] entry keeps the root card.
    assert agent_card_config(settings, "agentik", root) is root
    assert root.name == "Front desk"


def test_an_agents_skill_marked_extended_is_only_on_its_extended_card(tmp_path: Path) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(
        """
[[agents]]
name = "desk"
skills = [
  { id = "help", name = "Help", description = "Helps", tags = ["help"] },
  { id = "refund", name = "Refund", description = "Refunds", tags = ["money"], extended = true },
]
"""
    )
    settings = load_settings(path, {}, mcp=False)
    desk = agent_card_config(settings, "desk", card_config(settings))
    assert [s.id for s in desk.skills] == ["help"]
    assert [s.id for s in desk.extended_skills] == ["refund"]
