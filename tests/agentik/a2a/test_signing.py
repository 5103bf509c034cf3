"""The card signer (``agentik.a2a.signing``) on its own: each key type's algorithm, a
``kid`` that is the key's RFC 7638 thumbprint, and clear refusals of keys that cannot sign.
Served cards are checked in tests/web/a2a/test_signing.py."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from a2a.types import AgentCard
from a2a.utils.signing import create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from agentik.a2a.signing import load_signer
from agentik.config import ConfigError


def _pem(key: Any) -> str:
    pem: bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return pem.decode()


def _public(key: Any) -> bytes:
    public: bytes = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return public


@pytest.mark.parametrize(
    ("key", "algorithm"),
    [
        (ec.generate_private_key(ec.SECP256R1()), "ES256"),
        (ec.generate_private_key(ec.SECP384R1()), "ES384"),
        (rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256"),
        (ed25519.Ed25519PrivateKey.generate(), "EdDSA"),
    ],
)
def test_each_key_type_signs_with_its_algorithm_and_the_sdk_verifies(
    key: Any, algorithm: str
) -> None:
    signer = load_signer(_pem(key))
    assert signer is not None and signer.algorithm == algorithm
    members = {k: v for k, v in signer.public_jwk.items() if k not in ("kid", "alg", "use")}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    thumbprint = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=")
    assert signer.kid == thumbprint.decode()
    card = signer.sign(AgentCard(name="a", description="d", version="1"), "https://x/jwks")
    create_signature_verifier(lambda kid, jku: _public(key), [algorithm])(card)
    assert signer.jwks() == {"keys": [signer.public_jwk]}


def test_no_key_is_no_signer_and_a_bad_one_is_refused_naming_the_setting() -> None:
    assert load_signer("  ") is None
    short = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    for value, words in (
        ("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n", "not a PEM"),
        ("/nonexistent/card.pem", "cannot read"),
        (_pem(short), "too short"),
    ):
        with pytest.raises(ConfigError, match="a2a_card_signing_key") as caught:
            load_signer(value)
        assert words in str(caught.value)
