"""The agent card: built from configuration, cacheable, readable by 1.0 and 0.3 peers."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from a2a.client.card_resolver import parse_agent_card
from flask import Flask

from engine_service.config import ConfigError

PUBLIC = "https://agents.example.com/agentik/"


@pytest.fixture
def card_app(make_app: Callable[..., Flask]) -> Flask:
    return make_app(
        AGENTIK_PUBLIC_URL=PUBLIC,
        AGENTIK_AGENT_NAME="Helper",
        AGENTIK_AGENT_DESCRIPTION="Answers questions.",
        AGENTIK_AGENT_VERSION="2.1.0",
    )


def test_the_card_names_the_configured_public_url_never_the_request_host(card_app: Flask) -> None:
    response = card_app.test_client().get(
        "/.well-known/agent-card.json", base_url="http://127.0.0.1:8000"
    )
    assert response.status_code == 200 and response.mimetype == "application/json"
    card = response.get_json()
    assert card["supportedInterfaces"] == [
        {"url": PUBLIC, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": PUBLIC, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
    ]
    assert card["name"] == "Helper" and card["description"] == "Answers questions."
    assert card["version"] == "2.1.0"
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": False,
        "extendedAgentCard": False,
    }
    assert "text/plain" in card["defaultInputModes"] and card["defaultOutputModes"] == [
        "text/plain"
    ]
    assert [skill["id"] for skill in card["skills"]] == ["chat"]
    assert "127.0.0.1" not in response.get_data(as_text=True)


def test_the_card_carries_the_0_3_fields_for_older_peers(card_app: Flask) -> None:
    card = card_app.test_client().get("/.well-known/agent.json").get_json()
    assert card["url"] == PUBLIC
    assert card["protocolVersion"] == "0.3"
    assert card["preferredTransport"] == "JSONRPC"


def test_the_sdk_parses_the_card_into_a_1_0_agent_card(card_app: Flask) -> None:
    card = parse_agent_card(card_app.test_client().get("/.well-known/agent-card.json").get_json())
    assert card.supported_interfaces[0].protocol_version == "1.0"
    assert card.capabilities.streaming and not card.capabilities.push_notifications


def test_the_card_has_an_etag_and_answers_304_when_it_did_not_change(card_app: Flask) -> None:
    client = card_app.test_client()
    first = client.get("/.well-known/agent-card.json")
    etag = first.headers["ETag"]
    assert first.headers["Cache-Control"] == "public, max-age=300"
    again = client.get("/.well-known/agent-card.json", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""
    assert again.headers["ETag"] == etag
    other = client.get("/.well-known/agent-card.json", headers={"If-None-Match": '"stale"'})
    assert other.status_code == 200 and other.get_data() == first.get_data()


def test_both_card_paths_serve_the_same_card(card_app: Flask) -> None:
    client = card_app.test_client()
    assert (
        client.get("/.well-known/agent.json").get_data()
        == client.get("/.well-known/agent-card.json").get_data()
    )


def test_without_a_public_url_the_card_names_the_request_url_and_is_not_shared_cached(
    make_app: Callable[..., Flask],
) -> None:
    response = (
        make_app()
        .test_client()
        .get("/.well-known/agent-card.json", base_url="http://agent.internal:9000")
    )
    card = response.get_json()
    assert card["supportedInterfaces"][0]["url"] == "http://agent.internal:9000/"
    assert response.headers["Cache-Control"] == "no-cache"
    assert "Host" in response.headers["Vary"]


def test_skills_come_from_configuration(make_app: Callable[..., Flask]) -> None:
    skills = '[{"id": "math", "name": "Math", "description": "Adds numbers", "tags": ["math"]}]'
    card = (
        make_app(AGENTIK_AGENT_SKILLS=skills)
        .test_client()
        .get("/.well-known/agent-card.json")
        .get_json()
    )
    assert card["skills"] == [
        {"id": "math", "name": "Math", "description": "Adds numbers", "tags": ["math"]}
    ]


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("AGENTIK_PUBLIC_URL", "ftp://nowhere", "public_url"),
        ("AGENTIK_AGENT_SKILLS", "{not json", "agent_skills"),
        ("AGENTIK_AGENT_SKILLS", '[{"id": "x"}]', "agent_skills"),
        (
            "AGENTIK_AGENT_SKILLS",
            '[{"id": "x", "name": "n", "description": "d", "tags": 3}]',
            "agent_skills[0]",
        ),
    ],
)
def test_a_bad_card_setting_stops_the_app_with_a_message_naming_it(
    make_app: Callable[..., Flask],
    variable: str,
    value: str,
    named: str,
) -> None:
    with pytest.raises(ConfigError, match="invalid " + re.escape(named)):
        make_app(**{variable: value})
