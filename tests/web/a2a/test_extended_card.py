"""The authenticated extended card (``GetExtendedAgentCard``), signed cards (JWS over the
JCS-canonical card, A2A 1.0 §8.4) and the caching headers of every card."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from a2a.types import AgentCard
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from flask import Flask
from flask.testing import FlaskClient
from google.protobuf import json_format
from jwt import PyJWK

from agentik.config import ConfigError
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.card_schema import agent_card_schema
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


# -- signed cards -----------------------------------------------------------------------


def _b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _pruned(value: Any) -> Any:
    """§8.4.1: no empty strings, lists or objects (ProtoJSON already drops defaults)."""
    if isinstance(value, dict):
        kept = {k: p for k, v in value.items() if (p := _pruned(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [p for v in value if (p := _pruned(v)) is not None]
        return items or None
    return None if value == "" else value


def _jcs(value: Any) -> bytes:
    """RFC 8785 for a card: objects by key (ASCII keys: code point order is UTF-16 order),
    no whitespace, strings as UTF-8; the card has no numbers that would need ES6 forms."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _verify_independently(card: dict[str, Any], public_key: Any) -> dict[str, Any]:
    """Checks the card's one signature with ``cryptography`` alone; its protected header."""
    [signature] = card["signatures"]
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    payload = _b64encode(_jcs(_pruned(unsigned)))
    signing_input = f"{signature['protected']}.{payload}".encode()
    raw = _b64decode(signature["signature"])
    header: dict[str, Any] = json.loads(_b64decode(signature["protected"]))
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        half = len(raw) // 2
        der = encode_dss_signature(int.from_bytes(raw[:half]), int.from_bytes(raw[half:]))
        public_key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
    elif isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(raw, signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        public_key.verify(raw, signing_input)
    return header


def _pem(key: Any) -> str:
    data: bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return data.decode()


KEYS: dict[str, Callable[[], Any]] = {
    "ES256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "RS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "EdDSA": ed25519.Ed25519PrivateKey.generate,
}


@pytest.mark.parametrize("algorithm", list(KEYS))
def test_a_signed_card_verifies_with_the_public_key_over_its_jcs_form(
    make_app: Callable[..., Flask], tmp_path: Path, algorithm: str
) -> None:
    key = KEYS[algorithm]()
    path = tmp_path / "card-key.pem"
    path.write_text(_pem(key))
    client = make_app(
        AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_A2A_CARD_SIGNING_KEY=str(path)
    ).test_client()
    response = client.get(CARD)
    card = response.get_json()
    header = _verify_independently(card, key.public_key())
    assert header["alg"] == algorithm and header["typ"] == "JOSE" and header["kid"]
    jsonschema.Draft202012Validator(agent_card_schema()).validate(card)

    # The SDK's verifier agrees; a changed card does not verify.
    verify = create_signature_verifier(lambda kid, jku: key.public_key(), [algorithm])
    verify(json_format.ParseDict(card, AgentCard()))
    # The 0.3 shape carries the same signature, over the 1.0 card it holds.
    v03 = client.get(CARD, headers={"A2A-Version": "0.3"}).get_json()
    assert v03["protocolVersion"] == "0.3" and v03["signatures"]
    verify(json_format.ParseDict(v03, AgentCard(), ignore_unknown_fields=True))
    card["description"] = "Something else."
    with pytest.raises((InvalidSignature, InvalidSignaturesError)):
        _verify_independently(card, key.public_key())
    with pytest.raises(InvalidSignaturesError):
        verify(json_format.ParseDict(card, AgentCard()))

    # An ECDSA signature changes at each signing: the ETag is the card's, weak, and stays.
    etag = response.headers["ETag"]
    assert etag.startswith('W/"')
    assert client.get(CARD, headers={"If-None-Match": etag}).status_code == 304


def test_the_extended_card_is_signed_too_and_the_key_may_be_given_inline(
    make_authed: Callable[..., FlaskClient],
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    client = make_authed(AGENTIK_A2A_CARD_SIGNING_KEY=_pem(key))
    _, card = _extended(client)
    _verify_independently(card, key.public_key())
    _, agent_card = _extended(client, "/a2a/calc/")
    _verify_independently(agent_card, key.public_key())
    _verify_independently(client.get("/a2a/calc" + CARD).get_json(), key.public_key())


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/nowhere/key.pem", "cannot read '/nowhere/key.pem'"),
        ("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n", "not a PEM"),
        ("rsa-1024", "too short"),
        ("ec-p192", "EC curve"),
    ],
)
def test_a_bad_signing_key_stops_the_app_with_a_message_naming_the_setting(
    make_app: Callable[..., Flask], value: str, problem: str
) -> None:
    if value == "rsa-1024":
        value = _pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))
    elif value == "ec-p192":
        value = _pem(ec.generate_private_key(ec.SECP192R1()))
    with pytest.raises(ConfigError, match="invalid a2a_card_signing_key") as caught:
        make_app(AGENTIK_A2A_CARD_SIGNING_KEY=value)
    assert problem in str(caught.value)
    assert "bm90IGEga2V5" not in str(caught.value) and "END" not in str(caught.value)


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


def test_the_public_key_is_served_as_a_jwk_set_named_by_each_signatures_jku(
    make_app: Callable[..., Flask],
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    client = make_app(
        AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_A2A_CARD_SIGNING_KEY=_pem(key)
    ).test_client()
    card = client.get(CARD).get_json()
    header = json.loads(_b64decode(card["signatures"][0]["protected"]))
    assert header["jku"] == PUBLIC + ".well-known/jwks.json"
    answer = client.get("/.well-known/jwks.json")
    assert answer.status_code == 200 and answer.mimetype == "application/jwk-set+json"
    assert answer.headers["Cache-Control"] == "public, max-age=300"
    [jwk] = answer.get_json()["keys"]
    assert jwk["kid"] == header["kid"] and jwk["alg"] == "EdDSA" and "d" not in jwk

    # A verifier that only knows where the key set is: it picks the key by kid.
    def from_jwks(kid: str | None, jku: str | None) -> PyJWK:
        assert jku is not None and jku == header["jku"]
        keys = client.get(jku.removeprefix(PUBLIC.rstrip("/"))).get_json()["keys"]
        return PyJWK(next(k for k in keys if k["kid"] == kid))

    verify = create_signature_verifier(from_jwks, ["EdDSA"])
    verify(json_format.ParseDict(card, AgentCard()))


def test_without_a_signing_key_there_is_no_jwk_set(make_app: Callable[..., Flask]) -> None:
    answer = make_app().test_client().get("/.well-known/jwks.json")
    assert answer.status_code == 404
    assert answer.get_json()["error"]["code"] == "not_found"
