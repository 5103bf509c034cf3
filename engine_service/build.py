"""Builds an ``Engine`` from ``Settings``: store, model and tools chosen by config."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from engine_service import tracing
from engine_service.config import ConfigError, Settings
from engine_service.core.chat import ChatModel
from engine_service.core.engine import Engine, EngineLimits
from engine_service.core.hitl import AskUserTool
from engine_service.core.registry import ToolRegistry
from engine_service.core.trace import NO_TRACER
from engine_service.core.turn import TurnLimits
from engine_service.llm.offline import OfflineChatModel
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.stores import open_store
from engine_service.tools.a2a_sources import A2aAgentSources
from engine_service.tools.builtin import builtin_tools
from engine_service.tools.mcp_sources import McpToolSources

__all__ = [
    "build_a2a_agents",
    "build_engine",
    "build_mcp_sources",
    "build_model",
    "build_tools",
    "connected_briefly",
]

T = TypeVar("T")

log = logging.getLogger(__name__)


def build_model(settings: Settings) -> ChatModel:
    """The OpenAI-compatible model when an endpoint or key is configured, else offline."""
    if settings.openai_base_url or settings.openai_api_key:
        return OpenAIChatModel(
            base_url=settings.openai_base_url or "https://api.openai.com/v1",
            api_key=settings.openai_api_key or "not-needed",
            model=settings.model,
            timeout=settings.llm_timeout,
            first_token_timeout=settings.llm_first_token_timeout,
            max_retries=settings.llm_max_retries,
        )
    return OfflineChatModel()


def build_tools(settings: Settings) -> ToolRegistry:
    """The native and Python tools; MCP tools join when their servers connect
    (``build_mcp_sources``), remote agents with ``build_a2a_agents``. A Python tool that
    cannot load, or an agent named like one of these tools, is a ``ConfigError``."""
    registry = ToolRegistry()
    for tool in builtin_tools():
        registry.register(tool)
    if settings.tools_ask_user:
        registry.register(AskUserTool())
    if settings.python_tools:  # pydantic and the functions' modules load only when used
        from engine_service.tools.python_tools import PythonToolLoadError, register_python_tools

        try:
            register_python_tools(settings.python_tools, registry)
        except PythonToolLoadError as exc:
            raise ConfigError(str(exc)) from None
    for agent in settings.a2a_agents:  # their tools join in build_a2a_agents
        if agent.name in registry:
            raise ConfigError(
                f"the A2A agent name {agent.name!r} is taken by the "
                f"{registry.source_of(agent.name)} tool of that name: rename the agent"
            )
    return registry


def build_mcp_sources(settings: Settings, registry: ToolRegistry) -> McpToolSources:
    """One source per configured MCP server, adding its tools to ``registry`` once started."""
    return McpToolSources(
        settings.mcp_servers, registry, default_call_timeout=settings.tool_timeout
    )


def build_a2a_agents(settings: Settings, registry: ToolRegistry) -> A2aAgentSources:
    """One source per configured remote A2A agent; its tool is registered now and offered
    once the agent's card is read (after ``start``)."""
    return A2aAgentSources(
        settings.a2a_agents, registry, default_call_timeout=settings.tool_timeout
    )


def build_engine(settings: Settings) -> Engine:
    limits = EngineLimits(
        turn=TurnLimits(
            system_prompt=settings.system_prompt,
            max_tool_rounds=settings.max_tool_rounds,
            tool_timeout=settings.tool_timeout,
            approval=settings.tools_approval,
            interrupt_expiry=settings.interrupt_expiry,
            max_state_bytes=settings.max_state_bytes,
            max_event_bytes=settings.max_event_bytes,
            buffer_bytes=settings.stream_buffer_bytes,
            context=settings.context,
        ),
        max_concurrent_runs=settings.max_concurrent_runs,
        max_runs_per_caller=settings.runs_per_caller,
        lease_seconds=settings.lease_seconds,
        event_retention=settings.event_retention,
    )
    tracer = tracing.tracer() if tracing.enabled() else NO_TRACER
    return Engine(
        open_store(settings.store, retry_seconds=settings.store_retry_seconds),
        build_model(settings),
        build_tools(settings),
        limits,
        tracer,
    )


async def connected_briefly(
    sources: McpToolSources, agents: A2aAgentSources, look: Callable[[], T]
) -> T:
    """Start ``sources`` and ``agents``, wait until each is ready or has failed (its own
    connect timeout, plus a second), take ``look()`` at them, and stop them again: for
    commands that report on the tools (``agentik tools``, ``agentik doctor``)."""
    sources.start()
    agents.start()
    try:
        wait = max(
            [s.config.connect_timeout for s in sources]
            + [a.config.connect_timeout for a in agents],
            default=0.0,
        )
        await asyncio.gather(sources.wait_settled(wait + 1.0), agents.wait_settled(wait + 1.0))
        return look()
    finally:
        await asyncio.gather(sources.stop(), agents.stop())
