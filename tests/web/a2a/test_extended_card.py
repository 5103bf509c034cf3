"""The authenticated extended card (``GetExtendedAgentCard``), signed like every card
(tests/web/a2a/test_signing.py), and the caching headers of each agent's card and of the
extended card."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from a2a.types import AgentCard
from cryptography.hazmat.primitives.asymmetric import ec
from flask import Flask
from flask.testing import FlaskClient
from google.protobuf import json_format

from agentik.config import ConfigError
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.card_schema import agent_card_schema
from tests.web.a2a.test_signing import pem, verify_independently
from tests.web.conftest import BackgroundEngine, engine_settings, web_settings
from web_facade import create_app
from web_facade.a2a.errors import AuthenticationRequired
from web_facade.a2a.routes import extended_card_response
from web_facade.engine_client import EngineClient

PUBLIC = "https://agents.example.com/agentik/"
CARD = "/.well-known/agent-card.json"
V10 = {"A2A-Version": "1.0"}
TOKENS = "alice:tokenA"
ALICE = {"Authorization": "Bearer tokenA"}
SKILLS = json.dumps(
    [
        {"id": "chat", "name": "Chat", "description": "Talks", "tags": ["chat"]},
        {"id": "billing", "name": "Billing", "description": "Refunds", "tags": ["money"]}
        | {"extended": True},
    ]
)
AGENTS_TOML = """
[[agents]]
name = "calc"
description = "Only does sums"
tools = ["calculate"]
"""


def _rpc(client: FlaskClient, method: str, headers: dict[str, str], path: str = "/") -> Any:
    body = {"jsonrpc": "2.0", "id": 3, "method": method}
    return client.post(path, json=body, headers=headers)


def _extended(client: FlaskClient, path: str = "/", **headers: str) -> Any:
    response = _rpc(client, "GetExtendedAgentCard", {**V10, **ALICE, **headers}, path)
    assert response.status_code == 200, response.get_data()
    reply = response.get_json()
    assert "error" not in reply, reply
    return response, reply["result"]


@pytest.fixture
def auth_target(llm: FakeOpenAI, tmp_path: Path) -> Iterator[str]:
    """An engine that needs a token, serving the default agent and ``calc``."""
    config = tmp_path / "engine.toml"
    config.write_text(AGENTS_TOML)
    settings = engine_settings(llm, AGENTIK_TOKENS=TOKENS, AGENTIK_CONFIG=str(config))
    engine = BackgroundEngine(settings)
    yield engine.start()
    engine.stop()


@pytest.fixture
def make_authed(auth_target: str, tmp_path: Path) -> Iterator[Callable[..., FlaskClient]]:
    channels: list[EngineClient] = []
    config = tmp_path / "web.toml"
    config.write_text(AGENTS_TOML)

    def make(**env: str) -> FlaskClient:
        base = {
            "AGENTIK_TOKENS": TOKENS,
            "AGENTIK_PUBLIC_URL": PUBLIC,
            "AGENTIK_CONFIG": str(config),
        }
        settings = web_settings(auth_target, **{**base, **env})
        channel = EngineClient(settings.web.engine_target)
        channels.append(channel)
        app = create_app(settings, channel)
        app.testing = True
        return app.test_client()

    yield make
    for channel in channels:
        channel.close()


# -- the extended card ----------------------------------------------------------------


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong"}], ids=["no-token", "wrong-token"]
)
def test_the_extended_card_needs_credentials_the_engine_accepts(
    make_authed: Callable[..., FlaskClient], headers: dict[str, str]
) -> None:
    client = make_authed(AGENTIK_AGENT_SKILLS=SKILLS)
    response = _rpc(client, "GetExtendedAgentCard", {**V10, **headers})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    error = response.get_json()["error"]
    assert error["code"] == -32600 and error["data"][0]["reason"] == "UNAUTHENTICATED"
    assert "billing" not in response.get_data(as_text=True)


def test_the_extended_card_adds_the_hidden_skills_and_the_tools(
    make_authed: Callable[..., FlaskClient],
) -> None:
    client = make_authed(AGENTIK_AGENT_SKILLS=SKILLS)
    public = client.get(CARD).get_json()
    assert public["capabilities"]["extendedAgentCard"] is True
    assert [s["id"] for s in public["skills"]] == ["chat"]

    response, card = _extended(client)
    ids = [s["id"] for s in card["skills"]]
    assert ids[:2] == ["chat", "billing"]
    tools = {s["name"] for s in card["skills"] if s["id"].startswith("tool:")}
    assert {"calculate", "current_time"} <= tools
    assert {k: v for k, v in card.items() if k != "skills"} == {
        k: v for k, v in public.items() if k != "skills"
    }
    jsonschema.Draft202012Validator(agent_card_schema()).validate(card)
    json_format.ParseDict(card, AgentCard(), ignore_unknown_fields=False)

    # Cached by the caller only, per credentials.
    assert response.headers["Cache-Control"] == "private, max-age=300"
    assert "Authorization" in response.headers["Vary"]
    etag = response.headers["ETag"]
    assert etag and etag != client.get(CARD).headers["ETag"]
    again, _ = _extended(client)
    assert again.headers["ETag"] == etag


def test_each_agent_has_its_own_extended_card_with_its_own_tools(
    make_authed: Callable[..., FlaskClient],
) -> None:
    client = make_authed()
    _, card = _extended(client, "/a2a/calc/")
    assert card["name"] == "calc"
    assert card["supportedInterfaces"][0]["url"] == PUBLIC + "a2a/calc/"
    assert [s["id"] for s in card["skills"] if s["id"].startswith("tool:")] == ["tool:calculate"]


def test_a_0_3_peer_gets_the_extended_card_by_its_method_name(
    make_authed: Callable[..., FlaskClient],
) -> None:
    client = make_authed(AGENTIK_AGENT_SKILLS=SKILLS)
    response = _rpc(client, "agent/getAuthenticatedExtendedCard", ALICE)
    card = response.get_json()["result"]
    assert card["protocolVersion"] == "0.3" or "url" in card
    assert "billing" in [s["id"] for s in card["skills"]]


def test_without_authentication_the_extended_card_is_everyones(app: Flask) -> None:
    client = app.test_client()
    response = _rpc(client, "GetExtendedAgentCard", V10)
    assert response.status_code == 200
    card = response.get_json()["result"]
    assert "tool:current_time" in [s["id"] for s in card["skills"]]
    # Without a public URL the card names the request's URL: revalidate every time.
    assert response.headers["Cache-Control"] == "private, no-cache"


def test_a_skill_extended_flag_must_be_a_boolean_and_one_skill_must_stay_public(
    make_app: Callable[..., Flask],
) -> None:
    bad = '[{"id": "a", "name": "A", "description": "d", "extended": "yes"}]'
    with pytest.raises(ConfigError, match=r"agent_skills\[0\]: extended must be true or false"):
        make_app(AGENTIK_AGENT_SKILLS=bad)
    hidden = '[{"id": "a", "name": "A", "description": "d", "extended": true}]'
    with pytest.raises(ConfigError, match="at least one"):
        make_app(AGENTIK_AGENT_SKILLS=hidden)


# -- caching of the per-agent cards -----------------------------------------------------


def test_each_agents_card_has_an_etag_cache_control_and_answers_304(
    make_authed: Callable[..., FlaskClient],
) -> None:
    client = make_authed()
    path = "/a2a/calc" + CARD
    first = client.get(path)
    assert first.status_code == 200
    assert first.headers["Cache-Control"] == "public, max-age=300"
    etag = first.headers["ETag"]
    assert etag != client.get(CARD).headers["ETag"]
    again = client.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""
    assert again.headers["ETag"] == etag


def test_the_extended_card_is_signed_too_and_the_key_may_be_given_inline(
    make_authed: Callable[..., FlaskClient],
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    client = make_authed(AGENTIK_A2A_CARD_SIGNING_KEY=pem(key))
    _, card = _extended(client)
    verify_independently(card, key.public_key())
    _, agent_card = _extended(client, "/a2a/calc/")
    verify_independently(agent_card, key.public_key())
    verify_independently(client.get("/a2a/calc" + CARD).get_json(), key.public_key())


def test_the_extended_card_answers_a_get_with_304_when_it_did_not_change(
    make_authed: Callable[..., FlaskClient],
) -> None:
    # The GET form other bindings serve (HTTP+JSON's GET /extendedAgentCard).
    client = make_authed(AGENTIK_AGENT_SKILLS=SKILLS)
    app = client.application
    with app.test_request_context("/extendedAgentCard", headers=ALICE):
        first = extended_card_response("calc")
    assert first.status_code == 200 and first.headers["Cache-Control"] == "private, max-age=300"
    assert json.loads(first.get_data())["name"] == "calc"
    etag = first.headers["ETag"]
    with app.test_request_context("/extendedAgentCard", headers={**ALICE, "If-None-Match": etag}):
        again = extended_card_response("calc")
    assert again.status_code == 304 and again.headers["ETag"] == etag  # werkzeug drops the body
    with (
        app.test_request_context("/extendedAgentCard"),
        pytest.raises(AuthenticationRequired),
    ):
        extended_card_response("calc")
