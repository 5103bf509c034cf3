"""Signed agent cards (A2A 1.0 §8.4, ``agentik.a2a.signing``): a JWS over the card's JCS
(RFC 8785) canonical form, checked here with ``cryptography`` alone and with a2a-sdk's
verifier; the key's setting; the JWK Set the public key is served as."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
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
from google.protobuf import json_format
from jwt import PyJWK

from agentik.config import ConfigError
from tests.web.a2a.card_schema import agent_card_schema

PUBLIC = "https://agents.example.com/agentik/"
CARD = "/.well-known/agent-card.json"


def b64decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def pruned(value: Any) -> Any:
    """§8.4.1: no empty strings, lists or objects (ProtoJSON already drops defaults)."""
    if isinstance(value, dict):
        kept = {k: p for k, v in value.items() if (p := pruned(v)) is not None}
        return kept or None
    if isinstance(value, list):
        items = [p for v in value if (p := pruned(v)) is not None]
        return items or None
    return None if value == "" else value


def jcs(value: Any) -> bytes:
    """RFC 8785 for a card: objects by key (ASCII keys: code point order is UTF-16 order),
    no whitespace, strings as UTF-8; the card has no numbers that would need ES6 forms."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def verify_independently(card: dict[str, Any], public_key: Any) -> dict[str, Any]:
    """Checks the card's one signature with ``cryptography`` alone; its protected header."""
    [signature] = card["signatures"]
    unsigned = {k: v for k, v in card.items() if k != "signatures"}
    payload = b64encode(jcs(pruned(unsigned)))
    signing_input = f"{signature['protected']}.{payload}".encode()
    raw = b64decode(signature["signature"])
    header: dict[str, Any] = json.loads(b64decode(signature["protected"]))
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        half = len(raw) // 2
        der = encode_dss_signature(int.from_bytes(raw[:half]), int.from_bytes(raw[half:]))
        public_key.verify(der, signing_input, ec.ECDSA(hashes.SHA256()))
    elif isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(raw, signing_input, padding.PKCS1v15(), hashes.SHA256())
    else:
        public_key.verify(raw, signing_input)
    return header


def pem(key: Any) -> str:
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
def test_a_signed_card_verifies_with_the_public_key_over_itsjcs_form(
    make_app: Callable[..., Flask], tmp_path: Path, algorithm: str
) -> None:
    key = KEYS[algorithm]()
    path = tmp_path / "card-key.pem"
    path.write_text(pem(key))
    client = make_app(
        AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_A2A_CARD_SIGNING_KEY=str(path)
    ).test_client()
    response = client.get(CARD)
    card = response.get_json()
    header = verify_independently(card, key.public_key())
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
        verify_independently(card, key.public_key())
    with pytest.raises(InvalidSignaturesError):
        verify(json_format.ParseDict(card, AgentCard()))

    # An ECDSA signature changes at each signing: the ETag is the card's, weak, and stays.
    etag = response.headers["ETag"]
    assert etag.startswith('W/"')
    assert client.get(CARD, headers={"If-None-Match": etag}).status_code == 304


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
        value = pem(rsa.generate_private_key(public_exponent=65537, key_size=1024))
    elif value == "ec-p192":
        value = pem(ec.generate_private_key(ec.SECP192R1()))
    with pytest.raises(ConfigError, match="invalid a2a_card_signing_key") as caught:
        make_app(AGENTIK_A2A_CARD_SIGNING_KEY=value)
    assert problem in str(caught.value)
    assert "bm90IGEga2V5" not in str(caught.value) and "END" not in str(caught.value)


def test_the_public_key_is_served_as_a_jwk_set_named_by_each_signatures_jku(
    make_app: Callable[..., Flask],
) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    client = make_app(
        AGENTIK_PUBLIC_URL=PUBLIC, AGENTIK_A2A_CARD_SIGNING_KEY=pem(key)
    ).test_client()
    card = client.get(CARD).get_json()
    header = json.loads(b64decode(card["signatures"][0]["protected"]))
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
