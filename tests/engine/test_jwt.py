"""JWT bearer tokens over real gRPC: an HMAC secret file and an RS256 public key.

The principal is the token's ``sub``; whatever is wrong with a token (its time, issuer,
audience, key, algorithm, claims) is UNAUTHENTICATED, and the key file's configuration
errors surface when the authenticator is built.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agentik.config import ConfigError
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.auth import Authenticator
from tests.engine.auth_helpers import bearer, rpc_error, trailers
from tests.engine.harness import Harness, engine_settings, running_engine

ISSUER = "https://issuer.test"
AUDIENCE = "agentik-tests"
SECRET = "hs-secret-" + "0123456789abcdef" * 4


@dataclass
class Keys:
    secret_file: Path
    private_key: rsa.RSAPrivateKey
    public_pem: bytes
    public_file: Path
    other_private_key: rsa.RSAPrivateKey


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    folder = tmp_path_factory.mktemp("jwt")
    secret_file = folder / "secret"
    secret_file.write_text(SECRET + "\n")
    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public_pem = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    public_file = folder / "public.pem"
    public_file.write_bytes(public_pem)
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return Keys(secret_file, private_key, public_pem, public_file, other)


def _claims(**changes: Any) -> dict[str, Any]:
    claims: dict[str, Any] = {
        "sub": "alice",
        "iss": ISSUER,
        "aud": AUDIENCE,
        "exp": int(time.time()) + 300,
        "iat": int(time.time()),
    }
    claims.update(changes)
    return {k: v for k, v in claims.items() if v is not None}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(header: dict[str, Any], claims: dict[str, Any], key: bytes | None) -> str:
    """A JWT put together by hand: HS256 with ``key`` as the secret, or unsigned."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    if key is None:
        return signing_input + "."
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def _resigned_claims(token: str, **changes: Any) -> str:
    """``token`` with other claims but its original signature."""
    header, _, signature = token.split(".")
    return f"{header}.{_b64(json.dumps(_claims(**changes)).encode())}.{signature}"


def _hs(**changes: Any) -> str:
    return jwt.encode(_claims(**changes), SECRET, algorithm="HS256")


def _rs(keys: Keys, **changes: Any) -> str:
    return jwt.encode(_claims(**changes), keys.private_key, algorithm="RS256")


def _env(key_file: Path, **env: str) -> dict[str, str]:
    return {
        "AGENTIK_JWT_KEY_FILE": str(key_file),
        "AGENTIK_JWT_ISSUER": ISSUER,
        "AGENTIK_JWT_AUDIENCE": AUDIENCE,
        "AGENTIK_ADMINS": "ops",
        **env,
    }


@pytest.fixture
async def hs_engine(keys: Keys) -> AsyncIterator[Harness]:
    async with running_engine(engine_settings(**_env(keys.secret_file))) as running:
        yield running


@pytest.fixture
async def rs_engine(keys: Keys) -> AsyncIterator[Harness]:
    async with running_engine(engine_settings(**_env(keys.public_file))) as running:
        yield running


async def _isolated(h: Harness, alice: str, bob: str, ops: str) -> None:
    made = await h.stub.CreateSession(
        pb.CreateSessionRequest(session_id="s-alice"), metadata=bearer(alice)
    )
    assert made.owner == "alice"
    error = await rpc_error(
        h.stub.GetSession(pb.GetSessionRequest(session_id="s-alice"), metadata=bearer(bob))
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND
    listed = await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=bearer(bob))
    assert listed.total == 0 and not listed.sessions
    everyone = await h.stub.ListSessions(pb.ListSessionsRequest(), metadata=bearer(ops))
    assert [s.owner for s in everyone.sessions] == ["alice"]


async def test_an_hs256_token_names_its_subject(hs_engine: Harness) -> None:
    await _isolated(hs_engine, _hs(), _hs(sub="bob"), _hs(sub="ops"))


async def test_an_rs256_token_names_its_subject(rs_engine: Harness, keys: Keys) -> None:
    await _isolated(rs_engine, _rs(keys), _rs(keys, sub="bob"), _rs(keys, sub="ops"))


async def _refused(h: Harness, token: str) -> str:
    error = await rpc_error(h.stub.ListSessions(pb.ListSessionsRequest(), metadata=bearer(token)))
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error.details()
    assert trailers(error)["agentik-error"] == "unauthenticated"
    details = str(error.details())
    assert all(part not in details for part in token.split(".") if part)
    return details


BAD_HS: dict[str, Any] = {
    "wrong issuer": lambda: _hs(iss="https://elsewhere.test"),
    "no issuer": lambda: _hs(iss=None),
    "wrong audience": lambda: _hs(aud="someone-else"),
    "wrong key": lambda: jwt.encode(_claims(), "another-secret-of-decent-length!!", "HS256"),
    "alg none": lambda: _forged({"alg": "none", "typ": "JWT"}, _claims(), None),
    "no sub": lambda: _hs(sub=None),
    "empty sub": lambda: _hs(sub=""),
    "no exp": lambda: _hs(exp=None),
    "HS512 not allowed": lambda: jwt.encode(_claims(), SECRET, algorithm="HS512"),
    "sub changed after signing": lambda: _resigned_claims(_hs(), sub="bob"),
}


@pytest.mark.parametrize("name", list(BAD_HS))
async def test_a_bad_hs256_token_is_unauthenticated(hs_engine: Harness, name: str) -> None:
    assert await _refused(hs_engine, BAD_HS[name]()) == "the bearer token is not valid"


@pytest.mark.parametrize(
    "sub",
    [
        pytest.param("a" * 127 + " " + "b" * 128, id="256-printable-with-a-space"),
        pytest.param("alice smith", id="space"),
        pytest.param("x" * 129, id="129-characters"),
        pytest.param("alice:admin", id="colon"),
        pytest.param("a,b", id="comma"),
        pytest.param("tab\there", id="tab"),
        pytest.param("ünïcode", id="non-ascii"),
        pytest.param(" alice", id="leading-space"),
    ],
)
async def test_a_signed_token_whose_sub_breaks_the_principal_rule_is_refused_saying_why(
    hs_engine: Harness, sub: str
) -> None:
    details = await _refused(hs_engine, _hs(sub=sub))

    assert details == (
        "the bearer token's subject (sub) is not a valid principal: principals are "
        "1-128 letters, digits or ._~@+- (no spaces, ':' or ',')"
    )
    assert sub not in details


async def test_a_sub_within_the_principal_rule_is_the_principal(hs_engine: Harness) -> None:
    sub = "svc.user-1_a@example.com+ops~" + "z" * 99
    made = await hs_engine.stub.CreateSession(
        pb.CreateSessionRequest(), metadata=bearer(_hs(sub=sub))
    )

    assert made.owner == sub


async def test_an_expired_token_says_it_has_expired(hs_engine: Harness, keys: Keys) -> None:
    details = await _refused(hs_engine, _hs(exp=int(time.time()) - 120))
    assert "has expired" in details


async def test_bad_rs256_tokens_are_unauthenticated(rs_engine: Harness, keys: Keys) -> None:
    assert "has expired" in await _refused(rs_engine, _rs(keys, exp=int(time.time()) - 120))
    other = jwt.encode(_claims(), keys.other_private_key, algorithm="RS256")
    for token in (
        other,
        _rs(keys, aud="someone-else"),
        _rs(keys, iss="https://elsewhere.test"),
        _rs(keys, sub=None),
        _rs(keys, exp=None),
        _forged({"alg": "none", "typ": "JWT"}, _claims(), None),
        # Algorithm confusion: HS256 with the public key's PEM text as the HMAC secret.
        _forged({"alg": "HS256", "typ": "JWT"}, _claims(), keys.public_pem),
        _forged({"alg": "HS256", "typ": "JWT"}, _claims(), keys.public_pem.strip()),
    ):
        assert await _refused(rs_engine, token) == "the bearer token is not valid"


# -- configuration --------------------------------------------------------------------


def test_an_unreadable_key_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(ConfigError, match="cannot read") as caught:
        Authenticator(engine_settings(AGENTIK_JWT_KEY_FILE=str(missing)))
    assert str(missing) in str(caught.value)
    with pytest.raises(ConfigError, match="cannot read"):
        Authenticator(engine_settings(AGENTIK_JWT_KEY_FILE=str(tmp_path)))  # a directory
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        Authenticator(engine_settings(AGENTIK_JWT_KEY_FILE=str(empty)))


@pytest.mark.parametrize("algorithms", ["HS256", "RS256,HS256", "HS512"])
def test_an_hmac_algorithm_with_a_pem_key_is_a_config_error(keys: Keys, algorithms: str) -> None:
    settings = engine_settings(
        AGENTIK_JWT_KEY_FILE=str(keys.public_file), AGENTIK_JWT_ALGORITHMS=algorithms
    )
    with pytest.raises(ConfigError, match="PEM key"):
        Authenticator(settings)


def test_an_asymmetric_algorithm_with_a_secret_is_a_config_error(keys: Keys) -> None:
    settings = engine_settings(
        AGENTIK_JWT_KEY_FILE=str(keys.secret_file), AGENTIK_JWT_ALGORITHMS="RS256"
    )
    with pytest.raises(ConfigError, match="HMAC secret"):
        Authenticator(settings)


def test_a_pem_file_that_holds_no_public_key_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PUBLIC KEY-----\nnot base64 at all\n-----END PUBLIC KEY-----\n")
    with pytest.raises(ConfigError, match="not a PEM public key"):
        Authenticator(engine_settings(AGENTIK_JWT_KEY_FILE=str(bad)))


async def test_no_jwt_reaches_the_log(hs_engine: Harness, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = [_hs(), _hs(sub="bob"), *(make() for make in BAD_HS.values())]
    tokens.append(_hs(exp=int(time.time()) - 120))
    for token in tokens:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await hs_engine.stub.ListSessions(pb.ListSessionsRequest(), metadata=bearer(token))
    assert caplog.records, "nothing was logged at all?"
    parts = {part for token in tokens for part in token.split(".") if len(part) > 8}
    parts.add(SECRET)
    for record in caplog.records:
        shown = f"{record.getMessage()} {record.exc_text or ''} {record.stack_info or ''}"
        assert not any(part in shown for part in parts), record
