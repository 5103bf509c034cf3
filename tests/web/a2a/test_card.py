"""The agent card: built from configuration, cacheable, strict A2A 1.0 by default and the
0.3 card for peers that ask for 0.3."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime, parsedate_to_datetime

import jsonschema
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.compat.v0_3 import types as v03_types
from a2a.types import AgentCard
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flask import Flask
from google.protobuf import json_format

from agentik.config import ConfigError
from tests.web.a2a.card_schema import agent_card_schema

PUBLIC = "https://agents.example.com/agentik/"
CARD = "/.well-known/agent-card.json"
LEGACY_CARD = "/.well-known/agent.json"
V03 = {"A2A-Version": "0.3"}
V03_FIELDS = {"url", "protocolVersion", "preferredTransport"}


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
        {"url": PUBLIC + "a2a", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
    ]
    assert card["name"] == "Helper" and card["description"] == "Answers questions."
    assert card["version"] == "2.1.0"
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": True,
        "extendedAgentCard": True,
    }
    assert "text/plain" in card["defaultInputModes"] and card["defaultOutputModes"] == [
        "text/plain"
    ]
    assert [skill["id"] for skill in card["skills"]] == ["chat"]
    assert "127.0.0.1" not in response.get_data(as_text=True)


def test_the_sdk_parses_the_card_into_a_1_0_agent_card(card_app: Flask) -> None:
    card = parse_agent_card(card_app.test_client().get(CARD).get_json())
    assert card.supported_interfaces[0].protocol_version == "1.0"
    assert card.capabilities.streaming and card.capabilities.push_notifications


# -- the strict 1.0 card and the 0.3 card -------------------------------------------


def _http_date(moment: datetime) -> str:
    return format_datetime(moment.astimezone(UTC), usegmt=True)


@pytest.fixture(params=["open", "bearer", "signed"])
def any_card_app(request: pytest.FixtureRequest, make_app: Callable[..., Flask]) -> Flask:
    """The card without and with a security scheme (the fields where 0.3 and 1.0 differ most),
    and signed (``signatures``)."""
    tokens = "alice:tokenA" if request.param != "open" else ""
    key = ""
    if request.param == "signed":
        pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        key = pem.decode()
    return make_app(
        AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_TOKENS=tokens, AGENTIK_A2A_CARD_SIGNING_KEY=key
    )


def test_the_default_card_is_valid_against_the_a2a_1_0_agent_card_json_schema(
    any_card_app: Flask,
) -> None:
    card = any_card_app.test_client().get(CARD).get_json()
    jsonschema.Draft202012Validator(agent_card_schema()).validate(card)
    # The SDK's own types agree: ProtoJSON that names no field the 1.0 AgentCard lacks.
    json_format.ParseDict(card, AgentCard(), ignore_unknown_fields=False)
    assert not V03_FIELDS & card.keys()


def test_the_1_0_schema_refuses_the_0_3_card(any_card_app: Flask) -> None:
    card = any_card_app.test_client().get(CARD, headers=V03).get_json()
    errors = list(jsonschema.Draft202012Validator(agent_card_schema()).iter_errors(card))
    assert any("'url'" in error.message and not error.path for error in errors), errors
    with pytest.raises(json_format.ParseError):
        json_format.ParseDict(card, AgentCard(), ignore_unknown_fields=False)


@pytest.mark.parametrize(
    ("path", "headers", "query"),
    [
        (CARD, V03, ""),
        (CARD, {"A2A-Version": "0.3.0"}, ""),
        (CARD, {}, "?A2A-Version=0.3"),
        (LEGACY_CARD, {}, ""),
    ],
    ids=["header", "header-with-patch", "query", "legacy-path"],
)
def test_a_0_3_peer_that_asks_gets_the_1_0_card_plus_the_0_3_fields(
    any_card_app: Flask, path: str, headers: dict[str, str], query: str
) -> None:
    client = any_card_app.test_client()
    card = client.get(path + query, headers=headers).get_json()
    assert card["url"] == PUBLIC
    assert card["protocolVersion"] == "0.3"
    assert card["preferredTransport"] == "JSONRPC"
    strict = client.get(CARD).get_json()
    differ = {"securitySchemes", "signatures"}  # an ECDSA signature differs at each signing
    assert {key: card[key] for key in strict if key not in differ} == {
        key: value for key, value in strict.items() if key not in differ
    }
    # what an a2a-sdk 0.3 client validates the card with, and the 1.0 SDK's reading of it
    legacy = v03_types.AgentCard.model_validate(card)
    assert legacy.url == PUBLIC and legacy.capabilities.streaming
    assert parse_agent_card(card).supported_interfaces[0].protocol_version == "1.0"


def test_the_0_3_card_carries_its_security_in_both_forms(make_app: Callable[..., Flask]) -> None:
    app = make_app(AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_TOKENS="alice:tokenA")
    card = app.test_client().get(CARD, headers=V03).get_json()
    assert card["security"] == [{"bearer": []}]
    scheme = card["securitySchemes"]["bearer"]
    assert scheme["type"] == "http" and scheme["scheme"] == "Bearer"
    assert scheme["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    parsed = parse_agent_card(card)
    assert parsed.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        (CARD, {}),
        (CARD, {"A2A-Version": "1.0"}),
        (CARD, {"A2A-Version": "2.0"}),
        (CARD, {"A2A-Version": "nonsense"}),
        (LEGACY_CARD, {"A2A-Version": "1.0"}),
        (LEGACY_CARD, {"A2A-Version": "1.2"}),
        (LEGACY_CARD, {"A2A-Version": "1"}),
    ],
)
def test_every_other_request_gets_the_strict_1_0_card(
    card_app: Flask, path: str, headers: dict[str, str]
) -> None:
    response = card_app.test_client().get(path, headers=headers)
    assert response.status_code == 200
    assert not V03_FIELDS & response.get_json().keys()


def test_the_card_varies_by_the_version_header_with_an_etag_per_shape(card_app: Flask) -> None:
    client = card_app.test_client()
    strict = client.get(CARD)
    legacy = client.get(CARD, headers=V03)
    for response in (strict, legacy, client.get(LEGACY_CARD)):
        assert "A2A-Version" in response.vary
    assert strict.headers["ETag"] != legacy.headers["ETag"]
    assert client.get(LEGACY_CARD).headers["ETag"] == legacy.headers["ETag"]
    crossed = client.get(CARD, headers={**V03, "If-None-Match": strict.headers["ETag"]})
    assert crossed.status_code == 200 and crossed.get_data() == legacy.get_data()
    same = client.get(CARD, headers={**V03, "If-None-Match": legacy.headers["ETag"]})
    assert same.status_code == 304


def test_the_sdk_reads_the_strict_card_and_the_0_3_card_alike(
    card_app: Flask,
) -> None:
    client = card_app.test_client()
    strict = parse_agent_card(client.get(CARD).get_json())
    legacy = parse_agent_card(client.get(CARD, headers=V03).get_json())
    assert strict == legacy


# -- revalidation --------------------------------------------------------------------


def test_the_card_has_an_etag_and_answers_304_when_it_did_not_change(card_app: Flask) -> None:
    client = card_app.test_client()
    first = client.get(CARD)
    etag = first.headers["ETag"]
    assert first.headers["Cache-Control"] == "public, max-age=300"
    again = client.get(CARD, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""
    assert again.headers["ETag"] == etag
    other = client.get(CARD, headers={"If-None-Match": '"stale"'})
    assert other.status_code == 200 and other.get_data() == first.get_data()


def test_the_card_has_a_last_modified_date_that_stays_put_while_the_card_does(
    make_app: Callable[..., Flask],
) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    client = make_app(AGENTIK_PUBLIC_URL=PUBLIC).test_client()
    after = datetime.now(UTC)
    first = client.get(CARD).headers["Last-Modified"]
    modified = parsedate_to_datetime(first)
    assert before <= modified <= after
    assert first.endswith(" GMT")
    assert client.get(CARD).headers["Last-Modified"] == first
    assert client.get(CARD, headers=V03).headers["Last-Modified"] == first


def test_if_modified_since_answers_304_unless_the_card_is_newer(card_app: Flask) -> None:
    client = card_app.test_client()
    first = client.get(CARD)
    modified = parsedate_to_datetime(first.headers["Last-Modified"])
    for since in (first.headers["Last-Modified"], _http_date(modified + timedelta(hours=1))):
        unchanged = client.get(CARD, headers={"If-Modified-Since": since})
        assert unchanged.status_code == 304 and unchanged.get_data() == b""
        # RFC 9110 15.4.5: a 304 repeats ETag, Cache-Control and Vary (Last-Modified may go)
        assert unchanged.headers["ETag"] == first.headers["ETag"]
        assert unchanged.headers["Cache-Control"] == first.headers["Cache-Control"]
        assert "A2A-Version" in unchanged.vary
    older = client.get(CARD, headers={"If-Modified-Since": _http_date(modified - timedelta(1))})
    assert older.status_code == 200 and older.get_data() == first.get_data()
    garbled = client.get(CARD, headers={"If-Modified-Since": "yesterday"})
    assert garbled.status_code == 200


def test_if_none_match_takes_precedence_over_if_modified_since(card_app: Flask) -> None:
    client = card_app.test_client()
    first = client.get(CARD)
    fresh = first.headers["Last-Modified"]
    stale_since = _http_date(parsedate_to_datetime(fresh) - timedelta(days=1))
    stale_tag = client.get(CARD, headers={"If-None-Match": '"stale"', "If-Modified-Since": fresh})
    assert stale_tag.status_code == 200, "a changed ETag wins over an unchanged date"
    tag = first.headers["ETag"]
    same_tag = client.get(CARD, headers={"If-None-Match": tag, "If-Modified-Since": stale_since})
    assert same_tag.status_code == 304, "a matching ETag wins over an older date"


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
