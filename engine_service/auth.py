"""Who is calling: bearer tokens (and optionally JWTs) to a ``Caller``, and per-caller
request rates. The engine's one enforcement point; the servicer calls ``Gate.admit``
at the start of every RPC.

Tokens are compared in constant time (their SHA-256 digests, every configured one each
time); no token, digest or JWT is ever logged.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentik.config import ConfigError, Settings
from agentik.ids import PRINCIPAL_RULE, is_valid_principal
from engine_service.core.caller import ANONYMOUS, Caller
from engine_service.core.errors import RateLimited, Unauthenticated

__all__ = ["Authenticator", "Gate", "RateLimiter"]

log = logging.getLogger(__name__)

MISSING = "this server requires authentication: send the header 'Authorization: Bearer <token>'"
MALFORMED = "the Authorization header must be 'Bearer <token>'"
INVALID = "the bearer token is not valid"
EXPIRED = "the bearer token has expired"
BAD_SUBJECT = (
    f"the bearer token's subject (sub) is not a valid principal: principals are {PRINCIPAL_RULE}"
)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class _Jwt:
    key: Any
    algorithms: tuple[str, ...]
    issuer: str
    audience: str


def _load_jwt(settings: Settings) -> _Jwt | None:
    if not settings.auth.jwt_key_file:
        return None
    path = settings.auth.jwt_key_file
    try:
        with open(path, "rb") as handle:
            material = handle.read()
    except OSError as exc:
        raise ConfigError(
            f"invalid jwt_key_file: cannot read {path!r} ({exc.strerror}); it must hold a "
            "PEM public key or an HMAC secret"
        ) from None
    if not material.strip():
        raise ConfigError(f"invalid jwt_key_file: {path!r} is empty")
    asymmetric = material.lstrip().startswith(b"-----BEGIN")
    algorithms = settings.auth.jwt_algorithms or (
        ("RS256", "ES256", "EdDSA") if asymmetric else ("HS256",)
    )
    hmac_algorithms = [a for a in algorithms if a.startswith("HS")]
    if asymmetric and hmac_algorithms:
        raise ConfigError(
            f"invalid jwt_algorithms: {hmac_algorithms[0]} with a PEM key in {path!r} would "
            "let anyone holding the public key sign tokens; use RS*/ES*/PS*/EdDSA"
        )
    if not asymmetric and len(hmac_algorithms) != len(algorithms):
        raise ConfigError(
            f"invalid jwt_algorithms: {path!r} holds an HMAC secret, not a PEM key; "
            "only HS256/HS384/HS512 fit it"
        )
    key: Any = material.strip()
    if asymmetric:
        try:
            from cryptography.hazmat.primitives.serialization import load_pem_public_key
        except ImportError:
            raise ConfigError(
                f"jwt_key_file {path!r} is a PEM public key, which needs the cryptography "
                "package: pip install 'agentik[jwt]'"
            ) from None

        try:
            key = load_pem_public_key(material)
        except ValueError:
            raise ConfigError(f"invalid jwt_key_file: {path!r} is not a PEM public key") from None
    return _Jwt(key, tuple(algorithms), settings.auth.jwt_issuer, settings.auth.jwt_audience)


class Authenticator:
    """Turns an ``Authorization`` header value into a ``Caller``."""

    def __init__(self, settings: Settings) -> None:
        self._tokens = [(_digest(t.token), t.principal) for t in settings.auth.tokens]
        self._admins = frozenset(settings.auth.admins)
        self._jwt = _load_jwt(settings)

    @property
    def enabled(self) -> bool:
        return bool(self._tokens) or self._jwt is not None

    def authenticate(self, authorization: str | None) -> Caller:
        """The caller the header names; ``Unauthenticated`` when it names none."""
        if not self.enabled:
            return ANONYMOUS
        if not authorization:
            raise Unauthenticated(MISSING, presented=False)
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(MALFORMED, presented=True)
        principal = self._match_token(token)
        if principal is None and self._jwt is not None and token.count(".") == 2:
            principal = self._verify_jwt(token, self._jwt)
        if principal is None:
            raise Unauthenticated(INVALID, presented=True)
        return Caller(principal, admin=principal in self._admins)

    def _match_token(self, token: str) -> str | None:
        presented = _digest(token)
        found: str | None = None
        for digest, principal in self._tokens:  # every entry, whatever matched
            if hmac.compare_digest(digest, presented):
                found = principal
        return found

    def _verify_jwt(self, token: str, config: _Jwt) -> str:
        import jwt

        try:
            claims = jwt.decode(
                token,
                config.key,
                algorithms=list(config.algorithms),
                audience=config.audience or None,
                issuer=config.issuer or None,
                options={
                    "require": ["exp", "sub"],
                    "verify_aud": bool(config.audience),
                    "verify_iss": bool(config.issuer),
                },
            )
        except jwt.ExpiredSignatureError:
            raise Unauthenticated(EXPIRED, presented=True) from None
        except jwt.PyJWTError as exc:
            log.info("a JWT was refused: %s", type(exc).__name__)
            raise Unauthenticated(INVALID, presented=True) from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise Unauthenticated(INVALID, presented=True)
        if not is_valid_principal(subject):  # the rule of configured principals, not stripped
            raise Unauthenticated(BAD_SUBJECT, presented=True)
        return subject


class RateLimiter:
    """A token bucket per principal: ``per_minute`` requests, refilled evenly."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._rate = per_minute / 60.0
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        """principal → (tokens left, when counted)."""
        self._lock = threading.Lock()

    def admit(self, caller: Caller) -> None:
        """Count one request of ``caller``; ``RateLimited`` when it is over its rate."""
        if self.per_minute <= 0:
            return
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.get(caller.principal, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - then) * self._rate)
            if tokens < 1.0:
                self._buckets[caller.principal] = (tokens, now)
                wait = math.ceil((1.0 - tokens) / self._rate)
                raise RateLimited(
                    f"more than {self.per_minute} requests a minute; retry in {wait} s",
                    retry_after=wait,
                )
            self._buckets[caller.principal] = (tokens - 1.0, now)
            if len(self._buckets) > 10_000:
                self._forget_idle(now)

    def _forget_idle(self, now: float) -> None:
        """Drop buckets that have refilled: they hold nothing a new one would not."""
        full = float(self.per_minute)
        for principal, (tokens, then) in list(self._buckets.items()):
            if tokens + (now - then) * self._rate >= full:
                del self._buckets[principal]


class Gate:
    """Authentication, then the caller's request rate: what every RPC passes first."""

    def __init__(self, authenticator: Authenticator, limiter: RateLimiter) -> None:
        self.authenticator = authenticator
        self.limiter = limiter

    @classmethod
    def from_settings(cls, settings: Settings) -> Gate:
        return cls(Authenticator(settings), RateLimiter(settings.auth.requests_per_minute))

    def admit(self, authorization: str | None) -> Caller:
        caller = self.authenticator.authenticate(authorization)
        self.limiter.admit(caller)
        return caller
