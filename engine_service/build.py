"""Builds an ``Engine`` from ``Settings``: store, model and tools chosen by config."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from agentik import tracing
from agentik.config import AgentConfig, ConfigError, Settings
from engine_service import otel_tracer
from engine_service.core.agents import AgentProfile, Agents, ToolView, unmatched
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
from engine_service.llm.refusals import LLM_SETTINGS, SettingNames
from engine_service.stores import open_store
from engine_service.tools.a2a.sources import A2aAgentSources
from engine_service.tools.agents import AGENT_SOURCE, AgentTool
from engine_service.tools.builtin import builtin_tools
from engine_service.tools.mcp.sources import McpToolSources

__all__ = [
    "build_a2a_agents",
    "build_delivery_worker",
    "build_agents",
    "build_engine",
    "build_mcp_sources",
    "build_model",
    "build_tools",
    "connected_briefly",
]

T = TypeVar("T")

log = logging.getLogger(__name__)


def build_model(settings: Settings, agent: AgentConfig | None = None) -> ChatModel:
    """The OpenAI-compatible model when an endpoint or key is configured, else offline;
    ``agent``'s own model and endpoint where it has them, ``[llm]``'s where not."""
    llm = settings.llm
    base_url, api_key, model = llm.base_url, llm.api_key, llm.model
    headers: dict[str, str] = {}
    names = LLM_SETTINGS
    if agent is not None:
        if agent.own_endpoint:
            base_url, api_key, headers = agent.base_url, agent.api_key, agent.headers
        model = agent.model or model
        names = SettingNames.of_agent(
            agent.name, own_endpoint=agent.own_endpoint, own_model=agent.model is not None
        )
    if base_url or api_key:
        return OpenAIChatModel(
            base_url=base_url or "https://api.openai.com/v1",
            api_key=api_key or "not-needed",
            model=model,
            timeout=llm.timeout,
            first_token_timeout=llm.first_token_timeout,
            max_retries=llm.max_retries,
            headers=headers,
            max_idle_connections=llm.max_idle_connections,
            idle_timeout=llm.idle_timeout,
            settings=names,
        )
    return OfflineChatModel()


def build_tools(settings: Settings) -> ToolRegistry:
    """The native and Python tools; MCP tools join when their servers connect
    (``build_mcp_sources``), remote agents with ``build_a2a_agents``. A Python tool that
    cannot load, or an agent named like one of these tools, is a ``ConfigError``."""
    registry = ToolRegistry()
    for tool in builtin_tools():
        registry.register(tool)
    if settings.tools.ask_user or any(agent.ask_user for agent in settings.agent.agents):
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


def context_limits(settings: Settings, agent: AgentConfig | None = None) -> ContextLimits:
    """The model's context budget (``core.context``) from ``[llm]`` and ``[tools]``, and
    ``agent``'s own settings where it has them."""
    llm = settings.llm
    if agent is not None:
        llm = replace(
            llm,
            model=agent.model or llm.model,
            context_tokens=_either(agent.context_tokens, llm.context_tokens),
            reserve_output_tokens=_either(agent.reserve_output_tokens, llm.reserve_output_tokens),
            compaction=agent.compaction or llm.compaction,
        )
    window = llm.context_tokens or default_window(llm.model)
    return ContextLimits(
        window=window,
        reserve_output=min(llm.reserve_output_tokens, window - 1),
        compaction=llm.compaction,
        max_result_chars=settings.tools.max_result_chars,
        summary_timeout=llm.round_timeout,
    )


def _either(own: int | None, default: int) -> int:
    return default if own is None else own


def _agent_configs(settings: Settings) -> list[AgentConfig]:
    """Every agent served, the default first: its ``[[agents]]`` entry, or the top-level
    settings alone (an entry with nothing of its own)."""
    default = settings.agent.name
    own = {agent.name: agent for agent in settings.agent.agents}
    first = own.pop(default, None) or AgentConfig(
        name=default, description=settings.a2a.description
    )
    return [first, *own.values()]


def delegation_tools(settings: Settings, registry: ToolRegistry) -> list[AgentTool]:
    """The tool of each local agent another lists as ``agent:NAME`` (``core.delegation``),
    registered in ``registry``; ``ConfigError`` for a NAME no agent has."""
    configs = {agent.name: agent for agent in _agent_configs(settings)}
    tools: dict[str, AgentTool] = {}
    for agent in settings.agent.agents:
        for pattern in agent.tools or ():
            if not pattern.startswith(AGENT_SOURCE):
                continue
            target = pattern.removeprefix(AGENT_SOURCE)
            if target not in configs:
                raise ConfigError(
                    f"invalid tools of agent {agent.name!r}: {pattern!r} names no agent; "
                    f"the agents are: {', '.join(configs)}"
                )
            if target in tools:
                continue
            tool = AgentTool(
                target,
                configs[target].description,
                max_depth=settings.agent.max_depth,
                timeout=settings.llm.timeout * 2,
            )
            try:
                registry.register(tool)
            except ValueError as exc:
                raise ConfigError(f"the tool of agent {target!r}: {exc}") from None
            tools[target] = tool
    return list(tools.values())


def build_agents(
    settings: Settings, registry: ToolRegistry, default_model: ChatModel, run: RunLimits
) -> Agents:
    """Each agent's profile: its model (the default one when it names no model or
    endpoint of its own), its view of ``registry``, its prompt, approvals and limits."""
    profiles = []
    for agent in _agent_configs(settings):
        mine = agent.model is None and not agent.own_endpoint
        limits = replace(
            run,
            system_prompt=_either_text(agent.system_prompt, run.system_prompt),
            max_tool_rounds=agent.max_tool_rounds or run.max_tool_rounds,
            approval=run.approval if agent.approval is None else agent.approval,
            context=context_limits(settings, agent),
            input_modalities=agent.input_modalities or run.input_modalities,
        )
        ask_user = settings.tools.ask_user if agent.ask_user is None else agent.ask_user
        profiles.append(
            AgentProfile(
                name=agent.name,
                model=default_model if mine else build_model(settings, agent),
                tools=ToolView(registry, agent.tools, ask_user=ask_user),
                limits=limits,
                description=agent.description,
                max_runs=agent.max_runs,
            )
        )
    return Agents(profiles, settings.agent.name)


def _either_text(own: str | None, default: str) -> str:
    return default if own is None else own


def warn_unmatched(settings: Settings, registry: ToolRegistry) -> list[str]:
    """Log (and return) a warning for each tool glob or approval entry that matches no
    tool: a misspelt name would otherwise silently offer nothing or ask for nothing.
    Globs that could match a configured MCP server's tools (``server__...``) are not
    judged: those tools are known once the server connects."""
    names = [*registry.names(), *(agent.name for agent in settings.a2a.agents)]
    pending = [f"{server.name}__" for server in settings.mcp.servers]
    said = []
    for pattern in unmatched(settings.tools.approval, names, pending):
        said.append(f"[tools] approval entry {pattern!r} matches no tool: no call asks for it")
    for agent in settings.agent.agents:
        for key, patterns in (("tools", agent.tools or ()), ("approval", agent.approval or ())):
            real = [p for p in patterns if not p.startswith("agent:")]
            for pattern in unmatched(real, names, pending):
                said.append(f"agent {agent.name!r}: {key} entry {pattern!r} matches no tool")
    for line in said:
        log.warning("%s", line)
    return said


def build_engine(settings: Settings) -> Engine:
    limits = EngineLimits(
        run=RunLimits(
            system_prompt=settings.llm.system_prompt,
            max_tool_rounds=settings.llm.max_tool_rounds,
            max_answer_bytes=settings.llm.max_answer_bytes,
            max_tool_calls_per_round=settings.llm.max_tool_calls_per_round,
            round_timeout=settings.llm.round_timeout,
            tool_timeout=settings.tools.timeout,
            approval=settings.tools.approval,
            idempotent=settings.tools.idempotent,
            in_doubt=settings.tools.in_doubt,
            interrupt_expiry=settings.tools.interrupt_expiry,
            max_state_bytes=settings.engine.max_state_bytes,
            max_event_bytes=settings.engine.max_event_bytes,
            buffer_bytes=settings.engine.stream_buffer_bytes,
            context=context_limits(settings),
            input_modalities=settings.llm.input_modalities,
            max_media_parts=settings.llm.max_media_parts,
        ),
        max_concurrent_runs=settings.engine.max_concurrent_runs,
        max_runs_per_caller=settings.runs_per_caller,
        max_streams=settings.engine_streams,
        max_streams_per_caller=settings.streams_per_caller,
        max_sessions_per_caller=settings.sessions_per_caller,
        tokens_per_day=settings.auth.tokens_per_day,
        lease_seconds=settings.engine.lease_seconds,
        resume_runs=settings.engine.resume_runs,
        max_resumes=settings.engine.max_resumes,
        event_retention=settings.engine.event_retention,
    )
    tracer = otel_tracer.tracer() if tracing.enabled() else NO_TRACER
    model = build_model(settings)
    tools = build_tools(settings)
    delegates = delegation_tools(settings, tools)
    warn_unmatched(settings, tools)
    engine = Engine(
        open_store(
            settings.engine.store,
            retry_seconds=settings.engine.store_retry_seconds,
            batch_max=settings.engine.store_batch_max,
        ),
        model,
        tools,
        limits,
        tracer,
        agents=build_agents(settings, tools, model, limits.run),
    )
    for tool in delegates:
        tool.engine = engine
    return engine


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
