"""Settings for the engine and the web facade: one frozen dataclass per TOML table.

Sources, later wins: the models' defaults; a TOML file (``path``, else ``AGENTIK_CONFIG``; one
named but missing is an error); environment variables (an empty one is unset); the CLIs' flags
(``--config``, ``agentik engine --workers N``). Each field is a key of its table
(:func:`setting`): ``[llm] timeout`` is ``settings.llm.timeout``, env ``AGENTIK_LLM_TIMEOUT``,
setting ``llm_timeout`` in errors; ``[[agents]]`` is ``settings.agent.agents``. One converter,
:func:`_value`, reads every value; why not pydantic: docs/architecture.md ("Settings")."""

from __future__ import annotations

import codecs
import difflib
import ipaddress
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from agentik.addresses import check_address, check_target, dialable, display_url, valid_host
from agentik.ids import PRINCIPAL_RULE, is_valid_principal
from agentik.limits import (
    COMPACTION_MODES,
    MAX_EVENT_BYTES,
    MIN_CONTEXT_TOKENS,
    MIN_EVENT_BYTES,
    check_modalities,
)

CONFIG_ENV = "AGENTIK_CONFIG"
A2A_AGENTS_ENV = "AGENTIK_A2A_AGENTS"
CARD_PATH = "/.well-known/agent-card.json"
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_STRANDED_CALLS = 8
DEFAULT_MAX_RESPONSE_BYTES = 4 * 1024 * 1024
MAX_AGENTS = 256
MAX_PROMPT_FILE_BYTES = 1024 * 1024
DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer clearly and concisely. Use the tools you have "
    "when they help, and say so when you are not sure."
)
NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # a server's or agent's name, part of tool names
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_JWT = (*(f"{k}{n}" for k in ("HS", "RS", "PS", "ES") for n in (256, 384, 512)), "EdDSA")
_BOOLEANS = ("1", "true", "yes", "on", "0", "false", "no", "off")
_WHSEC = r"(?s:(?!whsec_).*)|whsec_(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_WHY_WHSEC = "a secret starting with whsec_ must be base64 after it"
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_HEADER = {"headers": True}  # a table of HTTP headers; ${NAME} is an environment variable
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_KINDS = ("bool", "int", "float", "str", "tuple[str, ...]")
_MiB = 1024 * 1024
_PER_CALL = "seconds per call; None: the engine's [tools] timeout"
T = TypeVar("T")


class ConfigError(Exception):
    """The configuration is unusable; the message says which setting, from where, and why."""

    kind = "configuration error"
    """How a command's one line names it: ``agentik: KIND: MESSAGE``."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One bearer token and the principal it names."""

    principal: str
    token: str = field(repr=False)


def setting(default: Any = MISSING, env: str = "", *, flat: str = "", **meta: Any) -> Any:
    """A key of a table: its default, environment variable, setting name (``flat``, default
    the key) and checks: ``lo``/``hi`` bounds (an int's ``lo`` defaults to 1; a float is
    positive unless ``lo=0``), ``choices``, ``name`` (at most this many of ``[A-Za-z0-9_-]``),
    ``pattern`` (a regular expression the whole string matches, else ``why``), ``each`` (a
    function of each string of an array), ``check`` (a function of the typed value, or of
    ``(raw, from_env)`` for other types), ``noun`` (what an array holds), ``strip=False``,
    ``required`` (no empty string), ``secret`` (masked, not in ``repr``), ``doc`` (if it fits)."""
    meta.update(env=env, flat=flat)
    return field(default=default, repr=not meta.get("secret"), metadata=meta)


def table(reader: Callable[..., tuple[Any, ...]], flat: str, engine_only: bool = True) -> Any:
    """``[[...]]`` read by ``reader(raw, where, env, engine)``; ``engine_only``: facade skips it."""
    return field(default=(), metadata={"table": reader, "flat": flat, "engine_only": engine_only})


def _value(kind: str, meta: Mapping[str, Any], raw: Any, env: bool, entry: bool = False) -> Any:
    """``raw`` (a str if ``env``, else TOML's) as ``kind``, checked by ``meta``; else ValueError."""
    base, check = kind.removesuffix(" | None"), meta.get("check")
    if base not in _KINDS:  # a structured value: its check reads it
        if not check:
            raise TypeError(f"a setting of type {kind} needs a check")
        return check(raw, env)
    name = type(raw).__name__
    if base == "bool":
        text = raw.strip().lower() if env and isinstance(raw, str) else None
        if not isinstance(raw, bool) and text not in _BOOLEANS:
            raise ValueError("must be true or false" + ("" if env else f", not {name}"))
        return raw if isinstance(raw, bool) else text in _BOOLEANS[:4]
    if base in ("int", "float"):
        what = meta.get("what", "an integer" if base == "int" else "a number of seconds")
        number_type = int if base == "int" else float  # TOML's int is a float too
        if not env and (isinstance(raw, bool) or not isinstance(raw, (int, number_type))):
            raise ValueError(f"must be {what}, not {name}")
        try:
            number = number_type(raw.strip() if env else raw)
        except ValueError:
            raise ValueError(f"must be {what}") from None
        lo, hi = meta.get("lo", 1 if base == "int" else None), meta.get("hi")
        if base == "int":
            if hi is not None and not lo <= number <= hi:
                raise ValueError(f"must be between {lo} and {hi} bytes")
            if number < lo:
                raise ValueError("must be positive" if lo == 1 else f"must be at least {lo}")
        elif not math.isfinite(number):
            raise ValueError("must be a finite number")
        elif hi is not None and not 0 < number <= hi:
            raise ValueError(f"must be more than 0 and at most {hi} ({hi} = no limit)")
        elif number < 0 or (number == 0 and lo is None):
            positive = "must be a positive number of seconds" if entry else "must be positive"
            raise ValueError("must not be negative" if lo == 0 else positive)
        return check(number) if check else number
    if base == "str":
        if not isinstance(raw, str):
            raise ValueError(f"must be a string, not {name}")
        text = raw.strip() if meta.get("strip", True) else raw
        if not text.strip() and meta.get("required", entry):
            raise ValueError("must not be empty")
        if choices := meta.get("choices"):
            text = text.upper() if choices[0].isupper() else text.lower()
            if text not in choices:
                raise ValueError(f"must be one of {', '.join(choices)}")
        if not text.strip() and kind != base:
            return None
        if (limit := meta.get("name")) and text and (not NAME.match(text) or len(text) > limit):
            raise ValueError(f"must be 1 to {limit} characters of A-Z a-z 0-9 _ -")
        if (pattern := meta.get("pattern")) and text and not re.fullmatch(pattern, text):
            raise ValueError(meta.get("why", f"must match {pattern}"))
        return check(text) if check and text else text
    items = [i.strip() for i in raw.split(",") if i.strip()] if env else raw
    noun, one, choices = meta.get("noun", "strings"), meta.get("item", "item"), meta.get("choices")
    if not isinstance(items, list):
        raise ValueError(f"must be an array of {noun}, not {name}")
    if odd := [type(item).__name__ for item in items if not isinstance(item, str)]:
        raise ValueError(f"must be an array of {noun}; every {one} must be a string, not {odd[0]}")
    strings = tuple(dict.fromkeys(meta.get("each", str)(item.strip()) for item in items))
    if choices and (bad := [item for item in strings if item not in choices]):
        raise ValueError(f"{bad[0]!r} is not one of {', '.join(choices)}")
    return check(strings) if check else strings


def _url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL")
    return value


def _llm_url(value: str) -> str:
    """An OpenAI-compatible API's base: the engine adds ``/chat/completions`` (and the LLM
    check ``/models``) itself, so a URL of the endpoint would be asked for ``.../chat/
    completions/chat/completions``."""
    _url(value)
    parts = urlsplit(value)
    path = parts.path.rstrip("/")
    for tail in ("/chat/completions", "/completions"):
        if path.endswith(tail):
            base = parts._replace(path=path.removesuffix(tail), query="", fragment="").geturl()
            why = f"must stop before {tail} (the engine adds /chat/completions itself)"
            raise ValueError(f"{why}: use {base!r}")
    return value


def _store(value: str) -> str:
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


def _origin(text: str) -> str:
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


def _origins(origins: tuple[str, ...]) -> tuple[str, ...]:
    if "*" in origins and len(origins) > 1:
        raise ValueError('"*" already allows every origin; give it alone or list the origins')
    return origins


def _skills(raw: object, env: bool) -> tuple[dict[str, Any], ...]:
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


def _principal(value: object) -> str:
    if not isinstance(value, str) or not is_valid_principal(value.strip()):
        raise ValueError(f"principal {value!r} must be {PRINCIPAL_RULE}")
    return value.strip()


def _tokens(raw: object, env: bool) -> tuple[TokenEntry, ...]:
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
        who = _principal(principal)
        if not isinstance(token, str) or not token:
            raise ValueError(f"entry {number}: the token of {who!r} must be a non-empty string")
        if not re.match(r"^[\x21-\x2b\x2d-\x7e]{1,4096}$", token):
            why = "must be printable ASCII without spaces or commas"
            raise ValueError(f"entry {number}: the token of {who!r} {why}")
        if (other := seen.setdefault(token, who)) != who:
            raise ValueError(f"{other!r} and {who!r} have the same token")
        entries.append(TokenEntry(who, token))
    return tuple(entries)


def _pattern(item: str, colon: str = "") -> str:
    """A tool name or glob (``*``, ``?``, ``[...]``; with ``colon``, ``agent:NAME``)."""
    if not re.fullmatch(rf"[A-Za-z0-9_.*?\[\]!{colon}-]{{1,128}}", item):
        why = f"is not a tool name or glob (letters, digits, _ . -{colon and ' :'} * ? [ ] !)"
        raise ValueError(f"{item!r} {why}")
    return item


def unknown_name(kind: str, name: str, known: list[str], where: str) -> ConfigError:
    """``unknown KIND 'NAME' in WHERE`` with the closest known name, or the known ones."""
    hint = difflib.get_close_matches(name, known, n=1)
    tail = f"; did you mean {hint[0]!r}?" if hint else f"; known: {', '.join(known)}"
    return ConfigError(f"unknown {kind} {name!r} in {where}{tail}")


def expand(text: str, env: Mapping[str, str], where: str, empty: bool = True) -> str:
    """Each ``${NAME}`` from ``env``; unset (or empty unless ``empty``): ConfigError(where...)."""

    def lookup(match: re.Match[str]) -> str:
        if (found := env.get(match[1])) is None or not (found or empty):
            raise ConfigError(f"{where}names the environment variable {match[1]!r}, which is unset")
        return found

    return _VARIABLE.sub(lookup, text)


class Entry:
    """One ``[[...]]`` table being read: errors name the entry (its label) and the key."""

    def __init__(self, table: Mapping[str, Any], label: str, env: Mapping[str, str]) -> None:
        self.table, self.label, self.env = table, label, env

    def fail(self, key: str, why: str, shown: object = None) -> ConfigError:
        got = "" if shown is None else f"; got {shown!r}"
        return ConfigError(f"invalid {key} of {self.label}: {why}{got}")

    def name(self, model: type[Any]) -> str:
        """The entry's ``name``, after refusing unknown keys; the label names it from then on."""
        known = [f.name for f in fields(model)]
        if unknown := [key for key in self.table if key not in known]:
            raise unknown_name("key", unknown[0], known, self.label)
        name: str = self.value(model.__dataclass_fields__["name"])
        self.label = f"{self.label} ({name!r})"
        return name

    def read(self, model: type[T], **given: Any) -> T:
        """The entry as ``model``, each field read by its type and metadata; ``given`` as is."""
        values = given if "name" in given else {"name": self.name(model), **given}
        for f in fields(model):  # type: ignore[arg-type]
            if f.name not in values and (value := self.value(f)) is not MISSING:
                values[f.name] = value
        return model(**values)

    def value(self, f: Field[Any]) -> Any:
        raw, meta = self.table.get(f.name), f.metadata
        if raw is None:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"{self.label} needs {f.name!r}")
            return MISSING
        if str(f.type).startswith("dict["):
            return self.mapping(f.name, raw, meta.get("headers", False))
        try:
            value = _value(str(f.type), meta, raw, False, entry=True)
        except ValueError as exc:
            raise self.fail(f.name, str(exc), None if meta.get("secret") else raw) from None
        if meta.get("expand") and isinstance(value, str):
            value = expand(value, self.env, f"invalid {f.name} of {self.label}: ")
        return value

    def mapping(self, key: str, raw: object, headers: bool) -> dict[str, str]:
        if not isinstance(raw, dict):
            raise self.fail(key, f"must be a table of strings, not {type(raw).__name__}")
        result: dict[str, str] = {}
        for name, value in raw.items():
            if not isinstance(value, str):
                raise self.fail(f"{key}.{name}", f"must be a string, not {type(value).__name__}")
            if headers and not _HEADER_NAME.match(name):
                raise self.fail(key, "has a name that is not a valid HTTP header name", name)
            if not headers and (not name or "=" in name or "\0" in name):
                raise self.fail(key, "has an invalid variable name", name)
            result[name] = expand(value, self.env, f"invalid {key}.{name} of {self.label}: ")
            if headers and any(c in result[name] for c in "\r\n\0"):
                raise self.fail(f"{key}.{name}", "must not contain line breaks or NUL")
        return result


def _entries(array: str, read: Callable[[Entry, str, bool], Any]) -> Callable[..., Any]:
    """The reader of ``[[array]]``, called with ``(raw, where, env, engine)`` (``where``: the
    quoted file name): each table read by ``read(entry, where, engine)``; names unique."""

    def reader(raw: object, where: str, env: Mapping[str, str], engine: bool) -> tuple[Any, ...]:
        if not isinstance(raw, list):
            raise ConfigError(f"{array} in {where} must be an array of tables ([[{array}]])")
        if len(raw) > MAX_AGENTS:
            raise ConfigError(f"[[{array}]] in {where}: at most {MAX_AGENTS}, got {len(raw)}")
        labels = [f"[[{array}]] entry {n} in {where}" for n in range(1, len(raw) + 1)]
        if bad := [label for label, t in zip(labels, raw, strict=True) if not isinstance(t, dict)]:
            raise ConfigError(f"{bad[0]} must be a table")
        items = [read(Entry(t, labels[n], env), where, engine) for n, t in enumerate(raw)]
        if array == "mcp.servers":
            return _unique(items, "server", labels)
        return _unique(items, "agent", [f"[[{array}]] in {where}"] * len(items))

    return reader


def _unique(items: list[T], noun: str, at: list[str]) -> tuple[T, ...]:
    names = [getattr(item, "name") for item in items]  # noqa: B009
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ConfigError(f"{at[index]}: the {noun} name {name!r} is used twice")
    return tuple(items)


@dataclass(frozen=True, slots=True)
class McpServerConfig:
    """``[[mcp.servers]]``: an MCP server whose tools the engine offers (docs/mcp.md)."""

    name: str = field(metadata={"name": 32})
    transport: Literal["stdio", "http", "sse"]
    """stdio (``command``, ``args``, ``env``, ``cwd``), http or sse (``url``, ``headers``)."""
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict, repr=False, hash=False)
    cwd: str | None = None
    url: str = setting("", check=_url)
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, metadata=_HEADER)
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    call_timeout: float | None = setting(None, doc=_PER_CALL)
    tools: tuple[str, ...] | None = setting(None, doc="only these of its tools offered; None: all")
    max_message_bytes: int = setting(16 * _MiB, lo=64 * 1024, hi=1 << 30)
    """One message from the server (a stdio line, an HTTP body, an SSE event), at most;
    past it a stdio connection is dropped (and reconnected), an HTTP answer refused."""
    max_tools: int = setting(512, hi=100_000, doc="tools offered; past it the rest are left out")
    max_tool_bytes: int = setting(64 * 1024, lo=1024, hi=16 * _MiB)
    """One tool's description and input schema as JSON, at most; a larger tool is left out."""
    max_progress_events: int = setting(1_000, lo=0, doc="per call; 0: none")
    """Progress events one call streams, at most (one per PROGRESS_EVERY); past it, dropped."""

    @property
    def target(self) -> str:
        """What is launched or contacted, for logs and listings (no secrets)."""
        if self.transport == "stdio":
            return " ".join([self.command, *self.args])
        return display_url(self.url)


def _server(entry: Entry, where: str, engine: bool) -> McpServerConfig:
    """``stdio`` or ``http`` from ``command`` or ``url``; ``${NAME}`` in ``env`` and
    ``headers`` is the engine's environment variable. No request can name a command."""
    table, given, name = entry.table, entry.table.get("transport"), entry.name(McpServerConfig)
    if given is None and ("command" in table) == ("url" in table):
        why = "needs either 'command' (stdio) or 'url' (http, sse), or an explicit 'transport'"
        raise ConfigError(f"{entry.label} {why}")
    transport = ("stdio" if "command" in table else "http") if given is None else given
    if not isinstance(transport, str) or transport.lower() not in ("stdio", "http", "sse"):
        raise entry.fail("transport", "must be one of stdio, http, sse", transport)
    transport = transport.lower()
    for key in ("url", "headers") if transport == "stdio" else ("command", "args", "env", "cwd"):
        if key in table:
            raise entry.fail(key, f"does not apply to the {transport} transport")
    if (needed := "command" if transport == "stdio" else "url") not in table:
        raise ConfigError(f"{entry.label} needs {needed!r}")
    command, args = table.get("command", ""), ()
    if isinstance(command, list) and command and all(isinstance(c, str) and c for c in command):
        command, args = command[0], tuple(command[1:])
    elif transport == "stdio" and not (isinstance(command, str) and command.strip()):
        raise entry.fail("command", "must be a program name or a non-empty array of strings")
    if "\0" in command:
        raise entry.fail("command", "must not contain NUL characters")
    server = entry.read(McpServerConfig, name=name, transport=transport, command=command.strip())
    return replace(server, args=args + server.args)


@dataclass(frozen=True, slots=True)
class A2aAgentConfig:
    """``[[a2a.agents]]``: a remote A2A agent offered to the LLM as a tool (docs/a2a.md)."""

    name: str = field(metadata={"name": 64})
    url: str = setting(check=_url, doc="the agent's base URL (card at CARD_PATH) or the card's")
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, metadata=_HEADER)
    endpoint: str = setting("", check=_url, doc="where calls go; empty: where the card says")
    description: str = setting("", doc="the tool's description; empty: from the card")
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    call_timeout: float | None = setting(None, doc=_PER_CALL)
    max_response_bytes: int = setting(DEFAULT_MAX_RESPONSE_BYTES, lo=1024, hi=1 << 40)
    """The largest answer the engine reads from the agent: a JSON body, or one event of a
    stream; past it the call fails and the remote task is cancelled."""

    @property
    def card_url(self) -> str:
        """Where the card is read: ``url`` itself when it names a ``.json`` file."""
        if urlsplit(self.url).path.endswith(".json"):
            return self.url
        return self.url.rstrip("/") + CARD_PATH

    @property
    def target(self) -> str:
        """The card's URL for logs and listings (no credentials or query)."""
        return display_url(self.card_url)


def parse_a2a_agents_env(value: str) -> tuple[A2aAgentConfig, ...]:
    """``name=URL,name=URL`` from ``AGENTIK_A2A_AGENTS`` (it replaces the file's list)."""
    agents: list[A2aAgentConfig] = []
    for number, item in enumerate((item.strip() for item in value.split(",")), start=1):
        name, equals, url = (part.strip() for part in item.partition("="))
        label = f"item {number} of {A2A_AGENTS_ENV}"
        if item and (not equals or not NAME.match(name) or len(name) > 64):
            why = "must be NAME=URL with a NAME of 1 to 64 characters of A-Z a-z 0-9 _ -"
            raise ConfigError(f"{label} {why}; got {item!r}")
        if item:
            agents.append(Entry({"name": name, "url": url}, label, {}).read(A2aAgentConfig))
    return _unique(agents, "agent", [A2A_AGENTS_ENV] * len(agents))


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """``[[agents]]`` (docs/agents.md); a key left out (None) is [llm]'s, [tools]' or [a2a]'s."""

    name: str = field(metadata={"name": 64})
    description: str = setting("", required=False)
    model: str | None = None
    base_url: str | None = setting(None, check=_llm_url)
    api_key: str | None = setting(None, secret=True, expand=True)
    headers: dict[str, str] = field(default_factory=dict, repr=False, hash=False, metadata=_HEADER)
    system_prompt: str | None = setting(None, doc="or system_prompt_file (relative to the config)")
    tools: tuple[str, ...] | None = setting(None, each=partial(_pattern, colon=":"))
    """Globs over tool names (``agent:NAME`` for a local agent); None: every tool."""
    approval: tuple[str, ...] | None = setting(None, each=partial(_pattern, colon=":"))
    ask_user: bool | None = None
    max_tool_rounds: int | None = None
    context_tokens: int | None = setting(None, lo=0)
    reserve_output_tokens: int | None = setting(None, lo=0)
    compaction: str | None = setting(None, choices=COMPACTION_MODES)
    max_runs: int = setting(0, lo=0)
    skills: tuple[dict[str, Any], ...] | None = field(
        default=None, hash=False, metadata={"check": _skills}
    )
    examples: tuple[str, ...] = ()
    input_modalities: tuple[str, ...] | None = setting(None, check=check_modalities)

    @property
    def own_endpoint(self) -> bool:
        """Whether the agent talks to an LLM endpoint other than ``[llm]``'s."""
        return bool(self.base_url or self.api_key or self.headers)


def _agent(entry: Entry, where: str, engine: bool) -> AgentConfig:
    """The facade (``engine=False``) skips api_key, headers, prompt: needs no engine-only ${VAR}."""
    skipped = ("system_prompt_file",) + (() if engine else ("api_key", "headers", "system_prompt"))
    table = {key: value for key, value in entry.table.items() if key not in skipped}
    agent = Entry(table, entry.label, entry.env).read(AgentConfig, system_prompt=None)
    if not engine:
        return agent
    entry.label = f"{entry.label} ({agent.name!r})"
    text, path = entry.table.get("system_prompt"), entry.table.get("system_prompt_file")
    if text is not None and path is not None:
        raise entry.fail("system_prompt", "give system_prompt or system_prompt_file, not both")
    if path is None:
        if text is not None and not isinstance(text, str):
            raise entry.fail("system_prompt", f"must be a string, not {type(text).__name__}")
        return replace(agent, system_prompt=text)
    if not isinstance(path, str) or not path.strip():
        raise entry.fail("system_prompt_file", "must be the path of a text file", path)
    file = os.path.join(os.path.dirname(where.strip("'\"")), os.path.expanduser(path.strip()))
    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_PROMPT_FILE_BYTES + 1)
        if len(data) > MAX_PROMPT_FILE_BYTES:
            raise entry.fail("system_prompt_file", f"is larger than {MAX_PROMPT_FILE_BYTES} bytes")
        return replace(agent, system_prompt=data.decode("utf-8"))
    except OSError as exc:
        raise entry.fail("system_prompt_file", f"cannot be read ({exc.strerror})", path) from None
    except UnicodeDecodeError:
        raise entry.fail("system_prompt_file", "is not UTF-8 text", path) from None


_agents = _entries("agents", _agent)
_a2a_agents = _entries("a2a.agents", lambda entry, *_: entry.read(A2aAgentConfig))


@dataclass(frozen=True, slots=True)
class PythonToolConfig:
    """``[[tools.python]]``: a Python function as a tool (docs/tools.md); the engine imports it."""

    label: str = setting(doc="``[[tools.python]] entry N`` (1-based), for error messages.")
    function: str = setting(pattern=f"{_DOTTED}:{_DOTTED}", must="'package.module:function'")
    """``package.module:function`` (the part after ``:`` may be dotted, ``Class.method``)."""
    name: str | None = setting(None, name=64, strip=False, must="1 to 64 of A-Z a-z 0-9 _ -")
    description: str | None = setting(None, must="a non-empty string")
    timeout: float | None = setting(None, must="a positive number of seconds", doc=_PER_CALL)
    max_stranded_calls: int = setting(DEFAULT_MAX_STRANDED_CALLS, must="a positive integer")
    """A plain ``def``'s calls still running after their timeout or interrupt (Python cannot
    stop a thread): with that many, a new call is refused, not started (calls in flight when
    a timeout hits them may strand more: the bound is this plus the calls in flight)."""
    directory: str = setting("", doc="the config file's directory (not a key of the table)")
    """Where a module not found on the engine's path is looked for next (appended to
    ``sys.path`` then): a ``my_tools.py`` beside the config file loads as ``my_tools``."""


_NOT_KEYS = ("label", "directory")
"""Fields of :class:`PythonToolConfig` that the reader fills in, not the table."""


def _python_tools(raw: object, where: str, env: Mapping[str, str], engine: bool) -> tuple[Any, ...]:
    """Each key of each table by the converter; a bad one is refused saying what it ``must`` be."""
    if not isinstance(raw, list):
        raise ConfigError(f"tools.python in {where} must be an array of tables ([[tools.python]])")
    keys, tools = [f for f in fields(PythonToolConfig) if f.name not in _NOT_KEYS], []
    known = [f.name for f in keys]
    directory = os.path.abspath(os.path.dirname(where.strip("'\"")))
    for label, table in ((f"[[tools.python]] entry {n}", table) for n, table in enumerate(raw, 1)):
        if not isinstance(table, dict):
            raise ConfigError(f"{label}: must be a table with a 'function' key")
        if unknown := [key for key in table if key not in known]:
            raise ConfigError(f"{label}: unknown key {unknown[0]!r}; known: {', '.join(known)}")
        values: dict[str, Any] = {}
        for f in keys:
            if (value := table.get(f.name)) is not None or f.default is MISSING:
                try:
                    values[f.name] = _value(str(f.type), f.metadata, value, False, entry=True)
                except ValueError:
                    why = f"must be {f.metadata['must']}; got {value!r}"
                    raise ConfigError(f"{label}: {f.name!r} {why}") from None
        tools.append(PythonToolConfig(label, **values, directory=directory))
    return tuple(tools)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """``[engine]``: the gRPC server, its store and its limits."""

    grpc_addr: str = setting("127.0.0.1:50051", check=check_address, required=True)
    store: str = setting("sqlite:///.agentik/agentik.db", check=_store, required=True)
    max_concurrent_runs: int = setting(512)
    max_streams: int = setting(0, lo=0, doc="0: four per run slot (4 x max_concurrent_runs)")
    """Event streams open at once on the engine, every caller's (``Settings.engine_streams``)."""
    max_message_bytes: int = setting(4 * _MiB)
    max_event_bytes: int = setting(_MiB, lo=MIN_EVENT_BYTES, hi=MAX_EVENT_BYTES)
    """The largest event; longer text is split."""
    stream_buffer_bytes: int = setting(8 * _MiB, lo=MIN_EVENT_BYTES, hi=1 << 40)
    """Events kept per session for slow readers."""
    event_retention: float = setting(604800.0, lo=0, doc="0: keep events forever")
    shutdown_grace: float = setting(10.0, lo=0)
    lease_seconds: float = setting(10.0, doc="how soon another engine takes a dead one's runs")
    resume_runs: bool = setting(True, doc="a dead engine's runs go on from their checkpoint")
    max_resumes: int = setting(3, doc="past this a run stops with resume_limit")
    workers: int = setting(1, flat="engine_workers")
    max_state_bytes: int = setting(_MiB, doc="a session's shared state as JSON, at most")
    store_retry_seconds: float = setting(5.0, lo=0)
    store_batch_max: int = setting(256, doc="PostgreSQL writes in one transaction, at most")
    metrics_addr: str = setting("", check=check_address, doc="where /metrics is served; empty: not")
    accept_ahead: int = setting(16, lo=0, hi=1024, doc="calls each method takes ahead; 0: one")
    """Outstanding requests for each gRPC method's next calls beside grpc.aio's one
    (engine_service/accept.py): a burst of calls is taken together, not one per loop turn."""
    gc_threshold: int = setting(10_000, lo=0, hi=1_000_000, doc="0: Python's own collector")
    """New objects between two collections of the youngest generation (agentik/collector.py)."""


@dataclass(frozen=True, slots=True)
class LlmSettings:
    """``[llm]``: the OpenAI-compatible endpoint and the turn's rounds."""

    base_url: str | None = setting(None, "OPENAI_BASE_URL", flat="openai_base_url", check=_llm_url)
    api_key: str | None = setting(None, "OPENAI_API_KEY", flat="openai_api_key", secret=True)
    model: str = setting("gpt-4o-mini", required=True)
    system_prompt: str = setting(DEFAULT_SYSTEM_PROMPT, strip=False)
    max_tool_rounds: int = setting(8)
    timeout: float = setting(120.0, flat="llm_timeout")
    first_token_timeout: float = setting(60.0, flat="llm_first_token_timeout")
    round_timeout: float = setting(1800.0, flat="llm_round_timeout")
    """Seconds one LLM round may take from its request to its last token."""
    max_answer_bytes: int = setting(8 * _MiB, flat="llm_max_answer_bytes", lo=1024)
    """Bytes of one LLM round's text, reasoning and tool calls; the engine stops reading past it."""
    max_tool_calls_per_round: int = setting(128)
    """Tool calls one LLM round may make."""
    max_retries: int = setting(2, flat="llm_max_retries", lo=0)
    check_interval: float = setting(60.0, flat="llm_check_interval", lo=0, doc="0: at start")
    context_tokens: int = setting(0, lo=0, doc="the model's window; 0: from its name")
    reserve_output_tokens: int = setting(0, lo=0, doc="0: min(4,096, a quarter of the window)")
    compaction: str = setting("summarize", choices=COMPACTION_MODES)
    input_modalities: tuple[str, ...] = setting(("text", "image"), check=check_modalities)
    max_media_parts: int = setting(16, doc="image parts one run's new messages may hold")
    max_idle_connections: int = setting(
        256, flat="llm_max_idle_connections", lo=0, doc="0: a new connection per request"
    )
    """Kept-alive connections to one LLM endpoint waiting for the next request."""
    idle_timeout: float = setting(30.0, flat="llm_idle_timeout")
    """Seconds a kept-alive connection waits for a request before it is closed."""


@dataclass(frozen=True, slots=True)
class ToolsSettings:
    """``[tools]`` and ``[[tools.python]]``: what the LLM may call, and how long."""

    timeout: float = setting(30.0, flat="tool_timeout")
    approval: tuple[str, ...] = setting((), flat="tools_approval", each=_pattern)
    """Tools whose calls wait for approval."""
    idempotent: tuple[str, ...] = setting(
        ("current_time", "calculate"), flat="tools_idempotent", each=_pattern
    )
    """Tools safe to run again when a resumed run's call was cut."""
    in_doubt: str = setting("ask", flat="tools_in_doubt", choices=("ask", "error"))
    """A cut call of another tool."""
    ask_user: bool = setting(False, flat="tools_ask_user")
    interrupt_expiry: float = setting(0.0, lo=0, doc="0: interrupts never expire")
    max_result_chars: int = setting(50_000, flat="tools_max_result_chars")
    python: tuple[PythonToolConfig, ...] = table(_python_tools, "python_tools", False)


@dataclass(frozen=True, slots=True)
class LogSettings:
    """``[log]``."""

    level: str = setting("INFO", flat="log_level", choices=_LEVELS)
    format: str = setting("text", flat="log_format", choices=("text", "json"))


@dataclass(frozen=True, slots=True)
class WebSettings:
    """``[web]``: the HTTP facade and its gunicorn workers."""

    http_addr: str = setting("127.0.0.1:8000", check=check_address, required=True)
    engine_target: str = setting("", check=check_target, required=True, doc="what the facade dials")
    workers: int = setting(2, flat="web_workers")
    threads: int = setting(64, flat="web_threads")
    worker_restarts_per_minute: int = setting(10, flat="web_worker_restarts_per_minute")
    """Dead web workers replaced in any 60 s; one more death stops the web (exit 1)."""
    header_timeout: float = setting(5.0, flat="web_header_timeout")
    body_timeout: float = setting(15.0, flat="web_body_timeout")
    queue_timeout: float = setting(2.0, flat="web_queue_timeout", lo=0)
    write_timeout: float = setting(60.0, flat="web_write_timeout")
    heartbeat_interval: float = setting(15.0, "AGENTIK_HEARTBEAT")
    engine_keepalive: float = setting(20.0, flat="web_engine_keepalive", lo=0)
    """Seconds between the pings on a connection to the engine that carries calls; an engine
    that answers none within ``min(10, this)`` more is gone and its streams end (0: none)."""
    max_body_bytes: int = setting(_MiB)
    discard_body_bytes: int = setting(0, flat="web_discard_body_bytes", lo=0)
    """A body an answer did not need (over max_body_bytes: the 413) up to this is read and
    dropped after the answer, keeping the connection."""
    on_disconnect: str = setting("continue", choices=("continue", "cancel"))
    stream_reader: str = setting(
        "asyncio", flat="web_stream_reader", choices=("asyncio", "threads")
    )
    cors_origins: tuple[str, ...] = setting(
        (), each=_origin, check=_origins, noun="origins", item="origin"
    )
    gc_threshold: int = setting(10_000, flat="web_gc_threshold", lo=0, hi=1_000_000)
    """A web worker's collector, as ``[engine] gc_threshold`` is the engine's."""


@dataclass(frozen=True, slots=True)
class A2aSettings:
    """``[a2a]``: the agent card, and ``[[a2a.agents]]``, other agents offered as tools."""

    public_url: str = setting("", check=_url, doc="where peers reach the facade")
    grpc_url: str = setting("", flat="a2a_grpc_url", check=partial(check_address, lowest=1))
    name: str = setting("agentik", flat="agent_name", required=True)
    description: str = setting("", flat="agent_description", strip=False)
    version: str = setting("", flat="agent_version", strip=False)
    skills: tuple[dict[str, Any], ...] | None = setting(None, flat="agent_skills", check=_skills)
    card_signing_key: str = setting("", flat="a2a_card_signing_key", secret=True)
    max_request_id_chars: int = setting(256, flat="a2a_max_request_id_chars")
    """The longest JSON-RPC request ``id`` taken: every answer, each frame of a stream
    too, echoes it."""
    agents: tuple[A2aAgentConfig, ...] = table(_a2a_agents, "a2a_agents")


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``[agent]``: the default agent, and ``[[agents]]`` (docs/agents.md)."""

    name: str = setting("agentik", flat="default_agent", name=64, required=True)
    max_depth: int = setting(3, flat="agent_max_depth")
    agents: tuple[AgentConfig, ...] = table(_agents, "agents", False)


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """``[auth]``: who may call (docs/security.md) and how much."""

    tokens: tuple[TokenEntry, ...] = setting(
        (), "AGENTIK_TOKENS", flat="auth_tokens", check=_tokens, secret=True
    )
    allow_anonymous: bool = setting(False)
    admins: tuple[str, ...] = setting((), each=_principal, noun="principals")
    max_runs_per_caller: int = setting(0, lo=0)
    caller_run_share: float = setting(0.25, hi=1, what="a number between 0 and 1, e.g. 0.25")
    requests_per_minute: int = setting(0, lo=0)
    tokens_per_day: int = setting(0, lo=0, doc="LLM tokens a principal may use a day; 0: any")
    max_streams_per_caller: int = setting(0, lo=0, doc="0: twice the caller's runs in flight")
    """Event streams one principal may hold open at once (``Settings.streams_per_caller``)."""
    max_sessions_per_caller: int = setting(10_000, lo=0, doc="0: no limit")
    """Conversations one principal may have stored (``Settings.sessions_per_caller``)."""
    jwt_key_file: str = setting("", strip=False)
    jwt_issuer: str = setting("", strip=False)
    jwt_audience: str = setting("", strip=False)
    jwt_algorithms: tuple[str, ...] = setting((), choices=_JWT, noun="JWT algorithm names")


@dataclass(frozen=True, slots=True)
class McpSettings:
    """``[[mcp.servers]]``: MCP servers whose tools the engine offers."""

    servers: tuple[McpServerConfig, ...] = table(_entries("mcp.servers", _server), "mcp_servers")


@dataclass(frozen=True, slots=True)
class WebhooksSettings:
    """``[webhooks]``: outgoing webhooks and their delivery (docs/webhooks.md)."""

    secret: str = setting("", flat="webhook_secret", pattern=_WHSEC, why=_WHY_WHSEC, secret=True)
    allow_private: bool = setting(False, flat="webhooks_allow_private")
    max_attempts: int = setting(8, flat="webhooks_max_attempts")
    base_delay: float = setting(30.0, flat="webhooks_base_delay")
    timeout: float = setting(10.0, flat="webhooks_timeout")
    poll_interval: float = setting(1.0, flat="webhooks_poll_interval")
    max_push_configs: int = setting(10, flat="webhooks_max_push_configs")


@dataclass(frozen=True, slots=True)
class Settings:
    """What the engine and the facade are configured with: a model per table (``settings.llm``)."""

    engine: EngineSettings = field(default_factory=EngineSettings)
    llm: LlmSettings = field(default_factory=LlmSettings)
    tools: ToolsSettings = field(default_factory=ToolsSettings)
    log: LogSettings = field(default_factory=LogSettings)
    web: WebSettings = field(default_factory=WebSettings)
    a2a: A2aSettings = field(default_factory=A2aSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    webhooks: WebhooksSettings = field(default_factory=WebhooksSettings)

    def __post_init__(self) -> None:
        if not self.web.engine_target:  # a client on this host dials grpc_addr
            target = dialable(self.engine.grpc_addr)
            object.__setattr__(self, "web", replace(self.web, engine_target=target))
        llm, agents = self.llm, self.agent.agents
        for whose, window, reserve in [  # the model's window, then each agent's (None: llm's)
            ("", llm.context_tokens, llm.reserve_output_tokens),
            *((f" of agent {a.name!r}", a.context_tokens, a.reserve_output_tokens) for a in agents),
        ]:
            window = llm.context_tokens if window is None else window
            reserve = llm.reserve_output_tokens if reserve is None else reserve
            if 0 < window < MIN_CONTEXT_TOKENS:
                why = f"must be 0 (known for the model's name) or at least {MIN_CONTEXT_TOKENS}"
                raise ConfigError(f"context_tokens{whose} ({window}) {why}")
            if window and reserve >= window:
                why = f"must be less than context_tokens ({window}): the request needs room too"
                raise ConfigError(f"reserve_output_tokens{whose} ({reserve}) {why}")
        if self.auth.jwt_algorithms and not self.auth.jwt_key_file:
            raise ConfigError("jwt_algorithms is set but jwt_key_file is not; set both")

    @property
    def auth_enabled(self) -> bool:
        """Whether callers must present credentials."""
        return bool(self.auth.tokens or self.auth.jwt_key_file)

    @property
    def runs_per_caller(self) -> int:
        """Runs one principal may have in flight (0: no own limit): max_runs_per_caller if set,
        else, with authentication on, caller_run_share of max_concurrent_runs (at least 1)."""
        auth = self.auth
        if auth.max_runs_per_caller or not self.auth_enabled or auth.caller_run_share >= 1:
            return auth.max_runs_per_caller
        return max(1, math.floor(self.engine.max_concurrent_runs * auth.caller_run_share))

    @property
    def engine_streams(self) -> int:
        """Event streams open at once on the engine: max_streams, or (0) four per run slot."""
        return self.engine.max_streams or 4 * self.engine.max_concurrent_runs

    @property
    def streams_per_caller(self) -> int:
        """Event streams one principal may hold open (0: no own limit): with authentication,
        max_streams_per_caller, or (0) twice the runs it may have in flight (0 when those
        have no limit of their own); without, one caller: the engine's limit is its own."""
        if not self.auth_enabled:
            return 0
        return self.auth.max_streams_per_caller or 2 * self.runs_per_caller

    @property
    def sessions_per_caller(self) -> int:
        """Conversations one principal may have stored (0: no limit): with authentication,
        max_sessions_per_caller; without, there is one caller, and no limit."""
        return self.auth.max_sessions_per_caller if self.auth_enabled else 0

    @property
    def request_message_bytes(self) -> int:
        """Largest gRPC request: max_message_bytes, at least twice max_body_bytes: bodies fit."""
        return max(self.engine.max_message_bytes, 2 * self.web.max_body_bytes)

    @property
    def discard_body_bytes(self) -> int:
        """A body an answer did not need, up to this size, is read and dropped after it."""
        return self.web.discard_body_bytes or max(2 * self.web.max_body_bytes, 4 * _MiB)


@dataclass(frozen=True, slots=True)
class _Key:
    """One key of one table, from its field."""

    table: str
    key: str
    kind: str
    meta: Mapping[str, Any]

    @property
    def flat(self) -> str:
        return str(self.meta["flat"] or self.key)

    @property
    def env(self) -> str:
        return str(self.meta.get("env") or f"AGENTIK_{self.flat.upper()}")

    def parse(self, raw: object, env: bool, origin: str) -> object:
        try:
            return _value(self.kind, self.meta, raw, env)
        except ValueError as exc:
            shown = "(hidden)" if self.meta.get("secret") else repr(raw)
            raise ConfigError(f"invalid {self.flat} (from {origin}): {exc}; got {shown}") from None


_TABLES: dict[str, type[Any]] = {f.name: f.default_factory for f in fields(Settings)}  # type: ignore[misc]
_KEYS = [_Key(t, f.name, str(f.type), f.metadata) for t, m in _TABLES.items() for f in fields(m)]
_SETTINGS = [key for key in _KEYS if "table" not in key.meta]
_Values = dict[str, dict[str, object]]  # {table: {key: value}}


def setting_env_names() -> list[str]:
    """The environment variable of every setting, and ``AGENTIK_CONFIG``'s and
    ``AGENTIK_A2A_AGENTS``' (the file, and the remote agents as ``NAME=URL,...``)."""
    return [CONFIG_ENV, A2A_AGENTS_ENV, *(key.env for key in _SETTINGS)]


def _from_toml(path: str, origin: str, env: Mapping[str, str], engine: bool) -> _Values:
    """The file's values, ``{table: {key: value}}``, each read and checked."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.loads(_text(handle.read(), path))
    except FileNotFoundError:
        raise ConfigError(f"config file {path!r} (from {origin}) does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML: {exc}") from None
    values: _Values = {}
    for name, entries in document.items():
        if name == "agents":  # the top-level [[agents]], kept as [agent] agents
            values.setdefault("agent", {})["agents"] = _agents(entries, repr(path), env, engine)
            continue
        tables = isinstance(entries, list) and all(isinstance(t, dict) for t in entries)
        if name not in _TABLES and not isinstance(entries, dict) and not tables:
            raise _outside_tables(name, path)
        if name not in _TABLES:
            raise unknown_name("section", name, [*_TABLES, "agents"], repr(path))
        if not isinstance(entries, dict):
            raise ConfigError(f"{name!r} in {path!r} must be a table ([{name}])")
        keys = {key.key: key for key in _KEYS if key.table == name}
        for item, raw in entries.items():
            if (key := keys.get(item)) is None:
                if name == "mcp":
                    raise unknown_name("key", f"mcp.{item}", ["mcp.servers"], repr(path))
                raise unknown_name("key", item, [*keys], f"[{name}] of {path!r}")
            origin = f"[{name}] {item} in {path!r}"
            if reader := key.meta.get("table"):
                if key.flat == "agents":
                    raise ConfigError(f"write the agents as [[agents]] tables in {path!r}")
                if engine or not key.meta["engine_only"]:
                    values.setdefault(name, {})[item] = reader(raw, repr(path), env, engine)
                continue
            if key.flat == "auth_tokens" and isinstance(raw, list):  # ${NAME} in the tokens
                where = f"invalid auth_tokens (from {origin}): a token "
                for t in raw:
                    if isinstance(t, dict) and isinstance(t.get("token"), str):
                        t["token"] = expand(t["token"], env, where, empty=False)
            values.setdefault(name, {})[item] = key.parse(raw, False, origin)
    return values


def _text(data: bytes, path: str) -> str:
    """The file's bytes as text: UTF-8, a leading byte-order mark (Windows editors write
    one) dropped; anything else is a ConfigError naming the encoding to save it in."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        why = 'it is UTF-16 (Windows Notepad\'s "Unicode")'
        raise ConfigError(f"config file {path!r} is not UTF-8 text: {why}; save it as UTF-8")
    try:
        return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")
    except UnicodeDecodeError as exc:
        at = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        why = f"is not UTF-8 text ({at}); save it as UTF-8"
        raise ConfigError(f"config file {path!r} {why}") from None


def _outside_tables(key: str, path: str) -> ConfigError:
    """A ``key = value`` above every ``[table]`` line: the tables that have such a key."""
    keys = [k for k in _KEYS if "table" not in k.meta]
    owners = [f"[{k.table}] {k.key}" for k in keys if k.key == key]
    if not owners:
        close = difflib.get_close_matches(key, sorted({k.key for k in keys}), n=1)
        owners = [f"[{k.table}] {k.key}" for k in keys if close and k.key == close[0]]
    hint = f"did you mean {' or '.join(owners)}?" if owners else "put it under its table's line"
    return ConfigError(f"{key!r} in {path!r} is outside any table: {hint}")


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    mcp: bool = True,
) -> Settings:
    """The settings from defaults, the TOML file (if named) and ``env`` (default os.environ), or a
    ConfigError. ``mcp=False`` (the web facade) skips [[mcp.servers]], [[a2a.agents]] and the
    agents' secrets: an ``${VAR}`` only the engine needs is neither expanded nor required."""
    env = os.environ if env is None else env
    values: _Values = {}
    if path is not None:
        values = _from_toml(os.fspath(path), "the path given", env, mcp)
    elif file := env.get(CONFIG_ENV):
        values = _from_toml(file, f"env {CONFIG_ENV}", env, mcp)
    for key in _SETTINGS:
        if raw := env.get(key.env):
            values.setdefault(key.table, {})[key.key] = key.parse(raw, True, f"env {key.env}")
    if mcp and (agents := env.get(A2A_AGENTS_ENV, "").strip()):  # the facade calls none
        values.setdefault("a2a", {})["agents"] = parse_a2a_agents_env(agents)
    return Settings(**{name: model(**values.get(name, {})) for name, model in _TABLES.items()})
