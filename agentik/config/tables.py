"""The models of the TOML tables, one frozen dataclass each: a field per key
(:func:`~agentik.config.values.setting`), with its default, environment variable and
checks."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from agentik.addresses import check_address, check_target
from agentik.config.a2a import A2aAgentConfig, read_a2a_agents
from agentik.config.agents import AgentConfig, read_agents
from agentik.config.auth import JWT_ALGORITHMS, TokenEntry, check_principal, check_tokens
from agentik.config.checks import (
    check_llm_url,
    check_origin,
    check_origins,
    check_pattern,
    check_skills,
    check_store,
    check_url,
)
from agentik.config.mcp import McpServerConfig, read_servers
from agentik.config.python_tools import PythonToolConfig, read_python_tools
from agentik.config.values import MiB, setting, table
from agentik.limits import (
    COMPACTION_MODES,
    MAX_EVENT_BYTES,
    MIN_EVENT_BYTES,
    check_modalities,
)

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "A2aSettings",
    "AgentSettings",
    "AuthSettings",
    "EngineSettings",
    "LlmSettings",
    "LogSettings",
    "McpSettings",
    "ToolsSettings",
    "WebSettings",
    "WebhooksSettings",
]

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer clearly and concisely. Use the tools you have "
    "when they help, and say so when you are not sure."
)
_WHSEC = r"(?s:(?!whsec_).*)|whsec_(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"
_WHY_WHSEC = "a secret starting with whsec_ must be base64 after it"
_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """``[engine]``: the gRPC server, its store and its limits."""

    grpc_addr: str = setting("127.0.0.1:50051", check=check_address, required=True)
    store: str = setting("sqlite:///.agentik/agentik.db", check=check_store, required=True)
    max_concurrent_runs: int = setting(512)
    max_streams: int = setting(0, lo=0, doc="0: four per run slot (4 x max_concurrent_runs)")
    """Event streams open at once on the engine, every caller's (``Settings.engine_streams``)."""
    max_message_bytes: int = setting(4 * MiB)
    max_event_bytes: int = setting(MiB, lo=MIN_EVENT_BYTES, hi=MAX_EVENT_BYTES)
    """The largest event; longer text is split."""
    stream_buffer_bytes: int = setting(8 * MiB, lo=MIN_EVENT_BYTES, hi=1 << 40)
    """Events kept per session for slow readers."""
    write_timeout: float = setting(120.0, flat="engine_write_timeout", lo=0, doc="0: never")
    """Seconds one message of a server stream may wait for a client that does not read;
    past it the stream is cut (engine_service/stalled_writes.py). Above ``[web]
    write_timeout``: the facade cuts its own clients first."""
    event_retention: float = setting(604800.0, lo=0, doc="0: keep events forever")
    shutdown_grace: float = setting(10.0, lo=0)
    lease_seconds: float = setting(10.0, doc="how soon another engine takes a dead one's runs")
    resume_runs: bool = setting(True, doc="a dead engine's runs go on from their checkpoint")
    max_resumes: int = setting(3, doc="past this a run stops with resume_limit")
    workers: int = setting(1, flat="engine_workers")
    max_state_bytes: int = setting(MiB, doc="a session's shared state as JSON, at most")
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

    base_url: str | None = setting(
        None, "OPENAI_BASE_URL", flat="openai_base_url", check=check_llm_url
    )
    api_key: str | None = setting(None, "OPENAI_API_KEY", flat="openai_api_key", secret=True)
    model: str = setting("gpt-4o-mini", required=True)
    system_prompt: str = setting(DEFAULT_SYSTEM_PROMPT, strip=False)
    max_tool_rounds: int = setting(8)
    timeout: float = setting(120.0, flat="llm_timeout")
    first_token_timeout: float = setting(60.0, flat="llm_first_token_timeout")
    round_timeout: float = setting(1800.0, flat="llm_round_timeout")
    """Seconds one LLM round may take from its request to its last token."""
    max_answer_bytes: int = setting(8 * MiB, flat="llm_max_answer_bytes", lo=1024)
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
    approval: tuple[str, ...] = setting((), flat="tools_approval", each=check_pattern)
    """Tools whose calls wait for approval."""
    idempotent: tuple[str, ...] = setting(
        ("current_time", "calculate"), flat="tools_idempotent", each=check_pattern
    )
    """Tools safe to run again when a resumed run's call was cut."""
    in_doubt: str = setting("ask", flat="tools_in_doubt", choices=("ask", "error"))
    """A cut call of another tool."""
    ask_user: bool = setting(False, flat="tools_ask_user")
    interrupt_expiry: float = setting(0.0, lo=0, doc="0: interrupts never expire")
    max_result_chars: int = setting(50_000, flat="tools_max_result_chars")
    python: tuple[PythonToolConfig, ...] = table(read_python_tools, "python_tools", False)


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
    max_body_bytes: int = setting(MiB)
    discard_body_bytes: int = setting(0, flat="web_discard_body_bytes", lo=0)
    """A body an answer did not need (over max_body_bytes: the 413) up to this is read and
    dropped after the answer, keeping the connection."""
    on_disconnect: str = setting("continue", choices=("continue", "cancel"))
    stream_reader: str = setting(
        "asyncio", flat="web_stream_reader", choices=("asyncio", "threads")
    )
    cors_origins: tuple[str, ...] = setting(
        (), each=check_origin, check=check_origins, noun="origins", item="origin"
    )
    gc_threshold: int = setting(10_000, flat="web_gc_threshold", lo=0, hi=1_000_000)
    """A web worker's collector, as ``[engine] gc_threshold`` is the engine's."""


@dataclass(frozen=True, slots=True)
class A2aSettings:
    """``[a2a]``: the agent card, and ``[[a2a.agents]]``, other agents offered as tools."""

    public_url: str = setting("", check=check_url, doc="where peers reach the facade")
    grpc_url: str = setting("", flat="a2a_grpc_url", check=partial(check_address, lowest=1))
    name: str = setting("agentik", flat="agent_name", required=True)
    description: str = setting("", flat="agent_description", strip=False)
    version: str = setting("", flat="agent_version", strip=False)
    skills: tuple[dict[str, Any], ...] | None = setting(
        None, flat="agent_skills", check=check_skills
    )
    card_signing_key: str = setting("", flat="a2a_card_signing_key", secret=True)
    max_request_id_chars: int = setting(256, flat="a2a_max_request_id_chars")
    """The longest JSON-RPC request ``id`` taken: every answer, each frame of a stream
    too, echoes it."""
    agents: tuple[A2aAgentConfig, ...] = table(read_a2a_agents, "a2a_agents")


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``[agent]``: the default agent, and ``[[agents]]`` (docs/agents.md)."""

    name: str = setting("agentik", flat="default_agent", name=64, required=True)
    max_depth: int = setting(3, flat="agent_max_depth")
    agents: tuple[AgentConfig, ...] = table(read_agents, "agents", False)


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """``[auth]``: who may call (docs/security.md) and how much."""

    tokens: tuple[TokenEntry, ...] = setting(
        (), "AGENTIK_TOKENS", flat="auth_tokens", check=check_tokens, secret=True
    )
    allow_anonymous: bool = setting(False)
    admins: tuple[str, ...] = setting((), each=check_principal, noun="principals")
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
    jwt_algorithms: tuple[str, ...] = setting(
        (), choices=JWT_ALGORITHMS, noun="JWT algorithm names"
    )


@dataclass(frozen=True, slots=True)
class McpSettings:
    """``[[mcp.servers]]``: MCP servers whose tools the engine offers."""

    servers: tuple[McpServerConfig, ...] = table(read_servers, "mcp_servers")


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
