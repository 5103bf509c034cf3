"""Builds an ``Engine`` from ``Settings``: store, model and tools chosen by config."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from agentik import tracing
from agentik.config import ConfigError, Settings
from engine_service import otel_tracer
from engine_service.core.chat import ChatModel
from engine_service.core.context import ContextLimits, default_window
from engine_service.core.deliveries import Delivery, DeliveryWorker, RetryPolicy, SendResult
from engine_service.core.engine import Engine
from engine_service.core.hitl import AskUserTool
from engine_service.core.limits import EngineLimits, RunLimits
from engine_service.core.registry import ToolRegistry
from engine_service.core.trace import NO_TRACER
from engine_service.llm.offline import OfflineChatModel
from engine_service.llm.openai_chat import OpenAIChatModel
from engine_service.stores import open_store
from engine_service.tools.a2a.sources import A2aAgentSources
from engine_service.tools.builtin import builtin_tools
from engine_service.tools.mcp.sources import McpToolSources

__all__ = [
    "build_a2a_agents",
    "build_delivery_worker",
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
    if settings.llm.base_url or settings.llm.api_key:
        return OpenAIChatModel(
            base_url=settings.llm.base_url or "https://api.openai.com/v1",
            api_key=settings.llm.api_key or "not-needed",
            model=settings.llm.model,
            timeout=settings.llm.timeout,
            first_token_timeout=settings.llm.first_token_timeout,
            max_retries=settings.llm.max_retries,
        )
    return OfflineChatModel()


def build_tools(settings: Settings) -> ToolRegistry:
    """The native and Python tools; MCP tools join when their servers connect
    (``build_mcp_sources``), remote agents with ``build_a2a_agents``. A Python tool that
    cannot load, or an agent named like one of these tools, is a ``ConfigError``."""
    registry = ToolRegistry()
    for tool in builtin_tools():
        registry.register(tool)
    if settings.tools.ask_user:
        registry.register(AskUserTool())
    if settings.tools.python:  # pydantic and the functions' modules load only when used
        from engine_service.tools.python.tool import PythonToolLoadError, register_python_tools

        try:
            register_python_tools(settings.tools.python, registry)
        except PythonToolLoadError as exc:
            raise ConfigError(str(exc)) from None
    for agent in settings.a2a.agents:  # their tools join in build_a2a_agents
        if agent.name in registry:
            raise ConfigError(
                f"the A2A agent name {agent.name!r} is taken by the "
                f"{registry.source_of(agent.name)} tool of that name: rename the agent"
            )
    return registry


def build_delivery_worker(
    settings: Settings,
    engine: Engine,
    on_attempt: Callable[[Delivery, SendResult], None] | None = None,
) -> DeliveryWorker:
    """The worker that makes this engine's share of the webhook deliveries, over HTTP."""
    from engine_service.webhooks.sender import WebhookSender

    hooks = settings.webhooks
    sender = WebhookSender(
        secret=hooks.secret, allow_private=hooks.allow_private, timeout=hooks.timeout
    )
    return DeliveryWorker(
        engine.store,
        sender,
        replica=engine.replica,
        policy=RetryPolicy(hooks.max_attempts, hooks.base_delay),
        poll_interval=hooks.poll_interval,
        # Longer than an attempt can take: a claimed delivery is never made twice at once.
        lease_seconds=max(5.0, 3 * hooks.timeout),
        on_attempt=on_attempt,
    )


def build_mcp_sources(settings: Settings, registry: ToolRegistry) -> McpToolSources:
    """One source per configured MCP server, adding its tools to ``registry`` once started."""
    return McpToolSources(
        settings.mcp.servers, registry, default_call_timeout=settings.tools.timeout
    )


def build_a2a_agents(settings: Settings, registry: ToolRegistry) -> A2aAgentSources:
    """One source per configured remote A2A agent; its tool is registered now and offered
    once the agent's card is read (after ``start``)."""
    return A2aAgentSources(
        settings.a2a.agents, registry, default_call_timeout=settings.tools.timeout
    )


def context_limits(settings: Settings) -> ContextLimits:
    """The model's context budget (``core.context``) from ``[llm]`` and ``[tools]``."""
    llm = settings.llm
    window = llm.context_tokens or default_window(llm.model)
    return ContextLimits(
        window=window,
        reserve_output=min(llm.reserve_output_tokens, window - 1),
        compaction=llm.compaction,
        max_result_chars=settings.tools.max_result_chars,
    )


def build_engine(settings: Settings) -> Engine:
    limits = EngineLimits(
        run=RunLimits(
            system_prompt=settings.llm.system_prompt,
            max_tool_rounds=settings.llm.max_tool_rounds,
            tool_timeout=settings.tools.timeout,
            approval=settings.tools.approval,
            idempotent=settings.tools.idempotent,
            in_doubt=settings.tools.in_doubt,
            interrupt_expiry=settings.tools.interrupt_expiry,
            max_state_bytes=settings.engine.max_state_bytes,
            max_event_bytes=settings.engine.max_event_bytes,
            buffer_bytes=settings.engine.stream_buffer_bytes,
            context=context_limits(settings),
        ),
        max_concurrent_runs=settings.engine.max_concurrent_runs,
        max_runs_per_caller=settings.runs_per_caller,
        tokens_per_day=settings.auth.tokens_per_day,
        lease_seconds=settings.engine.lease_seconds,
        resume_runs=settings.engine.resume_runs,
        max_resumes=settings.engine.max_resumes,
        event_retention=settings.engine.event_retention,
    )
    tracer = otel_tracer.tracer() if tracing.enabled() else NO_TRACER
    return Engine(
        open_store(settings.engine.store, retry_seconds=settings.engine.store_retry_seconds),
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
