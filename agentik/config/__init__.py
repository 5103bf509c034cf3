"""Settings for the engine and the web facade: one frozen dataclass per TOML table.

Sources, later wins: the models' defaults; a TOML file (``path``, else ``AGENTIK_CONFIG``; one
named but missing is an error); environment variables (an empty one is unset); the CLIs' flags
(``--config``, ``agentik engine --workers N``). Each field is a key of its table
(:func:`setting`): ``[llm] timeout`` is ``settings.llm.timeout``, env ``AGENTIK_LLM_TIMEOUT``,
setting ``llm_timeout`` in errors; ``[[agents]]`` is ``settings.agent.agents``. One converter,
:func:`~agentik.config.values.convert`, reads every value; why not pydantic:
docs/architecture.md ("Settings").

The package, a module per concern: ``values`` (a key's field and the converter), ``checks``
(values the converter cannot check alone), ``auth`` (bearer tokens), ``entries`` (arrays of
tables) and the entry models ``mcp``, ``a2a``, ``agents``, ``python_tools``; ``tables`` (a
model per table), ``settings`` (all of them), ``keys`` (every key, its env variable) and
``load`` (:func:`load_settings`); ``errors`` (:class:`ConfigError`).
"""

from __future__ import annotations

from agentik.config.a2a import (
    A2A_AGENTS_ENV,
    CARD_PATH,
    DEFAULT_MAX_RESPONSE_BYTES,
    A2aAgentConfig,
    parse_a2a_agents_env,
)
from agentik.config.agents import MAX_PROMPT_FILE_BYTES, AgentConfig
from agentik.config.auth import TokenEntry
from agentik.config.entries import DEFAULT_CONNECT_TIMEOUT, MAX_AGENTS, Entry, expand
from agentik.config.errors import ConfigError, unknown_name
from agentik.config.keys import CONFIG_ENV, setting_env_names
from agentik.config.load import load_settings
from agentik.config.mcp import McpServerConfig
from agentik.config.python_tools import DEFAULT_MAX_STRANDED_CALLS, PythonToolConfig
from agentik.config.settings import Settings
from agentik.config.tables import (
    DEFAULT_SYSTEM_PROMPT,
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
from agentik.config.values import NAME, setting, table

__all__ = [
    "A2A_AGENTS_ENV",
    "CARD_PATH",
    "CONFIG_ENV",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_MAX_STRANDED_CALLS",
    "DEFAULT_SYSTEM_PROMPT",
    "MAX_AGENTS",
    "MAX_PROMPT_FILE_BYTES",
    "NAME",
    "A2aAgentConfig",
    "A2aSettings",
    "AgentConfig",
    "AgentSettings",
    "AuthSettings",
    "ConfigError",
    "EngineSettings",
    "Entry",
    "LlmSettings",
    "LogSettings",
    "McpServerConfig",
    "McpSettings",
    "PythonToolConfig",
    "Settings",
    "TokenEntry",
    "ToolsSettings",
    "WebSettings",
    "WebhooksSettings",
    "expand",
    "load_settings",
    "parse_a2a_agents_env",
    "setting",
    "setting_env_names",
    "table",
    "unknown_name",
]
