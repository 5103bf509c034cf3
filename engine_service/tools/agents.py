"""Local agents as tools of other agents, in-process (``tools = ["agent:researcher"]``).

An agent allowed ``agent:NAME`` is offered the tool ``agent__NAME``. A call of it is a run
of its own: agent NAME's, in a new child conversation owned by the principal of the
calling conversation, its ``parent_run_id`` the calling run. The sub-run's progress is
streamed as the call's tool progress (``CUSTOM tool_progress`` events naming the child
conversation); the call's result is the sub-agent's answer and the child's id. Stopping
the parent stops the sub-run (the call is cancelled, and cancels it).

Delegation depth is bounded (``[agent] max_depth``): the chain of agents is carried in a
context variable, which the sub-run's task inherits, so a loop (a → b → a ...) ends with a
clear error result naming the chain.

An approval or question inside the sub-agent reaches the parent's person: the sub-run ends
waiting for input in its child conversation, and the call returns its interrupts
(``ToolResult.delegated``) instead of a result; the calling run raises them as its own
(``core.hitl.delegated_interrupt``) and ends waiting for its person. Their answers come
back as ``ToolContext.answers``: the call then resumes the sub-run with them, and follows
it to its answer (or to its next question, which goes up the same way).
"""

from __future__ import annotations

import asyncio
import json
from contextvars import ContextVar
from typing import TYPE_CHECKING

from engine_service.core import events as ev
from engine_service.core.caller import Caller
from engine_service.core.history import new_id
from engine_service.core.models import JSON, Message, Role, RunInput, TextPart
from engine_service.core.tool import (
    TOOL_PROGRESS,
    Delegated,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
)

if TYPE_CHECKING:
    from engine_service.core.engine import Engine, RunHandle

__all__ = ["AGENT_SOURCE", "TOOL_PROGRESS", "AgentTool", "agent_tool_name"]

AGENT_SOURCE = "agent:"
"""The registry source of the tool of a local agent: ``agent:NAME``, as in ``tools``."""
MAX_PROGRESS_CHARS = 500

_CHAIN: ContextVar[tuple[str, ...]] = ContextVar("agentik_delegation_chain", default=())
"""The agents delegated to, outermost first, in the run this task serves."""


def agent_tool_name(agent: str) -> str:
    """The tool name of the local agent ``agent``."""
    return f"agent__{agent}"


class AgentTool(Tool):
    """A local agent, offered as a tool to the agents that list ``agent:NAME``."""

    def __init__(
        self, target: str, description: str, *, max_depth: int, timeout: float | None = None
    ) -> None:
        self.target = target
        self.name = agent_tool_name(target)
        self.source = f"{AGENT_SOURCE}{target}"
        about = f": {description}" if description else ""
        self.description = (
            f"Delegate a task to the agent {target!r}{about}. Give it the whole task in "
            "`message` (it does not see this conversation); its answer is the result."
        )
        self.parameters: dict[str, JSON] = {
            "type": "object",
            "properties": {
                "message": {"type": "string", "description": "The task, complete in itself."}
            },
            "required": ["message"],
            "additionalProperties": False,
        }
        self.max_depth = max_depth
        self.timeout = timeout
        self.engine: Engine | None = None
        """Set once the engine is built (the tool is registered before)."""

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        engine = self.engine
        if engine is None:
            raise ToolError(f"agent {self.target!r} is not available")
        chain = _CHAIN.get()
        parent = await engine.store.get_session(context.session_id)
        if context.answers is not None:
            # The parent's person answered what the sub-run asked: carry it down (the
            # depth was checked when the sub-run began).
            child_id = context.answers.conversation_id
            run_input = RunInput(
                session_id=child_id,
                agent=self.target,
                parent_run_id=context.run_id,
                resume=list(context.answers.entries),
            )
        else:
            message = arguments.get("message")
            if not isinstance(message, str) or not message.strip():
                raise ToolError("`message` must be the task, a non-empty string")
            if len(chain) >= self.max_depth:
                path = " -> ".join((*chain, self.target))
                raise ToolError(
                    f"delegation is too deep: {path} would be more than {self.max_depth} "
                    "agents deep ([agent] max_depth); answer without delegating further"
                )
            child_id = new_id()
            run_input = RunInput(
                session_id=child_id,
                messages=[Message(id=new_id(), role=Role.USER, content=[TextPart(message)])],
                create_session=True,
                agent=self.target,
                parent_run_id=context.run_id,
            )
        token = _CHAIN.set((*chain, self.target))
        try:  # the sub-run's task is made here, and inherits the chain
            handle = await engine.start_run(Caller(parent.owner), run_input)
        finally:
            _CHAIN.reset(token)
        try:
            return await self._follow(engine, handle, child_id, context)
        except asyncio.CancelledError:
            engine.stop_local(child_id, handle.run_id)  # the parent stopped: so does this
            raise

    async def _follow(
        self, engine: Engine, handle: RunHandle, child_id: str, context: ToolContext
    ) -> ToolResult:
        texts: dict[str, list[str]] = {}
        progress = 0

        def report(text: str) -> None:
            nonlocal progress
            progress += 1
            value: JSON = {
                "tool_call_id": context.tool_call_id,
                "progress": progress,
                "total": None,
                "message": text[:MAX_PROGRESS_CHARS],
                "agent": self.target,
                "conversation_id": child_id,
            }
            context.emit(ev.Custom(TOOL_PROGRESS, value))

        async for event in engine.run_events(handle):
            body = event.body
            if isinstance(body, ev.TextMessageContent):
                texts.setdefault(body.message_id, []).append(body.delta)
            elif isinstance(body, ev.TextMessageEnd):
                report("".join(texts.get(body.message_id, [])))
            elif isinstance(body, ev.ToolCallStart):
                report(f"calling {body.tool_call_name}")
            elif isinstance(body, ev.RunError):
                raise ToolError(
                    f"agent {self.target!r} failed ({body.code}): {body.message} "
                    f"(conversation {child_id})"
                )
            elif isinstance(body, ev.RunFinished):
                answer = "".join(texts[list(texts)[-1]]) if texts else ""
                result: dict[str, JSON] = {
                    "agent": self.target,
                    "conversation_id": child_id,
                    "run_id": handle.run_id,
                    "answer": answer,
                }
                if body.interrupts:  # the calling run's person is asked (``Delegated``)
                    result["status"] = "input_required"
                    delegated = Delegated(self.target, child_id, list(body.interrupts))
                    return ToolResult(json.dumps(result, ensure_ascii=False), delegated=delegated)
                return ToolResult(json.dumps(result, ensure_ascii=False))
        raise ToolError(f"agent {self.target!r} ended without an answer (conversation {child_id})")
