"""``GET /agui/capabilities`` and ``GET /agui/{agent}/capabilities``: what an agent supports,
as AG-UI's ``AgentCapabilities`` (the 2026 capabilities discovery).

Built from what the engine says of the agent (``GetAgent``: its tools with their schemas,
its model's input modalities, its tool rounds) and from what the facade itself does
(streaming, state snapshots and deltas, reasoning, interrupts). Only
what agentik supports is declared; an absent field means "not declared".
"""

from __future__ import annotations

from typing import Any

from ag_ui.core import (
    AgentCapabilities,
    ExecutionCapabilities,
    HumanInTheLoopCapabilities,
    IdentityCapabilities,
    MultimodalCapabilities,
    MultimodalInputCapabilities,
    ReasoningCapabilities,
    StateCapabilities,
    Tool,
    ToolsCapabilities,
    TransportCapabilities,
)

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.proto_json import json_value

__all__ = ["ACTIVITY_TYPES", "capabilities"]

ACTIVITY_TYPES = ("tool_progress", "compaction")
"""The ``activityType`` values of the ACTIVITY events a run may carry (docs/agui.md)."""


def capabilities(agent: pb.Agent) -> dict[str, Any]:
    """The agent's ``AgentCapabilities`` as wire JSON (camelCase, absent fields left out)."""
    takes = set(agent.input_modalities)
    tools = [
        Tool(
            name=spec.name,
            description=spec.description,
            parameters=json_value(spec.parameters) if spec.HasField("parameters") else None,
        )
        for spec in agent.tool_specs
    ]
    declared = AgentCapabilities(
        identity=IdentityCapabilities(
            name=agent.name,
            type="agentik",
            description=agent.description or None,
            metadata={"model": agent.model, "default": agent.is_default},
        ),
        transport=TransportCapabilities(streaming=True),
        tools=ToolsCapabilities(
            supported=True, items=tools, parallel_calls=True, client_provided=True
        ),
        state=StateCapabilities(snapshots=True, deltas=True, persistent_state=True),
        reasoning=ReasoningCapabilities(supported=True, streaming=True),
        multimodal=MultimodalCapabilities(
            input=MultimodalInputCapabilities(
                image="image" in takes,
                audio=False,
                video=False,
                pdf="document" in takes,
                file=False,
            )
        ),
        execution=ExecutionCapabilities(max_iterations=agent.max_tool_rounds or None),
        human_in_the_loop=HumanInTheLoopCapabilities(
            supported=True, approvals=True, interrupts=True
        ),
        custom={"agentik": {"activityTypes": list(ACTIVITY_TYPES)}},
    )
    out: dict[str, Any] = declared.model_dump(mode="json", by_alias=True)
    return out
