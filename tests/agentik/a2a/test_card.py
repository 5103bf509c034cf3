"""The A2A card built from settings alone (``agentik.a2a.card``), as every binding serves
it: each agent's name, description and skills, the card at each agent's endpoint, the
extended card, and skills the A2A 1.0 schema accepts (a skill configured without ``tags``
gets its agent's name)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from a2a.utils.signing import create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf import json_format

from agentik.a2a.card import (
    agent_card_config,
    card_body,
    card_config,
    check_cards,
    endpoint_config,
    extended_card,
    extended_card_body,
)
from agentik.config import ConfigError, Settings, load_settings
from tests.web.a2a.card_schema import agent_card_schema

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


def _settings(tmp_path: Path, text: str, **env: str) -> Settings:
    path = tmp_path / "agentik.toml"
    path.write_text(text)
    return load_settings(path, env, mcp=False)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return _settings(tmp_path, CONFIG)


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


UNTAGGED = """
[a2a]
public_url = "https://agents.example.com/"
skills = [
  { id = "chat", name = "Chat", description = "Talks" },
  { id = "ops", name = "Ops", description = "Hidden", tags = [], extended = true },
]

[[agents]]
name = "researcher"
skills = [{ id = "research", name = "Research", description = "Looks things up" }]
"""


def test_a_skill_without_tags_gets_its_agent_s_name_and_every_card_passes_the_schema(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path, UNTAGGED)
    root = check_cards(settings)
    schema = agent_card_schema()
    researcher = endpoint_config(settings, root, "researcher")
    for config in (root, researcher):
        for shape_body in (
            card_body(config, "", "1.0")[0],
            extended_card_body(config, "", "1.0", ("calculate",))[0],
        ):
            jsonschema.validate(json.loads(shape_body), schema)
    assert [list(s.tags) for s in root.skills] == [["agentik"]]
    assert [list(s.tags) for s in root.extended_skills] == [["agentik"]]
    assert [list(s.tags) for s in researcher.skills] == [["researcher"]]


def test_a_configured_tag_is_kept_and_an_empty_one_is_refused_at_start_naming_the_skill(
    tmp_path: Path,
) -> None:
    tagged = _settings(
        tmp_path,
        '[a2a]\nskills = [{ id = "a", name = "A", description = "d", tags = ["mine"] }]\n',
    )
    assert [list(s.tags) for s in card_config(tagged).skills] == [["mine"]]
    bad = _settings(
        tmp_path,
        '[[agents]]\nname = "desk"\nskills = [{ id = "help", name = "Help", '
        'description = "Helps", tags = [" "] }]\n',
    )
    with pytest.raises(ConfigError, match=r"agents\.desk\.skills\[0\]") as caught:
        check_cards(bad)
    assert "'help'" in str(caught.value) and "tag" in str(caught.value)


def test_the_card_at_an_agent_s_endpoint_names_that_endpoint(tmp_path: Path) -> None:
    settings = _settings(tmp_path, UNTAGGED)
    root = card_config(settings)
    assert endpoint_config(settings, root, "") is root
    own = endpoint_config(settings, root, "researcher")
    assert own.public_url == "https://agents.example.com/a2a/researcher/"
    assert (own.tenant, own.http_json_path) == ("researcher", "")


def test_the_extended_card_adds_the_hidden_skills_and_the_tools_and_is_signed(
    tmp_path: Path,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    settings = _settings(tmp_path, UNTAGGED, AGENTIK_A2A_CARD_SIGNING_KEY=pem.decode())
    config = card_config(settings)
    card = extended_card(config, config.public_url, ("calculate",))
    assert [s.id for s in card.skills] == ["chat", "ops", "tool:calculate"]
    create_signature_verifier(lambda kid, jku: public, ["ES256"])(card)
    [signature] = card.signatures
    header = json.loads(_b64(signature.protected))
    assert header["jku"] == "https://agents.example.com/.well-known/jwks.json"
    jsonschema.validate(json_format.MessageToDict(card), agent_card_schema())


def _b64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
