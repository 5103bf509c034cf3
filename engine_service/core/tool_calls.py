"""One call of an engine tool: its arguments parsed, its time bounded, its span.

Whatever the tool does, the run gets a ``ToolResult`` (an error result for an unknown
tool, bad arguments, a timeout or an exception) and a ``ToolOutcome`` for its report.

A call's state is durable: *requested* (its round's assistant message stored), *started*
(a ``STEP_STARTED`` event named ``tool_call:<id>`` stored before a tool that is not
idempotent runs, in the same write-behind as the run's other events, and waited for), and
*done* (its result stored; ``STEP_FINISHED`` follows). A resume (``core.resume``) runs a
call that never started again, and treats one started but not done as *in doubt*.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from engine_service.core import events as ev
from engine_service.core.hitl import needs_approval
from engine_service.core.models import ToolCall
from engine_service.core.observe import ToolOutcome
from engine_service.core.registry import ToolRegistry
from engine_service.core.tool import Answers, Delegated, ToolContext, ToolError, ToolResult
from engine_service.core.trace import Tracer
from engine_service.core.transcript import Transcript

__all__ = ["STEP_PREFIX", "ToolRunner", "call_tool", "step_call_id"]

STEP_PREFIX = "tool_call:"
"""The ``STEP_STARTED``/``STEP_FINISHED`` name of a call that ran: this + its id."""


def step_call_id(step_name: str) -> str:
    """The tool call id a step names ("" when the step is not a tool call's)."""
    return step_name.removeprefix(STEP_PREFIX) if step_name.startswith(STEP_PREFIX) else ""


log = logging.getLogger(__name__)


class ToolRunner:
    """Runs a run's engine tools concurrently; each result is added to the transcript as
    it lands, and the calls still running when the run stops get a closing result."""

    def __init__(
        self,
        tools: ToolRegistry,
        transcript: Transcript,
        context: Callable[[str], ToolContext],
        *,
        default_limit: float,
        tracer: Tracer,
        outcomes: list[tuple[str, str]],
        stopping: Callable[[], bool] = lambda: False,
        store_now: Callable[[], Awaitable[None]] | None = None,
        idempotent: Sequence[str] = (),
    ) -> None:
        """``stopping``: whether the run stops after these calls (handed over to another
        replica): their results are stored, and ``run`` ends with ``CancelledError``.
        Calls of tools not listed ``idempotent`` (names or globs) are marked started
        (``STEP_STARTED``, through ``emit`` of the transcript) and ``store_now`` is awaited
        before they run; ``STEP_FINISHED`` follows their results."""
        self.tools = tools
        self._store_now = store_now
        self._idempotent = tuple(idempotent)
        self._started: set[str] = set()
        self._stopping = stopping
        self.transcript = transcript
        self._context = context
        self.default_limit = default_limit
        self.tracer = tracer
        self.outcomes = outcomes
        self._pending: dict[str, ToolCall] = {}
        self._delegated: list[tuple[ToolCall, Delegated]] = []

    async def run(
        self, calls: Sequence[ToolCall], answers: Mapping[str, Answers] | None = None
    ) -> None:
        """Run the calls concurrently; each result is published as it lands. ``answers``:
        by call id, a person's answers for a call that asked (``Delegated``) before."""
        self._pending = {c.id: c for c in calls}
        marked = [c for c in calls if not needs_approval(c.name, self._idempotent)]
        if marked and self._store_now is not None:
            for call in marked:
                self.transcript.emit(ev.StepStarted(STEP_PREFIX + call.id))
            await self._store_now()  # durable: a resume knows they may have run
            self._started.update(c.id for c in marked)
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(self._run(call, (answers or {}).get(call.id)))
        if self._stopping():
            raise asyncio.CancelledError  # the results are stored: stop before the next round

    @property
    def running(self) -> bool:
        """Whether calls are running (their results not stored yet)."""
        return bool(self._pending)

    def take_delegated(self) -> list[tuple[ToolCall, Delegated]]:
        """The calls that ended asking a person (``Delegated``) since the last take: they
        have no result yet; the run raises their interrupts as its own."""
        taken, self._delegated = self._delegated, []
        return taken

    async def _run(self, call: ToolCall, answers: Answers | None = None) -> None:
        context = self._context(call.id)
        context.answers = answers
        result = await call_tool(
            self.tools,
            call,
            context,
            default_limit=self.default_limit,
            tracer=self.tracer,
            outcomes=self.outcomes,
        )
        if result.delegated is not None:
            self._pending.pop(call.id, None)  # no result yet: the run asks its person
            self._delegated.append((call, result.delegated))
            return
        await self.store(call, result)

    async def store(self, call: ToolCall, result: ToolResult) -> None:
        """The call's result, in the transcript (and so in the store and the stream)."""
        self._pending.pop(call.id, None)
        await self.transcript.add_result(call, result)
        if call.id in self._started:
            self._started.discard(call.id)
            self.transcript.emit(ev.StepFinished(STEP_PREFIX + call.id))

    async def close_pending(self, result: ToolResult) -> None:
        """Give every call still running ``result`` (the run was stopped)."""
        for call in list(self._pending.values()):
            await self.store(call, result)


async def call_tool(
    tools: ToolRegistry,
    call: ToolCall,
    context: ToolContext,
    *,
    default_limit: float,
    tracer: Tracer,
    outcomes: list[tuple[str, str]],
) -> ToolResult:
    """The tool's result, in a span: tool name, outcome (its duration is the span's). The
    call's (name, ``ToolOutcome``) is added to ``outcomes``, also when it is cut short.
    The call may take the tool's own timeout, else ``default_limit`` seconds."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.id,
    }
    with tracer.span(f"execute_tool {call.name}", attributes) as span:
        outcome = ToolOutcome.ERROR  # also if the call is cut short (a stop)
        try:
            result, outcome = await _invoke(tools, call, context, default_limit)
        finally:
            outcomes.append((call.name, outcome))
        span.set("agentik.tool.outcome", "error" if result.is_error else "ok")
        if result.is_error:
            span.fail("tool_error", result.content[:200])
        return result


async def _invoke(
    tools: ToolRegistry, call: ToolCall, context: ToolContext, default_limit: float
) -> tuple[ToolResult, str]:
    """The tool's result and its ``ToolOutcome``."""
    tool = tools.get(call.name)
    if tool is None:
        message = f"error: unknown tool {call.name!r}"
        return ToolResult(message, is_error=True), ToolOutcome.UNKNOWN
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        message = f"error: arguments are not valid JSON ({exc})"
        return ToolResult(message, is_error=True), ToolOutcome.ERROR
    if not isinstance(arguments, dict):
        message = "error: arguments must be a JSON object"
        return ToolResult(message, is_error=True), ToolOutcome.ERROR
    limit = tool.timeout if tool.timeout is not None else default_limit
    try:
        async with asyncio.timeout(limit):
            result = await tool.call(arguments, context)
    except ToolError as exc:
        return ToolResult(f"error: {exc}", is_error=True), ToolOutcome.ERROR
    except TimeoutError:
        message = f"error: tool {call.name!r} timed out after {limit:g} s"
        return ToolResult(message, is_error=True), ToolOutcome.TIMEOUT
    except Exception as exc:
        log.warning("tool %s raised", call.name, exc_info=True)
        message = f"error: tool {call.name!r} failed: {exc}"
        return ToolResult(message, is_error=True), ToolOutcome.ERROR
    return result, ToolOutcome.ERROR if result.is_error else ToolOutcome.OK
