"""Settings for the engine and the web facade: one model per TOML table.

Sources, later wins:

1. the defaults of the models below;
2. a TOML file, if one is named: the ``path`` argument, else ``AGENTIK_CONFIG``. A file
   named but missing is an error; with neither, no file is read;
3. environment variables. An empty variable counts as unset;
4. command-line flags, which the CLIs apply on top (``--config`` names the file,
   ``agentik engine --workers N`` beats ``[engine] workers``).

Every value is checked; a bad one raises :class:`ConfigError` naming the setting, where it
came from (env var, or TOML key and file) and the value. Unknown TOML tables and keys are
errors with a "did you mean", so a typo never silently falls back to a default.

The models are the reference: each class is a TOML table (``[engine]`` is
:class:`EngineSettings`, ...), each field a key of it with its default, environment variable,
checker and setting name: ``[llm] timeout`` is ``settings.llm.timeout``, env
``AGENTIK_LLM_TIMEOUT``, named ``llm_timeout`` in errors, ``agentik config`` and
``Settings(llm_timeout=...)``. Arrays of tables (``[[mcp.servers]]``, ``[[tools.python]]``,
``[[a2a.agents]]``, and the top-level ``[[agents]]``, kept as ``settings.agent.agents``) are
read by ``agentik/tool_config/``.

They are frozen dataclasses, not pydantic models: pydantic in the engine's start costs
about 9 MiB of idle memory (it loads ``pydantic_core`` and ``importlib.metadata``, which
tests/test_version.py keeps out), and our checkers give the messages anyway.

Adding a setting is one line in its table's model, e.g. in :class:`LlmSettings`::

    context_tokens: int = setting(0, "AGENTIK_CONTEXT_TOKENS", _integer(0))

``flat="llm_..."`` names it when the key alone would be unclear (the default is the key);
``secret=True`` masks it.
Then a row in the README's configuration table and the describe count in tests/test_config.py.
A new table is a new frozen dataclass and one entry in ``_TABLES`` and ``Settings``.

Engine targets: ``[web] engine_target`` is where the facade dials the engine, as a gRPC
target; with several addresses the facade balances calls (round robin) and retries safe
reads on another: ``HOST:PORT`` or ``[IPv6]:PORT`` (every address the host resolves to),
``ipv4:A.B.C.D:PORT,...``, ``ipv6:[IPv6]:PORT,...``, ``dns:///HOST:PORT`` (re-resolved when
connections fail; ``dns://RESOLVER[:PORT]/HOST:PORT`` asks that server), ``unix:PATH`` or
``unix:///ABSOLUTE/PATH``. Every form needs its port; anything else is refused.
"""

from __future__ import annotations

import difflib
import errno
import ipaddress
import json
import math
import os
import re
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from agentik.ids import PRINCIPAL_RULE, is_valid_principal
from agentik.limits import (
    COMPACTION_MODES,
    MAX_EVENT_BYTES,
    MIN_CONTEXT_TOKENS,
    MIN_EVENT_BYTES,
    check_modalities,
)

if TYPE_CHECKING:  # imported when used (the tool tables)
    from agentik.tool_config.a2a import A2aAgentConfig
    from agentik.tool_config.agents import AgentConfig
    from agentik.tool_config.mcp import McpServerConfig
    from agentik.tool_config.python import PythonToolConfig

__all__ = [
    "A2aSettings",
    "AgentSettings",
    "AuthSettings",
    "ConfigError",
    "EngineSettings",
    "LlmSettings",
    "LogSettings",
    "McpSettings",
    "Settings",
    "TokenEntry",
    "ToolsSettings",
    "WebSettings",
    "is_loopback",
    "load_settings",
    "refuse_open_exposure",
    "setting_keys",
]

CONFIG_ENV = "AGENTIK_CONFIG"
"""The environment variable naming the TOML file when no path is passed."""

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer clearly and concisely. Use the tools you have "
    "when they help, and say so when you are not sure."
)

_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")
_ENV_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}


class ConfigError(Exception):
    """The configuration is unusable; the message says which setting, from where, and why."""


class _Invalid(Exception):
    """Why a raw value is unacceptable (without the setting's name or origin)."""


Parser = Callable[[object, bool], object]
"""Turns a raw value (a str from the environment when the flag is set, else TOML) into the
setting's value, or raises ``_Invalid``."""
TableLoader = Callable[[object, str, Mapping[str, str]], tuple[Any, ...]]
"""Reads an array of tables: ``(raw, where, env)``; raises ``ConfigError``."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One bearer token and the principal it names."""

    principal: str
    token: str = field(repr=False)


# --- value parsers --------------------------------------------------------------------


def _text(raw: object, *, strip: bool = True) -> str:
    if not isinstance(raw, str):
        raise _Invalid(f"must be a string, not {type(raw).__name__}")
    return raw.strip() if strip else raw


def _items(raw: object, from_env: bool) -> object:
    """A TOML array as is, or the comma-separated items of an environment variable."""
    return [item.strip() for item in _text(raw).split(",") if item.strip()] if from_env else raw


def _nonempty(raw: object, from_env: bool) -> object:
    if not (value := _text(raw)):
        raise _Invalid("must not be empty")
    return value


def _prompt(raw: object, from_env: bool) -> object:
    return _text(raw, strip=False)


def _secret(raw: object, from_env: bool) -> object:
    return _text(raw) or None


def _secret_text(raw: object, from_env: bool) -> object:
    return _text(raw)


def _webhook_secret(raw: object, from_env: bool) -> object:
    text = _secret(raw, from_env)
    if isinstance(text, str) and text.startswith("whsec_"):
        import base64
        import binascii

        try:
            base64.b64decode(text[len("whsec_") :], validate=True)
        except binascii.Error:
            raise _Invalid("a secret starting with whsec_ must be base64 after it") from None
    return text or ""


def _http_url(raw: object, from_env: bool) -> object:
    if not (value := _text(raw)):
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _Invalid("must be an http:// or https:// URL")
    return value


def _optional_http_url(raw: object, from_env: bool) -> object:
    return _http_url(raw, from_env) or ""


def _choice(*options: str) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        value = _text(raw).upper() if options[0].isupper() else _text(raw).lower()
        if value not in options:
            raise _Invalid(f"must be one of {', '.join(options)}")
        return value

    return parse


def _number(raw: object, from_env: bool, kind: type[int] | type[float], what: str) -> Any:
    if from_env:
        try:
            return kind(_text(raw))
        except ValueError:
            raise _Invalid(f"must be {what}") from None
    if isinstance(raw, bool) or not isinstance(raw, int | float if kind is float else int):
        raise _Invalid(f"must be {what}, not {type(raw).__name__}")
    return kind(raw)


def _integer(minimum: int) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        value: int = _number(raw, from_env, int, "an integer")
        if value < minimum:
            raise _Invalid("must be positive" if minimum == 1 else f"must be at least {minimum}")
        return value

    return parse


def _bytes(lowest: int, highest: int) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        value: int = _number(raw, from_env, int, "an integer")
        if not lowest <= value <= highest:
            raise _Invalid(f"must be between {lowest} and {highest} bytes")
        return value

    return parse


def _seconds(*, zero_ok: bool) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        value: float = _number(raw, from_env, float, "a number of seconds")
        if not math.isfinite(value):
            raise _Invalid("must be a finite number of seconds")
        if value < 0 or (value == 0 and not zero_ok):
            raise _Invalid("must not be negative" if zero_ok else "must be positive")
        return value

    return parse


def _share(raw: object, from_env: bool) -> object:
    """A fraction in (0, 1]."""
    value: float = _number(raw, from_env, float, "a number between 0 and 1, e.g. 0.25")
    if not (0 < value <= 1):  # NaN fails this too
        raise _Invalid("must be more than 0 and at most 1 (1 = no share limit)")
    return value


def _boolean(raw: object, from_env: bool) -> object:
    if isinstance(raw, bool):
        return raw
    value = raw.strip().lower() if from_env and isinstance(raw, str) else None
    if value in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value in ("1", "true", "yes", "on")
    raise _Invalid("must be true or false")


def _valid_host(host: str) -> bool:
    if not _HOSTNAME.match(host):
        return False
    if host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
    return True


def _address(*, port_zero_ok: bool) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        value = _text(raw)
        if value.startswith("["):
            inside, sep, port = value[1:].partition("]:")
            try:
                ipaddress.IPv6Address(inside)
            except ValueError:
                raise _Invalid("must be HOST:PORT with a valid IPv6 address in brackets") from None
        else:
            host, sep, port = value.rpartition(":")
            if ":" in host:
                raise _Invalid("must be HOST:PORT; put an IPv6 address in brackets, [::1]:PORT")
            if not _valid_host(host):
                raise _Invalid("must be HOST:PORT with a valid host name or IP address")
        if not sep or not port.isascii() or not port.isdigit():
            raise _Invalid("must be HOST:PORT, e.g. 127.0.0.1:50051")
        lowest = 0 if port_zero_ok else 1
        if not lowest <= int(port) <= 65535:
            raise _Invalid(f"port must be between {lowest} and 65535")
        return value

    return parse


def _optional_public_address(raw: object, from_env: bool) -> object:
    """HOST:PORT a peer dials (port 1-65535), or "" for none."""
    return _address(port_zero_ok=False)(raw, from_env) if _text(raw) else ""


def _optional_address(raw: object, from_env: bool) -> object:
    """HOST:PORT, or "" for off."""
    return _address(port_zero_ok=True)(raw, from_env) if _text(raw) else ""


_TARGET_FORMS = (
    "HOST:PORT, [IPv6]:PORT, ipv4:A.B.C.D:PORT,A.B.C.D:PORT,..., "
    "ipv6:[IPv6]:PORT,[IPv6]:PORT,..., dns:///HOST:PORT, dns://RESOLVER/HOST:PORT, "
    "unix:PATH or unix:///ABSOLUTE/PATH"
)
_TARGET_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def _target_error(why: str) -> _Invalid:
    return _Invalid(f"{why}; use {_TARGET_FORMS}")


def _engine_target(raw: object, from_env: bool) -> object:
    """A gRPC target the facade can dial: one address, a list, a DNS name or a socket."""
    value = _text(raw)
    if not value:
        raise _target_error("must not be empty")
    if any(char.isspace() for char in value) or not value.isascii() or not value.isprintable():
        raise _target_error("must not contain spaces or non-ASCII characters")
    match = _TARGET_SCHEME.match(value)
    scheme = match[1].lower() if match else ""
    rest = value[len(scheme) + 1 :]
    if scheme in ("ipv4", "ipv6"):
        return _address_list(rest, scheme)
    if scheme == "dns":
        return _dns_target(rest)
    if scheme == "unix":
        return _unix_target(rest)
    if "," in value:
        raise _target_error("a list of addresses needs the ipv4: or ipv6: prefix")
    # "localhost:50051" looks like a scheme and a port; "http://..." or "grpc:x:1" not.
    if scheme and (rest.startswith("/") or ":" in rest):
        raise _target_error(f"has unknown scheme {scheme!r}")
    return _part(value)


def _part(text: str, what: str = "") -> str:
    """``text`` as HOST:PORT, the refusal naming the target forms."""
    try:
        _address(port_zero_ok=False)(text, True)
    except _Invalid as exc:
        where = f"{what} {text!r}: " if what else ""
        raise _Invalid(f"{where}{exc}; a target is one of {_TARGET_FORMS}") from None
    return text


def _address_list(rest: str, scheme: str) -> str:
    if not rest:
        raise _target_error(f"{scheme}: needs at least one address")
    for item in rest.split(","):
        if not item:
            raise _target_error(f"{scheme}: has an empty entry (a stray comma)")
        host, sep, port = item.rpartition(":")
        if scheme == "ipv6":
            inside = host[1:-1] if host.startswith("[") and host.endswith("]") else None
            if inside is None or not sep:
                raise _target_error(f"ipv6: entry {item!r} must be [IPv6]:PORT, e.g. [::1]:50051")
            try:
                ipaddress.IPv6Address(inside)
            except ValueError:
                raise _target_error(f"ipv6: entry {item!r} has no valid IPv6 address") from None
        else:
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise _target_error(
                    f"ipv4: entry {item!r} must be A.B.C.D:PORT with an IPv4 address "
                    "(a host name goes in dns:///HOST:PORT)"
                ) from None
        port = port if sep else ""
        if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise _target_error(f"{scheme}: entry {item!r} needs a port between 1 and 65535")
    return f"{scheme}:{rest}"


def _dns_target(rest: str) -> str:
    name = rest
    if rest.startswith("//"):
        authority, slash, name = rest[2:].partition("/")
        if not slash:
            raise _target_error("dns:// needs dns:///HOST:PORT or dns://RESOLVER/HOST:PORT")
        if authority:
            bracketed = authority.startswith("[")
            has_port = "]:" in authority if bracketed else ":" in authority
            _part(authority if has_port else f"{authority}:53", "the DNS resolver")
    if not name:
        raise _target_error("dns: needs HOST:PORT after the scheme")
    _part(name, "dns: name")
    return f"dns:{rest}"


def _unix_target(rest: str) -> str:
    path = rest
    if rest.startswith("//"):
        if not rest.startswith("///"):
            raise _target_error("unix:// needs an absolute path, unix:///run/agentik.sock")
        path = rest[2:]
    if not path or path.endswith("/"):
        raise _target_error("unix: needs the path of a socket file")
    return f"unix:{rest}"


def _store(raw: object, from_env: bool) -> object:
    value = _text(raw)
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _Invalid("must be a URL: memory://, sqlite:///PATH or postgresql://...")
    if scheme == "memory" and rest:
        raise _Invalid("memory:// takes nothing after the scheme")
    if scheme == "sqlite" and (not rest.startswith("/") or rest == "/"):
        raise _Invalid(
            "a SQLite URL needs three slashes and a path: sqlite:///relative.db "
            "or sqlite:////absolute/path.db"
        )
    if scheme not in ("memory", "sqlite", "postgresql", "postgres"):
        raise _Invalid(
            f"has unknown store scheme {scheme!r}; use memory://, sqlite:///PATH, "
            "postgresql:// or postgres://"
        )
    return value


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(text: str) -> str:
    """``text`` as a browser sends it in ``Origin``: lower-case, no default port."""
    if text == "*":
        return text
    example = "an origin is SCHEME://HOST[:PORT], e.g. https://app.example"
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or not re.match(r"^[a-z][a-z0-9+.-]*$", scheme) or not rest:
        raise _Invalid(f"{text!r} is not an origin; {example}")
    host_port, slash, _ = rest.partition("/")
    if slash or "?" in rest or "#" in rest:
        raise _Invalid(f"{text!r} has a path; {example}, without a trailing slash")
    if "@" in host_port:
        raise _Invalid(f"{text!r} has user info; {example}")
    try:
        parts = urlsplit(f"{scheme}://{host_port}")
        port = parts.port
    except ValueError:
        raise _Invalid(f"{text!r} has an invalid port; {example}") from None
    host = parts.hostname or ""
    if ":" in host:
        try:
            host = f"[{ipaddress.IPv6Address(host)}]"
        except ValueError:
            raise _Invalid(f"{text!r} has an invalid IPv6 address; {example}") from None
    elif not _valid_host(host):
        raise _Invalid(f"{text!r} has no valid host; {example}")
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"


def _origins(raw: object, from_env: bool) -> object:
    items = _items(raw, from_env)
    if not isinstance(items, list):
        raise _Invalid(f"must be an array of origins, not {type(raw).__name__}")
    origins: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _Invalid(f"every origin must be a string, not {type(item).__name__}")
        if (origin := _origin(item.strip())) not in origins:
            origins.append(origin)
    if "*" in origins and len(origins) > 1:
        raise _Invalid('"*" already allows every origin; give it alone or list the origins')
    return tuple(origins)


def _skills(raw: object, from_env: bool) -> object:
    if from_env:
        try:
            raw = json.loads(_text(raw))
        except ValueError as exc:
            raise _Invalid(f"must be a JSON array of skill objects ({exc})") from None
    if not isinstance(raw, list):
        raise _Invalid("must be an array of skill tables")
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not all(
            isinstance(item.get(key), str) and item[key] for key in ("id", "name", "description")
        ):
            raise _Invalid(f"skill {index} needs string id, name and description")
    return tuple(dict(item) for item in raw)


def _principal(value: object) -> str:
    if not isinstance(value, str) or not is_valid_principal(value.strip()):
        raise _Invalid(f"principal {value!r} must be {PRINCIPAL_RULE}")
    return value.strip()


def _names(raw: object, from_env: bool) -> object:
    if not isinstance(raw := _items(raw, from_env), list):
        raise _Invalid(f"must be an array of principals, not {type(raw).__name__}")
    return tuple(dict.fromkeys(_principal(item) for item in raw))


_TOKEN = re.compile(r"^[\x21-\x2b\x2d-\x7e]{1,4096}$")
"""Printable ASCII without spaces or commas (the separator of AGENTIK_TOKENS)."""


def _token_entry(principal: object, token: object, number: int) -> TokenEntry:
    name = _principal(principal)
    if not isinstance(token, str) or not token:
        raise _Invalid(f"entry {number}: the token of {name!r} must be a non-empty string")
    if not _TOKEN.match(token):
        raise _Invalid(
            f"entry {number}: the token of {name!r} must be printable ASCII without spaces or "
            "commas"
        )
    return TokenEntry(name, token)


def _tokens(raw: object, from_env: bool) -> object:
    entries: list[TokenEntry] = []
    if from_env:
        for number, item in enumerate((i.strip() for i in _text(raw).split(",")), start=1):
            principal, sep, token = item.partition(":")
            if item and not sep:
                raise _Invalid(f"entry {number} is not PRINCIPAL:TOKEN")
            if item:
                entries.append(_token_entry(principal, token, number))
    elif isinstance(raw, list) and all(isinstance(table, dict) for table in raw):
        for number, table in enumerate(raw, start=1):
            if unknown := sorted(set(table) - {"principal", "token"}):
                raise _Invalid(
                    f"entry {number} has unknown key {unknown[0]!r}; known: principal, token"
                )
            entries.append(_token_entry(table.get("principal"), table.get("token"), number))
    else:
        raise _Invalid("must be an array of tables ([[auth.tokens]])")
    seen: dict[str, str] = {}
    for entry in entries:
        if (other := seen.setdefault(entry.token, entry.principal)) != entry.principal:
            raise _Invalid(f"{other!r} and {entry.principal!r} have the same token")
    return tuple(entries)


_TOOL_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,128}")
_JWT_ALGORITHMS = (
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
    "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip


def _strings(raw: object, from_env: bool, why: str) -> list[str]:
    if not isinstance(raw := _items(raw, from_env), list) or not all(
        isinstance(item, str) for item in raw
    ):
        raise _Invalid(why)
    return raw


def _tool_patterns(raw: object, from_env: bool) -> object:
    """Tool names or globs (``*``, ``?``, ``[...]``), from a list or a comma-separated env."""
    example = 'e.g. ["calculate", "time__*"]'
    items = _strings(raw, from_env, f"must be an array of tool names or globs, {example}")
    for item in items:
        if not _TOOL_PATTERN.fullmatch(item.strip()):
            why = "is not a tool name or glob (letters, digits, _ . - and * ? [ ] !)"
            raise _Invalid(f"{item!r} {why}")
    return tuple(dict.fromkeys(item.strip() for item in items))


def _modalities(raw: object, from_env: bool) -> object:
    """``[llm] input_modalities``: from a list or a comma-separated env."""
    try:
        return check_modalities(_strings(raw, from_env, 'must be an array, e.g. ["text", "image"]'))
    except ValueError as exc:
        raise _Invalid(str(exc)) from None


def _algorithms(raw: object, from_env: bool) -> object:
    for item in (items := _strings(raw, from_env, "must be an array of JWT algorithm names")):
        if item not in _JWT_ALGORITHMS:
            raise _Invalid(f"{item!r} is not a JWT algorithm; known: {', '.join(_JWT_ALGORITHMS)}")
    return tuple(items)


# --- the models ---------------------------------------------------------------------


def setting(default: Any, env: str, parse: Parser, *, flat: str = "", secret: bool = False) -> Any:
    """A TOML key: its default, environment variable, checker and flat name (default: the
    key); a ``secret`` is masked in ``describe`` and kept out of ``repr``."""
    meta = {"env": env, "parse": parse, "flat": flat, "secret": secret}
    return field(default=default, repr=not secret, metadata=meta)


def table(loader: TableLoader, *, flat: str, engine_only: bool = True) -> Any:
    """An array of tables (``[[...]]``), read by ``loader``; no environment variable.
    ``engine_only``: skipped when the web facade loads (``mcp=False``)."""
    return field(default=(), metadata={"table": loader, "flat": flat, "engine_only": engine_only})


def _entries(parse: Callable[..., tuple[Any, ...]], *args: object) -> tuple[Any, ...]:
    """``parse(*args)``, its ``ConfigTableError`` raised as a ``ConfigError``."""
    from agentik.tool_config.tables import ConfigTableError

    try:
        return parse(*args)
    except ConfigTableError as exc:
        raise ConfigError(str(exc)) from None


def _mcp_servers(raw: object, where: str, env: Mapping[str, str]) -> tuple[Any, ...]:
    from agentik.tool_config.mcp import parse_mcp_servers

    return _entries(parse_mcp_servers, raw, where, env)


def _python_tools(raw: object, where: str, env: Mapping[str, str]) -> tuple[Any, ...]:
    from agentik.tool_config.python import parse_python_tools

    return _entries(parse_python_tools, raw, where)


def _agents(
    raw: object, where: str, env: Mapping[str, str], engine: bool = True
) -> tuple[Any, ...]:
    from agentik.tool_config.agents import parse_agents

    return _entries(parse_agents, raw, where, env, engine)


def _agent_name(raw: object, from_env: bool) -> object:
    from agentik.tool_config.tables import NAME

    value = _text(raw)
    if not NAME.match(value) or len(value) > 64:
        raise _Invalid("must be 1 to 64 characters of A-Z a-z 0-9 _ -")
    return value


def _a2a_agents(raw: object, where: str, env: Mapping[str, str]) -> tuple[Any, ...]:
    from agentik.tool_config.a2a import parse_a2a_agents

    return _entries(parse_a2a_agents, raw, where, env)


_POSITIVE = _integer(1)
_SECONDS = _seconds(zero_ok=False)
_SECONDS_OR_ZERO = _seconds(zero_ok=True)
_MiB = 1024 * 1024
_LOG_LEVEL = _choice("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """``[engine]``: the gRPC server, its store and its limits."""

    grpc_addr: str = setting("127.0.0.1:50051", "AGENTIK_GRPC_ADDR", _address(port_zero_ok=True))
    store: str = setting("sqlite:///.agentik/agentik.db", "AGENTIK_STORE", _store)
    max_concurrent_runs: int = setting(512, "AGENTIK_MAX_CONCURRENT_RUNS", _POSITIVE)
    max_message_bytes: int = setting(4 * _MiB, "AGENTIK_MAX_MESSAGE_BYTES", _POSITIVE)
    max_event_bytes: int = setting(
        _MiB, "AGENTIK_MAX_EVENT_BYTES", _bytes(MIN_EVENT_BYTES, MAX_EVENT_BYTES)
    )
    """The largest event, message and page the engine makes or hands out: longer text is
    split into several deltas or clipped with a note (``core.bounds``)."""
    stream_buffer_bytes: int = setting(
        8 * _MiB, "AGENTIK_STREAM_BUFFER_BYTES", _bytes(MIN_EVENT_BYTES, 1 << 40)
    )
    """Stored events kept in memory per session for readers that are behind, and read from
    the store at once per reader: a reader that does not read pins no more."""
    event_retention: float = setting(604800.0, "AGENTIK_EVENT_RETENTION", _SECONDS_OR_ZERO)
    """Seconds to keep a session's events; 0 keeps them forever."""
    shutdown_grace: float = setting(10.0, "AGENTIK_SHUTDOWN_GRACE", _SECONDS_OR_ZERO)
    lease_seconds: float = setting(10.0, "AGENTIK_LEASE_SECONDS", _SECONDS)
    """With a shared store: how soon another engine takes over the runs of one that died."""
    resume_runs: bool = setting(True, "AGENTIK_RESUME_RUNS", _boolean)
    """A run whose engine died goes on from its last checkpoint (on another replica, or
    when a SQLite engine starts again); false: it is closed as interrupted."""
    max_resumes: int = setting(3, "AGENTIK_MAX_RESUMES", _POSITIVE)
    """How often one run may be resumed: past this it stops with ``resume_limit``."""
    workers: int = setting(1, "AGENTIK_ENGINE_WORKERS", _POSITIVE, flat="engine_workers")
    """Engine processes sharing ``grpc_addr``; more than one needs a shared store."""
    max_state_bytes: int = setting(_MiB, "AGENTIK_MAX_STATE_BYTES", _POSITIVE)
    """A session's shared state as compact JSON, at most; patches are bounded by it."""
    store_retry_seconds: float = setting(5.0, "AGENTIK_STORE_RETRY_SECONDS", _SECONDS_OR_ZERO)
    """How long a PostgreSQL store call retries a lost connection before it fails."""
    store_batch_max: int = setting(256, "AGENTIK_STORE_BATCH_MAX", _POSITIVE)
    """PostgreSQL: writes (every run's) the store sends in one transaction, at most."""
    metrics_addr: str = setting("", "AGENTIK_METRICS_ADDR", _optional_address)
    """Where the engine serves Prometheus ``/metrics``; empty: not served."""


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """``[llm]``: the OpenAI-compatible endpoint and the turn's rounds."""

    base_url: str | None = setting(None, "OPENAI_BASE_URL", _http_url, flat="openai_base_url")
    api_key: str | None = setting(
        None, "OPENAI_API_KEY", _secret, flat="openai_api_key", secret=True
    )
    model: str = setting("gpt-4o-mini", "AGENTIK_MODEL", _nonempty)
    system_prompt: str = setting(DEFAULT_SYSTEM_PROMPT, "AGENTIK_SYSTEM_PROMPT", _prompt)
    max_tool_rounds: int = setting(8, "AGENTIK_MAX_TOOL_ROUNDS", _POSITIVE)
    timeout: float = setting(120.0, "AGENTIK_LLM_TIMEOUT", _SECONDS, flat="llm_timeout")
    first_token_timeout: float = setting(
        60.0, "AGENTIK_LLM_FIRST_TOKEN_TIMEOUT", _SECONDS, flat="llm_first_token_timeout"
    )
    max_retries: int = setting(2, "AGENTIK_LLM_MAX_RETRIES", _integer(0), flat="llm_max_retries")
    check_interval: float = setting(
        60.0, "AGENTIK_LLM_CHECK_INTERVAL", _SECONDS_OR_ZERO, flat="llm_check_interval"
    )
    context_tokens: int = setting(0, "AGENTIK_CONTEXT_TOKENS", _integer(0))
    """The model's context window; 0: from its name (``core.context``), else 128,000."""
    reserve_output_tokens: int = setting(0, "AGENTIK_RESERVE_OUTPUT_TOKENS", _integer(0))
    """Tokens of the window kept for the answer; 0: min(4,096, a quarter of the window)."""
    compaction: str = setting("summarize", "AGENTIK_COMPACTION", _choice(*COMPACTION_MODES))
    """How a conversation over the budget is made to fit: summarize | trim | off."""
    input_modalities: tuple[str, ...] = setting(
        ("text", "image"), "AGENTIK_INPUT_MODALITIES", _modalities
    )
    """What the model takes: ``["text", "image"]`` (the default) or ``["text"]`` for a
    text-only model, whose runs then refuse image parts (400 naming the part and agent)."""
    max_media_parts: int = setting(16, "AGENTIK_MAX_MEDIA_PARTS", _POSITIVE)
    """Image parts one run's new messages may hold, at most (their bytes are bounded by
    ``[engine] max_event_bytes`` per message)."""
    """Seconds between checks of the endpoint (``GET /models``); 0: at start only."""


@dataclass(frozen=True, slots=True)
class ToolsSettings:
    """``[tools]`` and ``[[tools.python]]``: what the LLM may call, and how long."""

    timeout: float = setting(30.0, "AGENTIK_TOOL_TIMEOUT", _SECONDS, flat="tool_timeout")
    approval: tuple[str, ...] = setting(
        (), "AGENTIK_TOOLS_APPROVAL", _tool_patterns, flat="tools_approval"
    )
    """Engine tools (names or globs) whose calls wait for a person's approval."""
    idempotent: tuple[str, ...] = setting(
        ("current_time", "calculate"),
        "AGENTIK_TOOLS_IDEMPOTENT",
        _tool_patterns,
        flat="tools_idempotent",
    )
    """Engine tools (names or globs) safe to run twice: a call of one cut by a dead engine
    before its result was stored runs again when the run is resumed."""
    in_doubt: str = setting(
        "ask", "AGENTIK_TOOLS_IN_DOUBT", _choice("ask", "error"), flat="tools_in_doubt"
    )
    """A cut call of any other tool: ``ask`` a person whether to run it again, or give the
    LLM an ``error`` result saying it may or may not have run."""
    ask_user: bool = setting(False, "AGENTIK_TOOLS_ASK_USER", _boolean, flat="tools_ask_user")
    """Offer the LLM the ``ask_user`` tool (a question a person answers)."""
    interrupt_expiry: float = setting(0.0, "AGENTIK_INTERRUPT_EXPIRY", _SECONDS_OR_ZERO)
    max_result_chars: int = setting(
        50_000, "AGENTIK_TOOLS_MAX_RESULT_CHARS", _POSITIVE, flat="tools_max_result_chars"
    )
    """A longer tool result is clipped for the LLM, with a note (the stored one is whole)."""
    """Seconds after which an unanswered interrupt counts as declined; 0: never."""
    python: tuple[PythonToolConfig, ...] = table(
        _python_tools, flat="python_tools", engine_only=False
    )
    """Python functions offered as tools (imported by the engine only)."""


@dataclass(frozen=True, slots=True)
class LogSettings:
    """``[log]``."""

    level: str = setting("INFO", "AGENTIK_LOG_LEVEL", _LOG_LEVEL, flat="log_level")
    format: str = setting("text", "AGENTIK_LOG_FORMAT", _choice("text", "json"), flat="log_format")
    """``text`` (one readable line per record) or ``json`` (one JSON object per line)."""


@dataclass(frozen=True, slots=True)
class WebSettings:
    """``[web]``: the HTTP facade and its gunicorn workers."""

    http_addr: str = setting("127.0.0.1:8000", "AGENTIK_HTTP_ADDR", _address(port_zero_ok=True))
    engine_target: str = setting("", "AGENTIK_ENGINE_TARGET", _engine_target)
    """Where the facade reaches the engine (see above); empty: derived from ``grpc_addr``."""
    workers: int = setting(2, "AGENTIK_WEB_WORKERS", _POSITIVE, flat="web_workers")
    threads: int = setting(64, "AGENTIK_WEB_THREADS", _POSITIVE, flat="web_threads")
    header_timeout: float = setting(
        5.0, "AGENTIK_WEB_HEADER_TIMEOUT", _SECONDS, flat="web_header_timeout"
    )
    """Seconds a request head (request line and headers) has to arrive whole."""
    body_timeout: float = setting(
        15.0, "AGENTIK_WEB_BODY_TIMEOUT", _SECONDS, flat="web_body_timeout"
    )
    """Seconds a request body has to arrive whole, from the end of its head."""
    queue_timeout: float = setting(
        2.0, "AGENTIK_WEB_QUEUE_TIMEOUT", _SECONDS_OR_ZERO, flat="web_queue_timeout"
    )
    """Seconds a whole request may wait for a free thread before it is refused with 503."""
    write_timeout: float = setting(
        60.0, "AGENTIK_WEB_WRITE_TIMEOUT", _SECONDS, flat="web_write_timeout"
    )
    """Seconds an answer may wait for a client that does not read before it is cut."""
    heartbeat_interval: float = setting(15.0, "AGENTIK_HEARTBEAT", _SECONDS)
    max_body_bytes: int = setting(_MiB, "AGENTIK_MAX_BODY_BYTES", _POSITIVE)
    discard_body_bytes: int = setting(
        0, "AGENTIK_WEB_DISCARD_BODY_BYTES", _integer(0), flat="web_discard_body_bytes"
    )
    """A body over ``max_body_bytes`` up to this is read and dropped before the 413
    (0: twice ``max_body_bytes``, at least 4 MiB); a longer one gets the 413 and a close."""
    on_disconnect: str = setting("continue", "AGENTIK_ON_DISCONNECT", _choice("continue", "cancel"))
    stream_reader: str = setting(
        "asyncio",
        "AGENTIK_WEB_STREAM_READER",
        _choice("asyncio", "threads"),
        flat="web_stream_reader",
    )
    """How a worker reads its engine event streams: ``threads``, a relay thread per stream;
    ``asyncio``, one asyncio gRPC loop per worker reading every stream."""
    cors_origins: tuple[str, ...] = setting((), "AGENTIK_CORS_ORIGINS", _origins)
    """Origins a browser page may call the facade from; ``("*",)``: any; empty: none."""


@dataclass(frozen=True, slots=True)
class A2aSettings:
    """``[a2a]``: the agent card, and ``[[a2a.agents]]``, other agents offered as tools."""

    public_url: str = setting("", "AGENTIK_PUBLIC_URL", _optional_http_url)
    """Where peers reach the facade (the card's URL); empty: the request's own URL."""
    grpc_url: str = setting(
        "", "AGENTIK_A2A_GRPC_URL", _optional_public_address, flat="a2a_grpc_url"
    )
    """Where peers reach the engine's A2A gRPC binding (HOST:PORT), listed on the card
    beside JSON-RPC; empty: the card lists no gRPC interface."""
    name: str = setting("agentik", "AGENTIK_AGENT_NAME", _nonempty, flat="agent_name")
    description: str = setting("", "AGENTIK_AGENT_DESCRIPTION", _prompt, flat="agent_description")
    """Empty: a sentence about agentik."""
    version: str = setting("", "AGENTIK_AGENT_VERSION", _prompt, flat="agent_version")
    """Empty: the installed agentik version."""
    skills: tuple[dict[str, Any], ...] | None = setting(
        None, "AGENTIK_AGENT_SKILLS", _skills, flat="agent_skills"
    )
    """The card's skills (``id``, ``name``, ``description``, ...); None: one chat skill.
    A skill with ``extended = true`` is only on the authenticated extended card."""
    card_signing_key: str = setting(
        "", "AGENTIK_A2A_CARD_SIGNING_KEY", _secret_text, flat="a2a_card_signing_key", secret=True
    )
    """The private key the cards are signed with (JWS, A2A §8.4): a PEM file's path or the
    PEM itself (EC P-256/P-384/P-521, RSA or Ed25519); empty: cards go unsigned."""
    agents: tuple[A2aAgentConfig, ...] = table(_a2a_agents, flat="a2a_agents")
    """Also ``AGENTIK_A2A_AGENTS="name=URL,..."``, which replaces the file's list."""


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``[agent]``: the default agent, and ``[[agents]]``, the agents this server serves
    (docs/agents.md)."""

    name: str = setting("agentik", "AGENTIK_DEFAULT_AGENT", _agent_name, flat="default_agent")
    """The agent served when a request names none; an ``[[agents]]`` entry of this name
    is its own settings, else it is the top-level settings alone."""
    max_depth: int = setting(3, "AGENTIK_AGENT_MAX_DEPTH", _POSITIVE, flat="agent_max_depth")
    """How deep agents may delegate to agents (``tools = ["agent:NAME"]``)."""
    agents: tuple[AgentConfig, ...] = table(_agents, flat="agents", engine_only=False)
    """The top-level ``[[agents]]`` tables."""


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """``[auth]``: who may call (docs/security.md) and how much."""

    tokens: tuple[TokenEntry, ...] = setting(
        (), "AGENTIK_TOKENS", _tokens, flat="auth_tokens", secret=True
    )
    """Bearer tokens and their principals; with none (and no JWT key) the server is open.
    In the file, ``${NAME}`` in a token is the environment variable ``NAME``."""
    allow_anonymous: bool = setting(False, "AGENTIK_ALLOW_ANONYMOUS", _boolean)
    """Serve without authentication on an address other than loopback."""
    admins: tuple[str, ...] = setting((), "AGENTIK_ADMINS", _names)
    """Principals that see every session."""
    max_runs_per_caller: int = setting(0, "AGENTIK_MAX_RUNS_PER_CALLER", _integer(0))
    """Runs one principal may have in flight; 0: ``caller_run_share`` decides."""
    caller_run_share: float = setting(0.25, "AGENTIK_CALLER_RUN_SHARE", _share)
    """With authentication on and ``max_runs_per_caller`` 0: the share of
    ``max_concurrent_runs`` one principal may hold, so one cannot take every slot."""
    requests_per_minute: int = setting(0, "AGENTIK_REQUESTS_PER_MINUTE", _integer(0))
    tokens_per_day: int = setting(0, "AGENTIK_TOKENS_PER_DAY", _integer(0))
    """LLM tokens one principal may use per UTC day, counted in the store; 0: no limit."""
    jwt_key_file: str = setting("", "AGENTIK_JWT_KEY_FILE", _prompt)
    jwt_issuer: str = setting("", "AGENTIK_JWT_ISSUER", _prompt)
    jwt_audience: str = setting("", "AGENTIK_JWT_AUDIENCE", _prompt)
    jwt_algorithms: tuple[str, ...] = setting((), "AGENTIK_JWT_ALGORITHMS", _algorithms)


@dataclass(frozen=True, slots=True)
class McpSettings:
    """``[[mcp.servers]]``: MCP servers whose tools the engine offers."""

    servers: tuple[McpServerConfig, ...] = table(_mcp_servers, flat="mcp_servers")


@dataclass(frozen=True, slots=True)
class WebhooksSettings:
    """``[webhooks]``: outgoing webhooks (run webhooks, A2A push) and their delivery
    (docs/webhooks.md)."""

    secret: str = setting(
        "", "AGENTIK_WEBHOOK_SECRET", _webhook_secret, flat="webhook_secret", secret=True
    )
    """The key every webhook is signed with (Standard Webhooks); ``whsec_<base64>`` is
    base64-decoded; empty: requests go unsigned."""
    allow_private: bool = setting(
        False, "AGENTIK_WEBHOOKS_ALLOW_PRIVATE", _boolean, flat="webhooks_allow_private"
    )
    """Allow plain http and loopback, private and link-local addresses (tests, private
    networks); off: https to public addresses only."""
    max_attempts: int = setting(
        8, "AGENTIK_WEBHOOKS_MAX_ATTEMPTS", _POSITIVE, flat="webhooks_max_attempts"
    )
    """Attempts per delivery before it is kept as failed."""
    base_delay: float = setting(
        30.0, "AGENTIK_WEBHOOKS_BASE_DELAY", _SECONDS, flat="webhooks_base_delay"
    )
    """Seconds before the first retry; each next one waits about twice as long (with
    jitter): 8 attempts span about an hour."""
    timeout: float = setting(10.0, "AGENTIK_WEBHOOKS_TIMEOUT", _SECONDS, flat="webhooks_timeout")
    """Seconds one attempt may take, connecting and reading the answer's head together."""
    poll_interval: float = setting(
        1.0, "AGENTIK_WEBHOOKS_POLL_INTERVAL", _SECONDS, flat="webhooks_poll_interval"
    )
    """Seconds between looks for due deliveries when none was due."""
    max_push_configs: int = setting(
        10, "AGENTIK_WEBHOOKS_MAX_PUSH_CONFIGS", _POSITIVE, flat="webhooks_max_push_configs"
    )
    """A2A push notification configs one task may hold."""


_TABLES: dict[str, type[Any]] = {
    "engine": EngineSettings,
    "llm": LlmSettings,
    "tools": ToolsSettings,
    "log": LogSettings,
    "web": WebSettings,
    "a2a": A2aSettings,
    "agent": AgentSettings,
    "auth": AuthSettings,
    "mcp": McpSettings,
    "webhooks": WebhooksSettings,
}


@dataclass(frozen=True, slots=True)
class _Key:
    """One key of one table, from its field's metadata."""

    table: str
    key: str
    flat: str
    meta: Mapping[str, Any]

    @property
    def env(self) -> str:
        return str(self.meta.get("env", ""))

    @property
    def toml_key(self) -> str:
        return f"[{self.table}] {self.key}"

    def parse(self, raw: object, from_env: bool, origin: str) -> object:
        try:
            return self.meta["parse"](raw, from_env)
        except _Invalid as exc:
            shown = "(hidden)" if self.meta["secret"] else repr(raw)
            raise ConfigError(f"invalid {self.flat} (from {origin}): {exc}; got {shown}") from None


_KEYS = [
    _Key(name, f.name, f.metadata["flat"] or f.name, f.metadata)
    for name, model in _TABLES.items()
    for f in fields(model)
]
_FLAT = {key.flat: key for key in _KEYS}
_SETTINGS = [key for key in _KEYS if key.env]


@dataclass(frozen=True, init=False)  # no slots: frozen with slots breaks on non-fields
class Settings:
    """Everything the engine and the web facade are configured with: one model per TOML
    table, read as ``settings.llm.timeout``. The constructor also takes flat names:
    ``Settings(llm_timeout=5.0)`` is ``Settings(llm=LlmSettings(timeout=5.0))``."""

    engine: EngineSettings
    llm: LlmSettings
    tools: ToolsSettings
    log: LogSettings
    web: WebSettings
    a2a: A2aSettings
    agent: AgentSettings
    auth: AuthSettings
    mcp: McpSettings
    webhooks: WebhooksSettings

    def __init__(self, **values: Any) -> None:
        tables = {name: values.pop(name, None) or model() for name, model in _TABLES.items()}
        for flat, value in values.items():
            if (key := _FLAT.get(flat)) is None:
                raise TypeError(f"Settings() got an unexpected keyword argument {flat!r}")
            tables[key.table] = replace(tables[key.table], **{key.key: value})
        if not tables["web"].engine_target:
            target = _target_for(tables["engine"].grpc_addr)
            tables["web"] = replace(tables["web"], engine_target=target)
        llm = tables["llm"]
        _check_window(llm.context_tokens, llm.reserve_output_tokens, "")
        for agent in tables["agent"].agents:
            window = llm.context_tokens if agent.context_tokens is None else agent.context_tokens
            reserve = agent.reserve_output_tokens
            _check_window(
                window,
                llm.reserve_output_tokens if reserve is None else reserve,
                f" of agent {agent.name!r}",
            )
        if tables["auth"].jwt_algorithms and not tables["auth"].jwt_key_file:
            raise ConfigError("jwt_algorithms is set but jwt_key_file is not; set both")
        for name, value in tables.items():
            object.__setattr__(self, name, value)

    @property
    def auth_enabled(self) -> bool:
        """Whether callers must present credentials."""
        return bool(self.auth.tokens or self.auth.jwt_key_file)

    @property
    def runs_per_caller(self) -> int:
        """The runs one principal may have in flight; 0: no limit of its own.

        ``max_runs_per_caller`` when set; else, with authentication on, ``caller_run_share``
        of ``max_concurrent_runs`` (at least 1). Without authentication there is one caller,
        and the engine's own limit is its limit."""
        auth = self.auth
        if auth.max_runs_per_caller or not self.auth_enabled or auth.caller_run_share >= 1:
            return auth.max_runs_per_caller
        return max(1, math.floor(self.engine.max_concurrent_runs * auth.caller_run_share))

    @property
    def request_message_bytes(self) -> int:
        """The largest gRPC request the engine takes and the facade sends:
        ``max_message_bytes``, raised to twice ``max_body_bytes`` when the body limit is
        the larger, so a body the facade accepts is never refused as a gRPC message."""
        return max(self.engine.max_message_bytes, 2 * self.web.max_body_bytes)

    @property
    def discard_body_bytes(self) -> int:
        """A body over the limit up to this size is read and dropped before the 413."""
        return self.web.discard_body_bytes or max(2 * self.web.max_body_bytes, 4 * _MiB)

    def describe(self) -> list[tuple[str, str, str]]:
        """``(setting, env var, value)`` rows for a table; secrets are masked."""
        rows = []
        for key in _SETTINGS:
            value = getattr(getattr(self, key.table), key.key)
            if key.meta["secret"] and value:
                shown = "***"
            elif value is None:
                shown = "(not set)"
            elif isinstance(value, tuple) and all(isinstance(item, str) for item in value):
                shown = ", ".join(value) or "(none)"
            else:
                shown = str(value)
            rows.append((key.flat, key.env, shown))
        return rows


def _check_window(context_tokens: int, reserve_output_tokens: int, whose: str) -> None:
    if 0 < context_tokens < MIN_CONTEXT_TOKENS:
        raise ConfigError(
            f"context_tokens{whose} ({context_tokens}) must be 0 (known for the model's "
            f"name) or at least {MIN_CONTEXT_TOKENS}"
        )
    if context_tokens and reserve_output_tokens >= context_tokens:
        raise ConfigError(
            f"reserve_output_tokens{whose} ({reserve_output_tokens}) must be less than "
            f"context_tokens ({context_tokens}): the request needs room too"
        )


def setting_keys() -> list[tuple[str, str, str]]:
    """``(setting, env var, TOML key)`` for every setting, in documentation order."""
    return [(key.flat, key.env, key.toml_key) for key in _SETTINGS]


def _target_for(listen_addr: str) -> str:
    """The address a client on this host dials to reach ``listen_addr``."""
    host, _, port = listen_addr.rpartition(":")
    return f"{_WILDCARD_HOSTS.get(host, host)}:{port}"


# --- loading --------------------------------------------------------------------------


def _unknown(kind: str, name: str, known: list[str], where: str) -> ConfigError:
    hint = difflib.get_close_matches(name, known, n=1)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(known)}"
    return ConfigError(f"unknown {kind} {name!r} in {where}{suggestion}")


def _read_toml(path: str, origin: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} (from {origin}) does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML: {exc}") from None


def _expand_tokens(raw: object, env: Mapping[str, str], origin: str) -> object:
    """``${NAME}`` in ``[[auth.tokens]]`` tokens, from the environment."""
    if not isinstance(raw, list):
        return raw

    def lookup(match: re.Match[str]) -> str:
        if not (found := env.get(match[1])):
            raise ConfigError(
                f"invalid auth_tokens (from {origin}): a token names the environment "
                f"variable {match[1]!r}, which is unset"
            )
        return found

    return [
        {**item, "token": _ENV_VARIABLE.sub(lookup, item["token"])}
        if isinstance(item, dict) and isinstance(item.get("token"), str)
        else item
        for item in raw
    ]


def _from_toml(
    document: dict[str, Any], path: str, env: Mapping[str, str], engine: bool
) -> dict[str, dict[str, object]]:
    values: dict[str, dict[str, object]] = {}
    for name, entries in document.items():
        if name == "agents":  # the top-level [[agents]], kept as [agent] agents
            values.setdefault("agent", {})["agents"] = _agents(entries, repr(path), env, engine)
            continue
        if name not in _TABLES:
            raise _unknown("section", name, [*_TABLES, "agents"], repr(path))
        if not isinstance(entries, dict):
            raise ConfigError(f"{name!r} in {path!r} must be a table ([{name}])")
        keys = {key.key: key for key in _KEYS if key.table == name}
        for item, raw in entries.items():
            if (key := keys.get(item)) is None:
                shown, known = (
                    (f"mcp.{item}", ["mcp.servers"]) if name == "mcp" else (item, [*keys])
                )
                where = repr(path) if name == "mcp" else f"[{name}] of {path!r}"
                raise _unknown("key", shown, known, where)
            origin = f"{key.toml_key} in {path!r}"
            if "table" in key.meta:
                if key.flat == "agents":
                    raise ConfigError(f"write the agents as [[agents]] tables in {path!r}")
                if engine or not key.meta["engine_only"]:
                    values.setdefault(name, {})[item] = key.meta["table"](raw, repr(path), env)
                continue
            if key.flat == "auth_tokens":
                raw = _expand_tokens(raw, env, origin)
            values.setdefault(name, {})[item] = key.parse(raw, False, origin)
    return values


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    mcp: bool = True,
) -> Settings:
    """Build the settings from defaults, the TOML file (if named) and ``env`` (default
    ``os.environ``); raise ``ConfigError`` for anything unusable.

    ``mcp=False`` (the web facade) skips ``[[mcp.servers]]`` and ``[[a2a.agents]]``: they
    stay empty, and an ``${VAR}`` only the engine's MCP servers or A2A agents need is neither
    expanded nor required."""
    env = os.environ if env is None else env
    values: dict[str, dict[str, object]] = {}
    if path is not None:
        values = _from_toml(
            _read_toml(os.fspath(path), "the path given"), os.fspath(path), env, mcp
        )
    elif file := env.get(CONFIG_ENV):
        values = _from_toml(_read_toml(file, f"env {CONFIG_ENV}"), file, env, mcp)
    for key in _SETTINGS:
        if raw := env.get(key.env):
            values.setdefault(key.table, {})[key.key] = key.parse(raw, True, f"env {key.env}")
    if mcp:  # the engine's remote agents; the facade never calls them
        from agentik.tool_config.a2a import A2A_AGENTS_ENV, parse_a2a_agents_env

        if agents := env.get(A2A_AGENTS_ENV, "").strip():
            values.setdefault("a2a", {})["agents"] = _entries(parse_a2a_agents_env, agents)
    return Settings(**{name: model(**values.get(name, {})) for name, model in _TABLES.items()})


# --- checks before serving --------------------------------------------------------------


def is_loopback(addr: str) -> bool:
    """Whether the listen address ``HOST:PORT`` only accepts connections from this host."""
    host = addr.rpartition(":")[0].strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_taken_address(addr: str, what: str, env: str) -> None:
    """``ConfigError`` naming the setting when ``HOST:PORT`` is already taken (another
    agentik, most likely): found before any server starts, instead of a bind traceback."""
    host, _, port = addr.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return
    host = host.strip("[]")
    probe = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, int(port)))
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise ConfigError(
                f"{addr} is already in use, so the {what} cannot listen there: is another "
                f"agentik running? Stop it, or set {env} to another address"
            ) from None
        # Other failures (a host name that does not resolve here, ...) are the server's to
        # report with its own words.
    finally:
        probe.close()


def refuse_open_exposure(settings: Settings, addr: str, what: str) -> None:
    """``ConfigError`` when ``what`` would listen on ``addr`` beyond loopback with no
    authentication, unless the operator said that is intended."""
    if settings.auth_enabled or settings.auth.allow_anonymous or is_loopback(addr):
        return
    raise ConfigError(
        f"the {what} would listen on {addr} with no authentication: anyone who can reach it "
        'could read and change every conversation. Set AGENTIK_TOKENS="name:token,..." '
        "(or [[auth.tokens]] / jwt_key_file in [auth]), listen on 127.0.0.1, or set "
        "AGENTIK_ALLOW_ANONYMOUS=true if a proxy in front authenticates callers"
    )
