"""Signed agent cards (A2A 1.0 §8.4): a JWS over the card's JCS (RFC 8785) canonical form.

The key is ``[a2a] card_signing_key`` (env ``AGENTIK_A2A_CARD_SIGNING_KEY``): the path of a
PEM private key file, or the PEM itself. Its type picks the algorithm — EC P-256 ``ES256``,
P-384 ``ES384``, P-521 ``ES512``, RSA ``RS256``, Ed25519 ``EdDSA`` — and its ``kid`` is the
RFC 7638 thumbprint of its public key, so peers can tell keys apart without a registry.

The public key is served as a JWK Set at ``/.well-known/jwks.json``; with a public URL set,
the protected header's ``jku`` names it. Each card carries one entry in ``signatures``:
``protected`` (the base64url JWS header: ``alg``, ``typ: JOSE``, ``kid``, ``jku``) and
``signature``; the payload is not in the card (it is the
card itself, canonicalized without ``signatures``). Canonicalization and the JWS are the
a2a-sdk's own (``a2a.utils.signing``), so the SDK's ``create_signature_verifier`` — and any
verifier that follows §8.4 — accepts the cards.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from agentik.config import ConfigError

if TYPE_CHECKING:
    from a2a.types import AgentCard

__all__ = ["CardSigner", "load_signer"]

_SETTING = "a2a_card_signing_key (AGENTIK_A2A_CARD_SIGNING_KEY)"
_CURVES = {"secp256r1": ("ES256", "P-256"), "secp384r1": ("ES384", "P-384")}
_CURVES["secp521r1"] = ("ES512", "P-521")
_MIN_RSA_BITS = 2048


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _int(value: int, size: int) -> str:
    return _b64(value.to_bytes(size, "big"))


@dataclass(frozen=True, slots=True)
class CardSigner:
    """Signs cards with one private key."""

    key: Any
    """The private key (a ``cryptography`` key object)."""
    algorithm: str
    kid: str
    public_jwk: dict[str, str]
    """The public key as a JWK (with ``kid``, ``alg`` and ``use: sig``), for verifiers."""

    def sign(self, card: AgentCard, jku: str = "") -> AgentCard:
        """``card`` with its signature appended (the card is changed in place); ``jku``:
        where the public key is published (a JWK Set URL), put in the protected header."""
        from a2a.utils.signing import ProtectedHeader, create_agent_card_signer  # PyJWT

        header = {"alg": self.algorithm, "typ": "JOSE", "kid": self.kid}
        if jku:
            header["jku"] = jku
        return create_agent_card_signer(self.key, cast(ProtectedHeader, header))(card)

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        """The JWK Set peers verify the cards with: the public key alone."""
        return {"keys": [dict(self.public_jwk)]}


def _pem(value: str) -> bytes:
    if "-----BEGIN" in value:
        return value.encode()
    path = Path(value).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"invalid {_SETTING}: cannot read {value!r} ({exc.strerror}); give the path of a "
            "PEM private key file or the PEM text itself"
        ) from None
    if not data.strip():
        raise ConfigError(f"invalid {_SETTING}: {value!r} is empty")
    return data


def _jwk(key: Any) -> tuple[str, dict[str, str]]:
    """The algorithm and the public JWK (members in RFC 7638 order) of a private key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    public = key.public_key()
    if isinstance(key, ec.EllipticCurvePrivateKey):
        found = _CURVES.get(key.curve.name)
        if found is None:
            known = ", ".join(crv for _, crv in _CURVES.values())
            raise ConfigError(f"invalid {_SETTING}: EC curve {key.curve.name} (use {known})")
        size = (key.curve.key_size + 7) // 8
        numbers = public.public_numbers()
        jwk = {"crv": found[1], "kty": "EC"}
        jwk |= {"x": _int(numbers.x, size), "y": _int(numbers.y, size)}
        return found[0], jwk
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < _MIN_RSA_BITS:
            raise ConfigError(
                f"invalid {_SETTING}: an RSA key of {key.key_size} bits is too short "
                f"(at least {_MIN_RSA_BITS})"
            )
        numbers = public.public_numbers()
        exponent = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
        modulus = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        return "RS256", {"e": _b64(exponent), "kty": "RSA", "n": _b64(modulus)}
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return "EdDSA", {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}
    raise ConfigError(
        f"invalid {_SETTING}: a {type(key).__name__.removeprefix('_')} cannot sign cards; use an "
        "EC (P-256, P-384, P-521), RSA or Ed25519 private key"
    )


def load_signer(value: str) -> CardSigner | None:
    """The signer for the setting's ``value``; None when it is empty. ``ConfigError`` names
    what is wrong with the key (never its content)."""
    if not value.strip():
        return None
    # Imported here: cryptography (with PyJWT) costs each process ~8 MB, and only a
    # configured signing key needs it (docs/performance.md, idle memory).
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    data = _pem(value.strip())
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(
            f"invalid {_SETTING}: the key is encrypted; give an unencrypted PEM private key"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(
            f"invalid {_SETTING}: not a PEM private key (PKCS#8 or traditional, "
            '"-----BEGIN PRIVATE KEY-----")'
        ) from None
    algorithm, jwk = _jwk(key)
    canonical = json.dumps(jwk, separators=(",", ":"), sort_keys=True).encode()
    kid = _b64(hashlib.sha256(canonical).digest())
    public_jwk = {**jwk, "kid": kid, "alg": algorithm, "use": "sig"}
    return CardSigner(key=key, algorithm=algorithm, kid=kid, public_jwk=public_jwk)
