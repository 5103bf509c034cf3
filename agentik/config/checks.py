"""The checks of single values that the converter cannot do from a type and bounds alone:
URLs (of an endpoint, an LLM API, a store), browser origins, A2A skills, tool name globs.
Each takes the converted value and returns it (or its normal form), or raises ValueError
saying why; the caller names the setting."""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any
from urllib.parse import urlsplit

from agentik.addresses import valid_host

__all__ = [
    "check_llm_url",
    "check_origin",
    "check_origins",
    "check_pattern",
    "check_skills",
    "check_store",
    "check_url",
]


def check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return value


def check_llm_url(value: str) -> str:
    """An OpenAI-compatible API's base: the engine adds ``/chat/completions`` (and the LLM
    check ``/models``) itself, so a URL of the endpoint would be asked for ``.../chat/
    completions/chat/completions``."""
    check_url(value)
    parts = urlsplit(value)
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions"):
        if path.endswith(tail):
            base = parts._replace(path=path.removesuffix(tail), query="", fragment="").geturl()
            why = f"must stop before {tail} (the engine adds /chat/completions itself)"
            raise ValueError(f"{why}: use {base!r}")
    return value


def check_store(value: str) -> str:
    scheme, sep, rest = value.partition("://")
    if not sep:
        raise ValueError("must be a URL: memory://, sqlite:///PATH or postgresql://...")
    if scheme.lower() == "memory" and rest:
        raise ValueError("memory:// takes nothing after the scheme")
    if scheme.lower() == "sqlite" and (not rest.startswith("/") or rest == "/"):
        why = "a SQLite URL needs three slashes and a path: sqlite:///relative.db"
        raise ValueError(f"{why} or sqlite:////absolute/path.db")
    if scheme.lower() not in ("memory", "sqlite", "postgresql", "postgres"):
        use = "use memory://, sqlite:///PATH, postgresql:// or postgres://"
        raise ValueError(f"has unknown store scheme {scheme.lower()!r}; {use}")
    return value


def check_origin(text: str) -> str:
    """``text`` as a browser sends it in ``Origin``: lower-case, no default port; or ``*``."""
    if text == "*":
        return text
    example = "an origin is SCHEME://HOST[:PORT], e.g. https://app.example"
    scheme, sep, rest = text.partition("://")
    host_port, slash, _ = rest.partition("/")
    if not sep or not re.match(r"^[a-z][a-z0-9+.-]*$", scheme := scheme.lower()) or not rest:
        raise ValueError(f"{text!r} is not an origin; {example}")
    if slash or "?" in rest or "#" in rest:
        raise ValueError(f"{text!r} has a path; {example}, without a trailing slash")
    if "@" in host_port:
        raise ValueError(f"{text!r} has user info; {example}")
    try:
        parts = urlsplit(f"{scheme}://{host_port}")
        port, host = parts.port, parts.hostname or ""
        host = f"[{ipaddress.IPv6Address(host)}]" if ":" in host else host
    except ValueError:
        raise ValueError(f"{text!r} has an invalid port or IPv6 address; {example}") from None
    if not host.startswith("[") and not valid_host(host):
        raise ValueError(f"{text!r} has no valid host; {example}")
    default = port is None or port == {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" if default else f"{scheme}://{host}:{port}"


def check_origins(origins: tuple[str, ...]) -> tuple[str, ...]:
    if "*" in origins and len(origins) > 1:
        raise ValueError('"*" already allows every origin; give it alone or list the origins')
    return origins


def check_skills(raw: object, env: bool) -> tuple[dict[str, Any], ...]:
    if env:
        try:
            raw = json.loads(str(raw))
        except ValueError as exc:
            raise ValueError(f"must be a JSON array of skill objects ({exc})") from None
    if not isinstance(raw, list):
        raise ValueError("must be an array of skill tables")
    for index, item in enumerate(raw):
        got = isinstance(item, dict) and [item.get(key) for key in ("id", "name", "description")]
        if not got or not all(isinstance(value, str) and value for value in got):
            raise ValueError(f"skill {index} needs string id, name and description")
    return tuple(dict(item) for item in raw)


def check_pattern(item: str, colon: str = "") -> str:
    """A tool name or glob (``*``, ``?``, ``[...]``; with ``colon``, ``agent:NAME``)."""
    if not re.fullmatch(rf"[A-Za-z0-9_.*?\[\]!{colon}-]{{1,128}}", item):
        why = f"is not a tool name or glob (letters, digits, _ . -{colon and ' :'} * ? [ ] !)"
        raise ValueError(f"{item!r} {why}")
    return item
