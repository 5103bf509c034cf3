"""Settings for the engine and the web facade: defaults, a TOML file, then the environment.

Sources, later wins:

1. the defaults below;
2. a TOML file, if one is named: the ``path`` argument, else ``AGENTIK_CONFIG``. A file
   named but missing is an error; with neither, no file is read;
3. environment variables. An empty variable counts as unset.

Every value is checked; a bad one raises :class:`ConfigError` naming the setting, where
it came from (env var or TOML key) and the value. Unknown TOML sections and keys are
errors too, so a typo never silently falls back to a default.

TOML layout (every key optional)::

    [engine]
    grpc_addr = "127.0.0.1:50051"          # AGENTIK_GRPC_ADDR
    store = "sqlite:///.agentik/agentik.db"  # AGENTIK_STORE: memory://, sqlite:///PATH,
                                           #   postgresql://... or postgres://...
    max_concurrent_runs = 512              # AGENTIK_MAX_CONCURRENT_RUNS
    max_message_bytes = 4194304            # AGENTIK_MAX_MESSAGE_BYTES (largest gRPC request)
    max_event_bytes = 1048576              # AGENTIK_MAX_EVENT_BYTES: largest event, message
                                           #   and page the engine hands out (16 KiB..3 MiB)
    stream_buffer_bytes = 8388608          # AGENTIK_STREAM_BUFFER_BYTES: stored events kept in
                                           #   memory per session, and read at once per reader
    event_retention = 604800.0             # AGENTIK_EVENT_RETENTION seconds, 0 = forever
    shutdown_grace = 10.0                  # AGENTIK_SHUTDOWN_GRACE seconds
    lease_seconds = 10.0                   # AGENTIK_LEASE_SECONDS: with PostgreSQL, a dead
                                           #   engine's runs are closed by another within this
    workers = 1                            # AGENTIK_ENGINE_WORKERS: engine processes on
                                           #   grpc_addr (SO_REUSEPORT); more than 1 needs
                                           #   a PostgreSQL store and a fixed port
    max_state_bytes = 1048576              # AGENTIK_MAX_STATE_BYTES: a session's shared state
                                           #   as JSON, at most (every state and patch)
    store_retry_seconds = 5.0              # AGENTIK_STORE_RETRY_SECONDS: how long a
                                           #   PostgreSQL call retries a lost connection

    [llm]
    base_url = "https://api.openai.com/v1"  # OPENAI_BASE_URL (unset: the client's default)
    api_key = "..."                        # OPENAI_API_KEY (better kept in the environment)
    model = "gpt-4o-mini"                  # AGENTIK_MODEL
    system_prompt = "..."                  # AGENTIK_SYSTEM_PROMPT ("" = none)
    max_tool_rounds = 8                    # AGENTIK_MAX_TOOL_ROUNDS
    timeout = 120.0                        # AGENTIK_LLM_TIMEOUT seconds, whole request
    first_token_timeout = 60.0             # AGENTIK_LLM_FIRST_TOKEN_TIMEOUT seconds
    max_retries = 2                        # AGENTIK_LLM_MAX_RETRIES
    check_interval = 60.0                  # AGENTIK_LLM_CHECK_INTERVAL seconds between
                                           #   GET /models checks (0 = at start only)
    context_tokens = 0                     # AGENTIK_CONTEXT_TOKENS: the model's window
                                           #   (0 = known for the model's name, else 128000)
    reserve_output_tokens = 0              # AGENTIK_RESERVE_OUTPUT_TOKENS kept for the
                                           #   answer (0 = min(4096, window / 4))
    compaction = "summarize"               # AGENTIK_COMPACTION: summarize | trim | off

    [tools]
    timeout = 30.0                         # AGENTIK_TOOL_TIMEOUT seconds per tool call
    approval = ["calculate", "time__*"]    # AGENTIK_TOOLS_APPROVAL="calculate,time__*":
                                           #   engine tools whose calls wait for a person
    ask_user = true                        # AGENTIK_TOOLS_ASK_USER: offer the LLM ask_user
    max_result_chars = 50000               # AGENTIK_TOOLS_MAX_RESULT_CHARS: longer tool
                                           #   results are clipped for the LLM (kept whole)
    interrupt_expiry = 0.0                 # AGENTIK_INTERRUPT_EXPIRY seconds until an
                                           #   unanswered request counts as declined (0 = never)

    metrics_addr = "127.0.0.1:9464"        # AGENTIK_METRICS_ADDR: Prometheus /metrics of
                                           #   the engine ("" = off, the default)

    [log]
    level = "INFO"                         # AGENTIK_LOG_LEVEL
    format = "text"                        # AGENTIK_LOG_FORMAT: text | json (JSON lines)

    [auth]                                 # who may call; docs/security.md
    allow_anonymous = false                # AGENTIK_ALLOW_ANONYMOUS: no tokens off loopback
    admins = ["ops"]                       # AGENTIK_ADMINS="ops,root": see every session
    max_runs_per_caller = 0                # AGENTIK_MAX_RUNS_PER_CALLER (0 = caller_run_share)
    caller_run_share = 0.25                # AGENTIK_CALLER_RUN_SHARE: with authentication and
                                           #   no max_runs_per_caller, the share of
                                           #   max_concurrent_runs one principal may hold
                                           #   (1 = no limit of its own)
    requests_per_minute = 0                # AGENTIK_REQUESTS_PER_MINUTE per principal (0 = none)
    jwt_key_file = "/etc/agentik/jwt.pem"  # AGENTIK_JWT_KEY_FILE: PEM public key or HMAC secret
    jwt_issuer = "https://issuer.example"  # AGENTIK_JWT_ISSUER ("" = not checked)
    jwt_audience = "agentik"               # AGENTIK_JWT_AUDIENCE ("" = not checked)
    jwt_algorithms = ["RS256"]             # AGENTIK_JWT_ALGORITHMS (default by key type)
    [[auth.tokens]]                        # AGENTIK_TOKENS="alice:tokenA,bob:tokenB"
    principal = "alice"
    token = "${ALICE_TOKEN}"               # ${NAME}: from the environment

    [web]
    http_addr = "127.0.0.1:8000"           # AGENTIK_HTTP_ADDR
    engine_target = "127.0.0.1:50051"      # AGENTIK_ENGINE_TARGET (unset: from grpc_addr);
                                           #   any gRPC target, see "Engine targets" below
    workers = 2                            # AGENTIK_WEB_WORKERS
    threads = 64                           # AGENTIK_WEB_THREADS
    header_timeout = 5.0                   # AGENTIK_WEB_HEADER_TIMEOUT seconds for a whole
                                           #   request head (request line and headers)
    body_timeout = 15.0                    # AGENTIK_WEB_BODY_TIMEOUT seconds for a whole body
    queue_timeout = 2.0                    # AGENTIK_WEB_QUEUE_TIMEOUT seconds a request may
                                           #   wait for a free thread before a 503
    write_timeout = 60.0                   # AGENTIK_WEB_WRITE_TIMEOUT seconds an answer may
                                           #   wait for a client that does not read
    heartbeat_interval = 15.0              # AGENTIK_HEARTBEAT seconds
    max_body_bytes = 1048576               # AGENTIK_MAX_BODY_BYTES
    on_disconnect = "continue"             # AGENTIK_ON_DISCONNECT: continue | cancel
    cors_origins = ["https://app.example"] # AGENTIK_CORS_ORIGINS="https://a,https://b"
                                           #   ([] = no cross-origin access; ["*"] = any)

    [a2a]                                  # the A2A agent card
    public_url = "https://agent.example"   # AGENTIK_PUBLIC_URL ("" = the request's URL)
    name = "agentik"                       # AGENTIK_AGENT_NAME
    description = "..."                    # AGENTIK_AGENT_DESCRIPTION
    version = "1.2.3"                      # AGENTIK_AGENT_VERSION ("" = agentik's version)
    [[a2a.skills]]                         # AGENTIK_AGENT_SKILLS (a JSON array)
    id = "chat"
    name = "Chat"
    description = "..."
    [[a2a.agents]]                         # other A2A agents, offered to the LLM as tools;
    name = "research"                      #   AGENTIK_A2A_AGENTS="research=https://host/,..."
    url = "https://research.example/"      #   (replaces the file's list); keys: engine_service/
                                           #   tools/a2a_config.py and docs/tools.md (engine only)

    [[mcp.servers]]                        # one table per MCP server (no env var);
    name = "time"                          #   every key is described in
    command = "mcp-server-time"            #   engine_service/tools/mcp_config.py and docs/mcp.md
                                           #   (read by the engine only: the web facade
                                           #   loads with mcp=False and skips this table)

    [[tools.python]]                       # one table per Python function offered as a tool
    function = "my_tools:forecast"         #   (no env var); keys: engine_service/tools/
    timeout = 10.0                         #   python_config.py and docs/tools.md

Engine targets: ``engine_target`` is where the facade dials the engine, as a gRPC target.
With several engines behind one facade, the facade balances calls over every address the
target names (round robin) and retries the safe reads on another one:

- ``HOST:PORT`` or ``[IPv6]:PORT``: one address (a host name is resolved through DNS,
  and every address it resolves to is used);
- ``ipv4:A.B.C.D:PORT,A.B.C.D:PORT,...``: a fixed list of IPv4 addresses;
- ``ipv6:[IPv6]:PORT,[IPv6]:PORT,...``: a fixed list of IPv6 addresses;
- ``dns:///HOST:PORT`` (or ``dns:HOST:PORT``): every address of a DNS name, re-resolved
  when connections fail; ``dns://RESOLVER[:PORT]/HOST:PORT`` asks that DNS server;
- ``unix:PATH`` or ``unix:///ABSOLUTE/PATH``: a Unix domain socket.

Every form needs its port (no implicit 443); anything else is refused with the forms above.
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
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from engine_service.core.bounds import MAX_EVENT_BYTES, MIN_EVENT_BYTES
from engine_service.core.caller import PRINCIPAL_RULE, is_valid_principal
from engine_service.core.context import (
    COMPACTION_MODES,
    MIN_CONTEXT_TOKENS,
    ContextLimits,
    default_window,
)

if TYPE_CHECKING:  # imported when used: the web facade never loads engine_service.tools
    from engine_service.tools.a2a_config import A2aAgentConfig
    from engine_service.tools.mcp_config import McpServerConfig
    from engine_service.tools.python_config import PythonToolConfig

__all__ = [
    "ConfigError",
    "Settings",
    "TokenEntry",
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

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_ON_DISCONNECT = ("continue", "cancel")
_LOG_FORMATS = ("text", "json")
_HOSTNAME = re.compile(r"^[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,251}[A-Za-z0-9_])?$")
_ENV_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}


class ConfigError(Exception):
    """The configuration is unusable; the message says which setting, from where, and why."""


@dataclass(frozen=True, slots=True)
class TokenEntry:
    """One bearer token and the principal it names."""

    principal: str
    token: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything the engine and the web facade are configured with."""

    grpc_addr: str = "127.0.0.1:50051"
    store: str = "sqlite:///.agentik/agentik.db"
    openai_base_url: str | None = None
    openai_api_key: str | None = field(default=None, repr=False)
    model: str = "gpt-4o-mini"
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    max_tool_rounds: int = 8
    llm_timeout: float = 120.0
    llm_first_token_timeout: float = 60.0
    llm_max_retries: int = 2
    llm_check_interval: float = 60.0
    """Seconds between checks of the LLM endpoint (``GET /models``); 0: at start only."""
    context_tokens: int = 0
    """The model's context window; 0: from its name (``core.context``), else 128,000."""
    reserve_output_tokens: int = 0
    """Tokens of the window kept for the answer; 0: min(4,096, a quarter of the window)."""
    compaction: str = "summarize"
    """How a conversation over the budget is made to fit: summarize | trim | off."""
    tools_max_result_chars: int = 50_000
    """A longer tool result is clipped for the LLM, with a note (the stored one is whole)."""
    tool_timeout: float = 30.0
    tools_approval: tuple[str, ...] = ()
    """Engine tools (names or globs) whose calls wait for a person's approval."""
    tools_ask_user: bool = False
    """Offer the LLM the ``ask_user`` tool (a question a person answers)."""
    interrupt_expiry: float = 0.0
    """Seconds after which an unanswered interrupt counts as declined; 0: never."""
    max_concurrent_runs: int = 512
    event_retention: float = 604800.0
    """Seconds to keep a session's events; 0 keeps them forever."""
    shutdown_grace: float = 10.0
    lease_seconds: float = 10.0
    """With a shared store: how soon another engine closes the runs of one that died."""
    engine_workers: int = 1
    """Engine processes sharing ``grpc_addr``; more than one needs a shared store."""
    max_message_bytes: int = 4 * 1024 * 1024
    max_state_bytes: int = 1024 * 1024
    """A session's shared state as compact JSON, at most; patches are bounded by it."""
    store_retry_seconds: float = 5.0
    """How long a PostgreSQL store call retries a lost connection before it fails."""
    max_event_bytes: int = 1024 * 1024
    """The largest event, message and page the engine makes or hands out: longer text is
    split into several deltas or clipped with a note (``core.bounds``)."""
    stream_buffer_bytes: int = 8 * 1024 * 1024
    """Stored events kept in memory per session for readers that are behind, and read
    from the store at once per reader: a reader that does not read pins no more."""
    log_level: str = "INFO"
    log_format: str = "text"
    """``text`` (one readable line per record) or ``json`` (one JSON object per line)."""
    metrics_addr: str = ""
    """Where the engine serves Prometheus ``/metrics``; empty: not served."""
    http_addr: str = "127.0.0.1:8000"
    engine_target: str = ""
    """Where the web facade reaches the engine; empty means derived from ``grpc_addr``."""
    web_workers: int = 2
    web_threads: int = 64
    web_header_timeout: float = 5.0
    """Seconds a request head (request line and headers) has to arrive whole."""
    web_body_timeout: float = 15.0
    """Seconds a request body has to arrive whole, from the end of its head."""
    web_queue_timeout: float = 2.0
    """Seconds a whole request may wait for a free thread before it is refused with 503."""
    web_write_timeout: float = 60.0
    """Seconds an answer may wait for a client that does not read before it is cut."""
    heartbeat_interval: float = 15.0
    max_body_bytes: int = 1024 * 1024
    on_disconnect: str = "continue"
    cors_origins: tuple[str, ...] = ()
    """Origins a browser page may call the facade from; ``("*",)``: any; empty: none."""
    public_url: str = ""
    """Where peers reach the facade (the A2A card's URL); empty: the request's own URL."""
    agent_name: str = "agentik"
    agent_description: str = ""
    """Empty: a sentence about agentik."""
    agent_version: str = ""
    """Empty: the installed agentik version."""
    agent_skills: tuple[dict[str, Any], ...] | None = None
    """The A2A card's skills (``id``, ``name``, ``description``, ...); None: one chat skill."""
    auth_tokens: tuple[TokenEntry, ...] = ()
    """Bearer tokens and their principals; with none (and no JWT key) the server is open."""
    allow_anonymous: bool = False
    """Serve without authentication on an address other than loopback."""
    admins: tuple[str, ...] = ()
    """Principals that see every session."""
    max_runs_per_caller: int = 0
    """Runs one principal may have in flight; 0: ``caller_run_share`` decides."""
    caller_run_share: float = 0.25
    """With authentication on and ``max_runs_per_caller`` 0: the share of
    ``max_concurrent_runs`` one principal may hold, so one cannot take every slot."""
    requests_per_minute: int = 0
    jwt_key_file: str = ""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_algorithms: tuple[str, ...] = ()
    mcp_servers: tuple[McpServerConfig, ...] = ()
    """The ``[[mcp.servers]]`` entries of the TOML file, validated."""
    python_tools: tuple[PythonToolConfig, ...] = ()
    """The ``[[tools.python]]`` entries of the TOML file (imported by the engine only)."""
    a2a_agents: tuple[A2aAgentConfig, ...] = ()
    """Remote A2A agents offered as tools: ``[[a2a.agents]]`` or ``AGENTIK_A2A_AGENTS``
    (read by the engine only)."""

    def __post_init__(self) -> None:
        if not self.engine_target:
            object.__setattr__(self, "engine_target", _target_for(self.grpc_addr))
        if self.jwt_algorithms and not self.jwt_key_file:
            raise ConfigError("jwt_algorithms is set but jwt_key_file is not; set both")
        if 0 < self.context_tokens < MIN_CONTEXT_TOKENS:
            raise ConfigError(
                f"context_tokens ({self.context_tokens}) must be 0 (known for the model's "
                f"name) or at least {MIN_CONTEXT_TOKENS}"
            )
        if self.context_tokens and self.reserve_output_tokens >= self.context_tokens:
            raise ConfigError(
                f"reserve_output_tokens ({self.reserve_output_tokens}) must be less than "
                f"context_tokens ({self.context_tokens}): the request needs room too"
            )

    @property
    def context(self) -> ContextLimits:
        """The model's context budget (``core.context``)."""
        window = self.context_tokens or default_window(self.model)
        return ContextLimits(
            window=window,
            reserve_output=min(self.reserve_output_tokens, window - 1),
            compaction=self.compaction,
            max_result_chars=self.tools_max_result_chars,
        )

    @property
    def auth_enabled(self) -> bool:
        """Whether callers must present credentials."""
        return bool(self.auth_tokens or self.jwt_key_file)

    @property
    def runs_per_caller(self) -> int:
        """The runs one principal may have in flight; 0: no limit of its own.

        ``max_runs_per_caller`` when set; else, with authentication on, ``caller_run_share``
        of ``max_concurrent_runs`` (at least 1). Without authentication there is one caller,
        and the engine's own limit is its limit."""
        if self.max_runs_per_caller or not self.auth_enabled or self.caller_run_share >= 1:
            return self.max_runs_per_caller
        return max(1, math.floor(self.max_concurrent_runs * self.caller_run_share))

    def describe(self) -> list[tuple[str, str, str]]:
        """``(setting, env var, value)`` rows for a table; the API key is masked."""
        rows = []
        for spec in _FIELDS:
            value = getattr(self, spec.name)
            if spec.secret and value:
                shown = "***"
            elif value is None:
                shown = "(not set)"
            elif isinstance(value, tuple) and all(isinstance(item, str) for item in value):
                shown = ", ".join(value) or "(none)"
            else:
                shown = str(value)
            rows.append((spec.name, spec.env, shown))
        return rows


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
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    probe = socket.socket(family, socket.SOCK_STREAM)
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
    if settings.auth_enabled or settings.allow_anonymous or is_loopback(addr):
        return
    raise ConfigError(
        f"the {what} would listen on {addr} with no authentication: anyone who can reach it "
        'could read and change every conversation. Set AGENTIK_TOKENS="name:token,..." '
        "(or [[auth.tokens]] / jwt_key_file in [auth]), listen on 127.0.0.1, or set "
        "AGENTIK_ALLOW_ANONYMOUS=true if a proxy in front authenticates callers"
    )


def _target_for(listen_addr: str) -> str:
    """The address a client on this host dials to reach ``listen_addr``."""
    host, _, port = listen_addr.rpartition(":")
    return f"{_WILDCARD_HOSTS.get(host, host)}:{port}"


# --- value parsers --------------------------------------------------------------------


class _Invalid(Exception):
    """Why a raw value is unacceptable (without the setting's name or origin)."""


Parser = Callable[[object, bool], object]
"""Turns a raw value (str from the environment when the flag is set, else TOML) into
the setting's value, or raises ``_Invalid``."""


def _text(raw: object, *, strip: bool = True) -> str:
    if not isinstance(raw, str):
        raise _Invalid(f"must be a string, not {type(raw).__name__}")
    return raw.strip() if strip else raw


def _nonempty_string(raw: object, from_env: bool) -> object:
    value = _text(raw)
    if not value:
        raise _Invalid("must not be empty")
    return value


def _prompt(raw: object, from_env: bool) -> object:
    return _text(raw, strip=False)


def _secret(raw: object, from_env: bool) -> object:
    return _text(raw) or None


def _http_url(raw: object, from_env: bool) -> object:
    value = _text(raw)
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise _Invalid("must be an http:// or https:// URL")
    return value


def _optional_http_url(raw: object, from_env: bool) -> object:
    return _http_url(raw, from_env) or ""


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


def _integer(minimum: int) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        if from_env:
            try:
                value = int(_text(raw))
            except ValueError:
                raise _Invalid("must be an integer") from None
        elif isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        else:
            raise _Invalid(f"must be an integer, not {type(raw).__name__}")
        if value < minimum:
            raise _Invalid("must be positive" if minimum == 1 else f"must be at least {minimum}")
        return value

    return parse


def _bytes_between(lowest: int, highest: int) -> Parser:
    whole = _integer(1)

    def parse(raw: object, from_env: bool) -> object:
        value = whole(raw, from_env)
        assert isinstance(value, int)
        if not lowest <= value <= highest:
            raise _Invalid(f"must be between {lowest} and {highest} bytes")
        return value

    return parse


def _seconds(*, zero_ok: bool) -> Parser:
    def parse(raw: object, from_env: bool) -> object:
        if from_env:
            try:
                value = float(_text(raw))
            except ValueError:
                raise _Invalid("must be a number of seconds") from None
        elif isinstance(raw, int | float) and not isinstance(raw, bool):
            value = float(raw)
        else:
            raise _Invalid(f"must be a number of seconds, not {type(raw).__name__}")
        if not math.isfinite(value):
            raise _Invalid("must be a finite number of seconds")
        if value < 0 or (value == 0 and not zero_ok):
            raise _Invalid("must not be negative" if zero_ok else "must be positive")
        return value

    return parse


def _share(raw: object, from_env: bool) -> object:
    """A fraction in (0, 1]."""
    if from_env:
        try:
            value = float(_text(raw))
        except ValueError:
            raise _Invalid("must be a number between 0 and 1, e.g. 0.25") from None
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        value = float(raw)
    else:
        raise _Invalid(f"must be a number between 0 and 1, not {type(raw).__name__}")
    if not (0 < value <= 1):  # NaN fails this too
        raise _Invalid("must be more than 0 and at most 1 (1 = no share limit)")
    return value


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


_TARGET_FORMS = (
    "HOST:PORT, [IPv6]:PORT, ipv4:A.B.C.D:PORT,A.B.C.D:PORT,..., "
    "ipv6:[IPv6]:PORT,[IPv6]:PORT,..., dns:///HOST:PORT, dns://RESOLVER/HOST:PORT, "
    "unix:PATH or unix:///ABSOLUTE/PATH"
)
_TARGET_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def _engine_target(raw: object, from_env: bool) -> object:
    """A gRPC target the facade can dial: one address, a list, a DNS name or a socket."""
    value = _text(raw)
    if not value:
        raise _Invalid(f"must not be empty; use {_TARGET_FORMS}")
    if any(char.isspace() for char in value) or not value.isascii() or not value.isprintable():
        raise _Invalid(f"must not contain spaces or non-ASCII characters; use {_TARGET_FORMS}")
    match = _TARGET_SCHEME.match(value)
    scheme = match[1].lower() if match else ""
    rest = value[len(scheme) + 1 :]
    if scheme in _TARGET_SCHEMES:
        return _TARGET_SCHEMES[scheme](rest)
    if "," in value:
        raise _Invalid(f"a list of addresses needs the ipv4: or ipv6: prefix; use {_TARGET_FORMS}")
    # "localhost:50051" looks like a scheme and a port; "http://..." or "grpc:x:1" not.
    if scheme and (rest.startswith("/") or ":" in rest):
        raise _Invalid(f"has unknown scheme {scheme!r}; use {_TARGET_FORMS}")
    return _part(_address(port_zero_ok=False), value)


def _part(parse: Parser, text: str, what: str = "") -> str:
    """``text`` through an address parser, the refusal naming the target forms."""
    try:
        parse(text, True)
    except _Invalid as exc:
        where = f"{what} {text!r}: " if what else ""
        raise _Invalid(f"{where}{exc}; a target is one of {_TARGET_FORMS}") from None
    return text


def _address_list(rest: str, *, v6: bool) -> str:
    scheme = "ipv6" if v6 else "ipv4"
    if not rest:
        raise _Invalid(f"{scheme}: needs at least one address; use {_TARGET_FORMS}")
    items = rest.split(",")
    for item in items:
        if not item:
            raise _Invalid(f"{scheme}: has an empty entry (a stray comma); use {_TARGET_FORMS}")
        host, sep, port = item.rpartition(":")
        if v6:
            inside = host[1:-1] if host.startswith("[") and host.endswith("]") else None
            if inside is None or not sep:
                raise _Invalid(
                    f"ipv6: entry {item!r} must be [IPv6]:PORT, e.g. [::1]:50051; "
                    f"use {_TARGET_FORMS}"
                )
            try:
                ipaddress.IPv6Address(inside)
            except ValueError:
                raise _Invalid(
                    f"ipv6: entry {item!r} has no valid IPv6 address; use {_TARGET_FORMS}"
                ) from None
        else:
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise _Invalid(
                    f"ipv4: entry {item!r} must be A.B.C.D:PORT with an IPv4 address "
                    f"(a host name goes in dns:///HOST:PORT); use {_TARGET_FORMS}"
                ) from None
        _check_port(port if sep else "", item, scheme)
    return f"{scheme}:{rest}"


def _check_port(port: str, item: str, scheme: str) -> None:
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _Invalid(
            f"{scheme}: entry {item!r} needs a port between 1 and 65535; use {_TARGET_FORMS}"
        )


def _ipv4_target(rest: str) -> str:
    return _address_list(rest, v6=False)


def _ipv6_target(rest: str) -> str:
    return _address_list(rest, v6=True)


def _dns_target(rest: str) -> str:
    name = rest
    if rest.startswith("//"):
        authority, slash, name = rest[2:].partition("/")
        if not slash:
            raise _Invalid(
                f"dns:// needs dns:///HOST:PORT or dns://RESOLVER/HOST:PORT; use {_TARGET_FORMS}"
            )
        if authority:
            bracketed = authority.startswith("[")
            has_port = "]:" in authority if bracketed else ":" in authority
            resolver = authority if has_port else f"{authority}:53"
            _part(_address(port_zero_ok=False), resolver, "the DNS resolver")
    if not name:
        raise _Invalid(f"dns: needs HOST:PORT after the scheme; use {_TARGET_FORMS}")
    _part(_address(port_zero_ok=False), name, "dns: name")
    return f"dns:{rest}"


def _unix_target(rest: str) -> str:
    path = rest
    if rest.startswith("//"):
        if not rest.startswith("///"):
            raise _Invalid(
                f"unix:// needs an absolute path, unix:///run/agentik.sock; use {_TARGET_FORMS}"
            )
        path = rest[2:]
    if not path or path.endswith("/"):
        raise _Invalid(f"unix: needs the path of a socket file; use {_TARGET_FORMS}")
    return f"unix:{rest}"


_TARGET_SCHEMES: dict[str, Callable[[str], str]] = {
    "ipv4": _ipv4_target,
    "ipv6": _ipv6_target,
    "dns": _dns_target,
    "unix": _unix_target,
}


def _valid_host(host: str) -> bool:
    if not _HOSTNAME.match(host):
        return False
    if host.replace(".", "").isdigit():
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
    return True


def _store(raw: object, from_env: bool) -> object:
    value = _text(raw)
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep:
        raise _Invalid("must be a URL: memory://, sqlite:///PATH or postgresql://...")
    if scheme == "memory":
        if rest:
            raise _Invalid("memory:// takes nothing after the scheme")
    elif scheme == "sqlite":
        if not rest.startswith("/") or rest == "/":
            raise _Invalid(
                "a SQLite URL needs three slashes and a path: sqlite:///relative.db "
                "or sqlite:////absolute/path.db"
            )
    elif scheme not in ("postgresql", "postgres"):
        raise _Invalid(
            f"has unknown store scheme {scheme!r}; use memory://, sqlite:///PATH, "
            "postgresql:// or postgres://"
        )
    return value


def _log_level(raw: object, from_env: bool) -> object:
    value = _text(raw).upper()
    if value not in _LOG_LEVELS:
        raise _Invalid(f"must be one of {', '.join(_LOG_LEVELS)}")
    return value


def _compaction(raw: object, from_env: bool) -> object:
    value = _text(raw).lower()
    if value not in COMPACTION_MODES:
        raise _Invalid(f"must be one of {', '.join(COMPACTION_MODES)}")
    return value


def _log_format(raw: object, from_env: bool) -> object:
    value = _text(raw).lower()
    if value not in _LOG_FORMATS:
        raise _Invalid(f"must be one of {', '.join(_LOG_FORMATS)}")
    return value


def _optional_address(raw: object, from_env: bool) -> object:
    """HOST:PORT, or "" for off."""
    if _text(raw) == "":
        return ""
    return _address(port_zero_ok=True)(raw, from_env)


def _on_disconnect(raw: object, from_env: bool) -> object:
    value = _text(raw).lower()
    if value not in _ON_DISCONNECT:
        raise _Invalid(f"must be one of {', '.join(_ON_DISCONNECT)}")
    return value


_ORIGIN_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(text: str) -> str:
    """``text`` as a browser sends it in ``Origin``: lower-case, no default port."""
    if text == "*":
        return text
    example = "an origin is SCHEME://HOST[:PORT], e.g. https://app.example"
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or not _ORIGIN_SCHEME.match(scheme) or not rest:
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
    if from_env:
        items: list[object] = [item.strip() for item in _text(raw).split(",")]
        items = [item for item in items if item]
    elif isinstance(raw, list):
        items = list(raw)
    else:
        raise _Invalid(f"must be an array of origins, not {type(raw).__name__}")
    origins: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise _Invalid(f"every origin must be a string, not {type(item).__name__}")
        origin = _origin(item.strip())
        if origin not in origins:
            origins.append(origin)
    if "*" in origins and len(origins) > 1:
        raise _Invalid('"*" already allows every origin; give it alone or list the origins')
    return tuple(origins)


_TOKEN = re.compile(r"^[\x21-\x2b\x2d-\x7e]{1,4096}$")
"""Printable ASCII without spaces or commas (the separator of AGENTIK_TOKENS)."""
_JWT_ALGORITHMS = (
    "HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
    "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip


def _boolean(raw: object, from_env: bool) -> object:
    if isinstance(raw, bool):
        return raw
    if from_env and isinstance(raw, str):
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
    raise _Invalid("must be true or false")


def _principal(value: object) -> str:
    if not isinstance(value, str) or not is_valid_principal(value.strip()):
        raise _Invalid(f"principal {value!r} must be {PRINCIPAL_RULE}")
    return value.strip()


def _names(raw: object, from_env: bool) -> object:
    if from_env:
        raw = [item.strip() for item in _text(raw).split(",") if item.strip()]
    if not isinstance(raw, list):
        raise _Invalid(f"must be an array of principals, not {type(raw).__name__}")
    return tuple(dict.fromkeys(_principal(item) for item in raw))


def _token_entry(principal: object, token: object, where: str) -> TokenEntry:
    name = _principal(principal)
    if not isinstance(token, str) or not token:
        raise _Invalid(f"{where}: the token of {name!r} must be a non-empty string")
    if not _TOKEN.match(token):
        raise _Invalid(
            f"{where}: the token of {name!r} must be printable ASCII without spaces or commas"
        )
    return TokenEntry(name, token)


def _tokens(raw: object, from_env: bool) -> object:
    entries: list[TokenEntry] = []
    if from_env:
        for index, item in enumerate(i.strip() for i in _text(raw).split(",")):
            if not item:
                continue
            principal, sep, token = item.partition(":")
            if not sep:
                raise _Invalid(f"entry {index + 1} is not PRINCIPAL:TOKEN")
            entries.append(_token_entry(principal, token, f"entry {index + 1}"))
    elif isinstance(raw, list):
        for index, table in enumerate(raw):
            if not isinstance(table, dict):
                raise _Invalid("must be an array of tables ([[auth.tokens]])")
            unknown = sorted(set(table) - {"principal", "token"})
            if unknown:
                raise _Invalid(
                    f"entry {index + 1} has unknown key {unknown[0]!r}; known: principal, token"
                )
            entries.append(
                _token_entry(table.get("principal"), table.get("token"), f"entry {index + 1}")
            )
    else:
        raise _Invalid("must be an array of tables ([[auth.tokens]])")
    seen: dict[str, str] = {}
    for entry in entries:
        other = seen.setdefault(entry.token, entry.principal)
        if other != entry.principal:
            raise _Invalid(f"{other!r} and {entry.principal!r} have the same token")
    return tuple(entries)


_TOOL_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]!-]{1,128}")


def _tool_patterns(raw: object, from_env: bool) -> object:
    """Tool names or globs (``*``, ``?``, ``[...]``), from a list or a comma-separated env."""
    if from_env:
        raw = [item.strip() for item in _text(raw).split(",") if item.strip()]
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise _Invalid('must be an array of tool names or globs, e.g. ["calculate", "time__*"]')
    for item in raw:
        if not _TOOL_PATTERN.fullmatch(item.strip()):
            raise _Invalid(
                f"{item!r} is not a tool name or glob (letters, digits, _ . - and * ? [ ] !)"
            )
    return tuple(dict.fromkeys(item.strip() for item in raw))


def _algorithms(raw: object, from_env: bool) -> object:
    if from_env:
        raw = [item.strip() for item in _text(raw).split(",") if item.strip()]
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise _Invalid("must be an array of JWT algorithm names")
    for item in raw:
        if item not in _JWT_ALGORITHMS:
            raise _Invalid(f"{item!r} is not a JWT algorithm; known: {', '.join(_JWT_ALGORITHMS)}")
    return tuple(raw)


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    env: str
    section: str
    key: str
    parse: Parser
    secret: bool = False

    @property
    def toml_key(self) -> str:
        return f"[{self.section}] {self.key}"


_POSITIVE = _integer(1)
_FIELDS: tuple[_Field, ...] = (
    _Field("grpc_addr", "AGENTIK_GRPC_ADDR", "engine", "grpc_addr", _address(port_zero_ok=True)),
    _Field("store", "AGENTIK_STORE", "engine", "store", _store),
    _Field("openai_base_url", "OPENAI_BASE_URL", "llm", "base_url", _http_url),
    _Field("openai_api_key", "OPENAI_API_KEY", "llm", "api_key", _secret, secret=True),
    _Field("model", "AGENTIK_MODEL", "llm", "model", _nonempty_string),
    _Field("system_prompt", "AGENTIK_SYSTEM_PROMPT", "llm", "system_prompt", _prompt),
    _Field("max_tool_rounds", "AGENTIK_MAX_TOOL_ROUNDS", "llm", "max_tool_rounds", _POSITIVE),
    _Field("llm_timeout", "AGENTIK_LLM_TIMEOUT", "llm", "timeout", _seconds(zero_ok=False)),
    _Field(
        "llm_first_token_timeout",
        "AGENTIK_LLM_FIRST_TOKEN_TIMEOUT",
        "llm",
        "first_token_timeout",
        _seconds(zero_ok=False),
    ),
    _Field("llm_max_retries", "AGENTIK_LLM_MAX_RETRIES", "llm", "max_retries", _integer(0)),
    _Field(
        "llm_check_interval",
        "AGENTIK_LLM_CHECK_INTERVAL",
        "llm",
        "check_interval",
        _seconds(zero_ok=True),
    ),
    _Field("context_tokens", "AGENTIK_CONTEXT_TOKENS", "llm", "context_tokens", _integer(0)),
    _Field(
        "reserve_output_tokens",
        "AGENTIK_RESERVE_OUTPUT_TOKENS",
        "llm",
        "reserve_output_tokens",
        _integer(0),
    ),
    _Field("compaction", "AGENTIK_COMPACTION", "llm", "compaction", _compaction),
    _Field("tool_timeout", "AGENTIK_TOOL_TIMEOUT", "tools", "timeout", _seconds(zero_ok=False)),
    _Field(
        "tools_max_result_chars",
        "AGENTIK_TOOLS_MAX_RESULT_CHARS",
        "tools",
        "max_result_chars",
        _POSITIVE,
    ),
    _Field("tools_approval", "AGENTIK_TOOLS_APPROVAL", "tools", "approval", _tool_patterns),
    _Field("tools_ask_user", "AGENTIK_TOOLS_ASK_USER", "tools", "ask_user", _boolean),
    _Field(
        "interrupt_expiry",
        "AGENTIK_INTERRUPT_EXPIRY",
        "tools",
        "interrupt_expiry",
        _seconds(zero_ok=True),
    ),
    _Field(
        "max_concurrent_runs",
        "AGENTIK_MAX_CONCURRENT_RUNS",
        "engine",
        "max_concurrent_runs",
        _POSITIVE,
    ),
    _Field(
        "event_retention",
        "AGENTIK_EVENT_RETENTION",
        "engine",
        "event_retention",
        _seconds(zero_ok=True),
    ),
    _Field(
        "shutdown_grace",
        "AGENTIK_SHUTDOWN_GRACE",
        "engine",
        "shutdown_grace",
        _seconds(zero_ok=True),
    ),
    _Field("engine_workers", "AGENTIK_ENGINE_WORKERS", "engine", "workers", _POSITIVE),
    _Field(
        "lease_seconds",
        "AGENTIK_LEASE_SECONDS",
        "engine",
        "lease_seconds",
        _seconds(zero_ok=False),
    ),
    _Field(
        "max_message_bytes",
        "AGENTIK_MAX_MESSAGE_BYTES",
        "engine",
        "max_message_bytes",
        _POSITIVE,
    ),
    _Field(
        "max_state_bytes",
        "AGENTIK_MAX_STATE_BYTES",
        "engine",
        "max_state_bytes",
        _POSITIVE,
    ),
    _Field(
        "store_retry_seconds",
        "AGENTIK_STORE_RETRY_SECONDS",
        "engine",
        "store_retry_seconds",
        _seconds(zero_ok=True),
    ),
    _Field(
        "max_event_bytes",
        "AGENTIK_MAX_EVENT_BYTES",
        "engine",
        "max_event_bytes",
        _bytes_between(MIN_EVENT_BYTES, MAX_EVENT_BYTES),
    ),
    _Field(
        "stream_buffer_bytes",
        "AGENTIK_STREAM_BUFFER_BYTES",
        "engine",
        "stream_buffer_bytes",
        _bytes_between(MIN_EVENT_BYTES, 1 << 40),
    ),
    _Field("log_level", "AGENTIK_LOG_LEVEL", "log", "level", _log_level),
    _Field("log_format", "AGENTIK_LOG_FORMAT", "log", "format", _log_format),
    _Field("metrics_addr", "AGENTIK_METRICS_ADDR", "engine", "metrics_addr", _optional_address),
    _Field("http_addr", "AGENTIK_HTTP_ADDR", "web", "http_addr", _address(port_zero_ok=True)),
    _Field(
        "engine_target",
        "AGENTIK_ENGINE_TARGET",
        "web",
        "engine_target",
        _engine_target,
    ),
    _Field("web_workers", "AGENTIK_WEB_WORKERS", "web", "workers", _POSITIVE),
    _Field("web_threads", "AGENTIK_WEB_THREADS", "web", "threads", _POSITIVE),
    _Field(
        "web_header_timeout",
        "AGENTIK_WEB_HEADER_TIMEOUT",
        "web",
        "header_timeout",
        _seconds(zero_ok=False),
    ),
    _Field(
        "web_body_timeout",
        "AGENTIK_WEB_BODY_TIMEOUT",
        "web",
        "body_timeout",
        _seconds(zero_ok=False),
    ),
    _Field(
        "web_write_timeout",
        "AGENTIK_WEB_WRITE_TIMEOUT",
        "web",
        "write_timeout",
        _seconds(zero_ok=False),
    ),
    _Field(
        "web_queue_timeout",
        "AGENTIK_WEB_QUEUE_TIMEOUT",
        "web",
        "queue_timeout",
        _seconds(zero_ok=True),
    ),
    _Field(
        "heartbeat_interval",
        "AGENTIK_HEARTBEAT",
        "web",
        "heartbeat_interval",
        _seconds(zero_ok=False),
    ),
    _Field("max_body_bytes", "AGENTIK_MAX_BODY_BYTES", "web", "max_body_bytes", _POSITIVE),
    _Field("on_disconnect", "AGENTIK_ON_DISCONNECT", "web", "on_disconnect", _on_disconnect),
    _Field("cors_origins", "AGENTIK_CORS_ORIGINS", "web", "cors_origins", _origins),
    _Field("public_url", "AGENTIK_PUBLIC_URL", "a2a", "public_url", _optional_http_url),
    _Field("agent_name", "AGENTIK_AGENT_NAME", "a2a", "name", _nonempty_string),
    _Field("agent_description", "AGENTIK_AGENT_DESCRIPTION", "a2a", "description", _prompt),
    _Field("agent_version", "AGENTIK_AGENT_VERSION", "a2a", "version", _prompt),
    _Field("agent_skills", "AGENTIK_AGENT_SKILLS", "a2a", "skills", _skills),
    _Field("auth_tokens", "AGENTIK_TOKENS", "auth", "tokens", _tokens, secret=True),
    _Field("allow_anonymous", "AGENTIK_ALLOW_ANONYMOUS", "auth", "allow_anonymous", _boolean),
    _Field("admins", "AGENTIK_ADMINS", "auth", "admins", _names),
    _Field(
        "max_runs_per_caller",
        "AGENTIK_MAX_RUNS_PER_CALLER",
        "auth",
        "max_runs_per_caller",
        _integer(0),
    ),
    _Field("caller_run_share", "AGENTIK_CALLER_RUN_SHARE", "auth", "caller_run_share", _share),
    _Field(
        "requests_per_minute",
        "AGENTIK_REQUESTS_PER_MINUTE",
        "auth",
        "requests_per_minute",
        _integer(0),
    ),
    _Field("jwt_key_file", "AGENTIK_JWT_KEY_FILE", "auth", "jwt_key_file", _prompt),
    _Field("jwt_issuer", "AGENTIK_JWT_ISSUER", "auth", "jwt_issuer", _prompt),
    _Field("jwt_audience", "AGENTIK_JWT_AUDIENCE", "auth", "jwt_audience", _prompt),
    _Field("jwt_algorithms", "AGENTIK_JWT_ALGORITHMS", "auth", "jwt_algorithms", _algorithms),
)
_SECTIONS: dict[str, dict[str, _Field]] = {}
for _spec in _FIELDS:
    _SECTIONS.setdefault(_spec.section, {})[_spec.key] = _spec
del _spec
_MCP_SECTION = "mcp"

_TABLES = {"mcp_servers", "python_tools", "a2a_agents"}
_TABLE_KEYS = {"tools": ("python",), "a2a": ("agents",)}
"""Settings read from arrays of tables in the TOML file only, not from ``_FIELDS``."""

assert {f.name for f in _FIELDS} == {f.name for f in fields(Settings)} - _TABLES


def setting_keys() -> list[tuple[str, str, str]]:
    """``(setting, env var, TOML key)`` for every setting, in documentation order."""
    return [(f.name, f.env, f.toml_key) for f in _FIELDS]


# --- loading --------------------------------------------------------------------------


def _parse(spec: _Field, raw: object, from_env: bool, origin: str) -> object:
    try:
        return spec.parse(raw, from_env)
    except _Invalid as exc:
        shown = "(hidden)" if spec.secret else repr(raw)
        raise ConfigError(f"invalid {spec.name} (from {origin}): {exc}; got {shown}") from None


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


def _mcp_servers(table: object, path: str, env: Mapping[str, str]) -> tuple[McpServerConfig, ...]:
    from engine_service.tools.mcp_config import McpConfigError, parse_mcp_servers

    if not isinstance(table, dict):
        raise ConfigError(f"[mcp] in {path!r} must be a table with [[mcp.servers]] entries")
    for key in table:
        if key != "servers":
            raise _unknown("key", f"mcp.{key}", ["mcp.servers"], repr(path))
    servers = table.get("servers", [])
    if not isinstance(servers, list):
        raise ConfigError(f"mcp.servers in {path!r} must be an array of tables ([[mcp.servers]])")
    try:
        return parse_mcp_servers(servers, repr(path), env)
    except McpConfigError as exc:
        raise ConfigError(str(exc)) from None


def _python_tools(raw: object, path: str) -> tuple[PythonToolConfig, ...]:
    from engine_service.tools.python_config import PythonToolConfigError, parse_python_tools

    try:
        return parse_python_tools(raw, repr(path))
    except PythonToolConfigError as exc:
        raise ConfigError(str(exc)) from None


def _a2a_agents(
    raw: object, origin: str, env: Mapping[str, str], *, from_env: bool = False
) -> tuple[A2aAgentConfig, ...]:
    """``[[a2a.agents]]`` tables (``raw`` a list), or the ``AGENTIK_A2A_AGENTS`` string."""
    from engine_service.tools.a2a_config import (
        A2aConfigError,
        parse_a2a_agents,
        parse_a2a_agents_env,
    )

    try:
        if from_env and isinstance(raw, str):
            return parse_a2a_agents_env(raw)
        return parse_a2a_agents(raw, origin, env)
    except A2aConfigError as exc:
        raise ConfigError(str(exc)) from None


def _expand_tokens(raw: object, env: Mapping[str, str], origin: str) -> object:
    """``${NAME}`` in ``[[auth.tokens]]`` tokens, from the environment."""
    if not isinstance(raw, list):
        return raw
    expanded: list[object] = []
    for table in raw:
        if isinstance(table, dict) and isinstance(table.get("token"), str):

            def lookup(match: re.Match[str]) -> str:
                found = env.get(match[1])
                if not found:
                    raise ConfigError(
                        f"invalid auth_tokens (from {origin}): a token names the environment "
                        f"variable {match[1]!r}, which is unset"
                    )
                return found

            table = {**table, "token": _ENV_VARIABLE.sub(lookup, table["token"])}
        expanded.append(table)
    return expanded


def _from_toml(
    document: dict[str, Any], path: str, env: Mapping[str, str], mcp: bool
) -> dict[str, object]:
    values: dict[str, object] = {}
    known_sections = [*_SECTIONS, _MCP_SECTION]
    for section, table in document.items():
        if section == _MCP_SECTION:
            if mcp:
                values["mcp_servers"] = _mcp_servers(table, path, env)
            continue
        keys = _SECTIONS.get(section)
        if keys is None:
            raise _unknown("section", section, known_sections, repr(path))
        if not isinstance(table, dict):
            raise ConfigError(f"{section!r} in {path!r} must be a table ([{section}])")
        for key, raw in table.items():
            if section == "tools" and key == "python":  # [[tools.python]]
                values["python_tools"] = _python_tools(raw, path)
                continue
            if section == "a2a" and key == "agents":  # [[a2a.agents]]
                if mcp:
                    values["a2a_agents"] = _a2a_agents(raw, repr(path), env)
                continue
            spec = keys.get(key)
            if spec is None:
                known = [*keys, *_TABLE_KEYS.get(section, ())]
                raise _unknown("key", key, known, f"[{section}] of {path!r}")
            if spec.name == "auth_tokens":
                raw = _expand_tokens(raw, env, f"{spec.toml_key} in {path!r}")
            values[spec.name] = _parse(spec, raw, False, f"{spec.toml_key} in {path!r}")
    return values


def load_settings(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    mcp: bool = True,
) -> Settings:
    """Build the settings from defaults, the TOML file (if named) and ``env`` (default
    ``os.environ``); raise ``ConfigError`` for anything unusable.

    ``mcp=False`` (the web facade) skips ``[mcp]`` and ``[[a2a.agents]]``: ``mcp_servers``
    and ``a2a_agents`` stay empty, and an ``${VAR}`` only the engine's MCP servers or A2A
    agents need is neither expanded nor required."""
    if env is None:
        env = os.environ
    values: dict[str, object] = {}
    if path is not None:
        document = _read_toml(os.fspath(path), "the path given")
        values.update(_from_toml(document, os.fspath(path), env, mcp))
    elif env.get(CONFIG_ENV):
        file = env[CONFIG_ENV]
        values.update(_from_toml(_read_toml(file, f"env {CONFIG_ENV}"), file, env, mcp))
    for spec in _FIELDS:
        raw = env.get(spec.env)
        if raw is not None and raw != "":
            values[spec.name] = _parse(spec, raw, True, f"env {spec.env}")
    if mcp:  # the engine's remote agents; the facade never calls them
        from engine_service.tools.a2a_config import A2A_AGENTS_ENV

        agents = env.get(A2A_AGENTS_ENV, "").strip()
        if agents:
            values["a2a_agents"] = _a2a_agents(agents, A2A_AGENTS_ENV, env, from_env=True)
    return Settings(**values)  # type: ignore[arg-type]
