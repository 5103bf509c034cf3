""":class:`Settings`, the whole configuration: a model per TOML table, the checks that
span tables, and the limits derived from several keys."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from agentik.addresses import dialable
from agentik.config.errors import ConfigError
from agentik.config.tables import (
    A2aSettings,
    AgentSettings,
    AuthSettings,
    EngineSettings,
    LlmSettings,
    LogSettings,
    McpSettings,
    ToolsSettings,
    WebhooksSettings,
    WebSettings,
)
from agentik.config.values import MiB
from agentik.limits import MIN_CONTEXT_TOKENS

__all__ = ["Settings"]


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
        return self.web.discard_body_bytes or max(2 * self.web.max_body_bytes, 4 * MiB)
