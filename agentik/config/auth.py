"""``[auth]``'s bearer tokens and principals: ``AGENTIK_TOKENS`` (``PRINCIPAL:TOKEN,...``)
or ``[[auth.tokens]]`` tables, each token printable, unique to one principal."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentik.ids import PRINCIPAL_RULE, is_valid_principal

__all__ = ["JWT_ALGORITHMS", "TokenEntry", "check_principal", "check_tokens"]

JWT_ALGORITHMS = (*(f"{k}{n}" for k in ("HS", "RS", "PS", "ES") for n in (256, 384, 512)), "EdDSA")


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One bearer token and the principal it names."""

    principal: str
    token: str = field(repr=False)


def check_principal(value: object) -> str:
    if not isinstance(value, str) or not is_valid_principal(value.strip()):
        raise ValueError(f"principal {value!r} must be {PRINCIPAL_RULE}")
    return value.strip()


def check_tokens(raw: object, env: bool) -> tuple[TokenEntry, ...]:
    """``PRINCIPAL:TOKEN,...`` from the environment, or ``[[auth.tokens]]`` tables."""
    pairs: list[tuple[int, object, object]] = []
    if env:
        for number, item in enumerate((i.strip() for i in str(raw).split(",")), start=1):
            before, sep, after = item.partition(":")
            if item and not sep:
                raise ValueError(f"entry {number} is not PRINCIPAL:TOKEN")
            pairs += [(number, before, after)] if item else []
    elif isinstance(raw, list) and all(isinstance(table, dict) for table in raw):
        for number, item in enumerate(raw, start=1):
            if unknown := sorted(set(item) - {"principal", "token"}):
                why = f"has unknown key {unknown[0]!r}; known: principal, token"
                raise ValueError(f"entry {number} {why}")
            pairs.append((number, item.get("principal"), item.get("token")))
    else:
        raise ValueError("must be an array of tables ([[auth.tokens]])")
    entries: list[TokenEntry] = []
    seen: dict[str, str] = {}
    for number, principal, token in pairs:
        who = check_principal(principal)
        if not isinstance(token, str) or not token:
            raise ValueError(f"entry {number}: the token of {who!r} must be a non-empty string")
        if not re.match(r"^[\x21-\x2b\x2d-\x7e]{1,4096}$", token):
            why = "must be printable ASCII without spaces or commas"
            raise ValueError(f"entry {number}: the token of {who!r} {why}")
        if (other := seen.setdefault(token, who)) != who:
            raise ValueError(f"{other!r} and {who!r} have the same token")
        entries.append(TokenEntry(who, token))
    return tuple(entries)
