"""MCP tasks: the ``io.modelcontextprotocol/tasks`` extension (MCP 2026-07-28, SEP-2663).

A client that declares the extension on a ``tools/call`` of ``send_message`` or ``answer``
gets a task handle (``resultType: "task"``) as soon as the engine has started the turn,
instead of an answer at its end. The turn runs on in the engine whatever happens to the
call; the client polls ``tasks/get`` until the task is ``completed`` (its ``result`` the
tool's answer, exactly what the call would have returned) or ``cancelled``, and may stop it
with ``tasks/cancel``. A client that does not declare the extension gets the answer as
before. Calls the engine refuses before the run starts (bad arguments, an unknown
conversation, a caller over its limits) are answered at once, as without a task.

A task is the engine's run: its id is the run's id, its state the run's (``GetRun``), its
answer the run's messages (``ListMessages``). Nothing lives in the facade, so any worker
answers ``tasks/get`` (the HTTP server is stateless), a restarted facade still knows every
task, and each caller sees only its own (the engine scopes runs to their owner: another
caller's task is "not found").

Statuses: a running turn is ``working``; a turn that ended — answered, failed (a tool error,
``isError``), or waiting for a person (``status: input_required`` in the answer, to be given
with the ``answer`` tool) — is ``completed``; a turn interrupted (``tasks/cancel``, the
conversation's interrupt, a shutdown) is ``cancelled``. ``failed`` is for protocol errors
only, as the extension says, and the engine has none to report. ``tasks/update`` is
acknowledged: these tasks never ask for input through ``inputRequests``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.server import require_client_extension
from mcp_types import CallToolRequestParams, RequestParams
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from pydantic import Field

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.shapes import interrupt_json
from web_facade.mcp.server import (
    TASK_MODE,
    EngineAccess,
    TaskStart,
    answer_result,
    outcome,
)

__all__ = ["POLL_INTERVAL_MS", "TASK_TOOLS", "TASKS_EXTENSION", "RunTasks", "task_id_of"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

TASK_TOOLS = frozenset({"send_message", "answer"})
"""The tools whose calls run as tasks for a client that declares the extension."""

POLL_INTERVAL_MS = 1000
"""How often a client is asked to poll ``tasks/get``, in milliseconds."""

_MAX_TASK_ID = 128

_WORKING = {pb.RUN_STATUS_RUNNING, pb.RUN_STATUS_UNSPECIFIED}


class TaskParams(RequestParams):
    """``tasks/get``, ``tasks/cancel`` and ``tasks/update`` params. ``taskId`` is taken as
    any value and checked by :func:`task_id_of`, so a refusal names the problem in our
    words (the SDK answers a pydantic failure with a bare "Invalid request parameters")."""

    task_id: Any = Field(alias="taskId", default=None)


class UpdateParams(TaskParams):
    input_responses: Any = Field(alias="inputResponses", default=None)


def task_id_of(params: TaskParams) -> str:
    """The request's ``taskId``; -32602 naming what is wrong with it."""
    task_id = params.task_id
    rule = f"the id of a task, a string of 1 to {_MAX_TASK_ID} characters"
    if task_id is None:
        problem = f"taskId is required: {rule}"
    elif not isinstance(task_id, str):
        problem = f"taskId must be a string ({rule}), got {_json_type(task_id)}"
    elif not task_id:
        problem = f"taskId must not be empty: {rule}"
    elif len(task_id) > _MAX_TASK_ID:
        problem = f"taskId is {len(task_id):,} characters long; {rule}"
    else:
        return task_id
    raise MCPError(INVALID_PARAMS, problem)


def _json_type(value: object) -> str:
    """What JSON calls ``value``'s type."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return "a value of another type"


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(
        capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions
    )


class RunTasks(Extension):
    """Runs ``send_message`` and ``answer`` as tasks, each the engine's run."""

    identifier = TASKS_EXTENSION

    def __init__(self, engine: EngineAccess) -> None:
        self.engine = engine

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get),
            MethodBinding("tasks/cancel", TaskParams, self._cancel),
            MethodBinding("tasks/update", UpdateParams, self._update),
        )

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        if params.name not in TASK_TOOLS or not _declared(ctx):
            return await call_next(ctx)
        start = TaskStart()
        token = TASK_MODE.set(start)
        try:
            result = await call_next(ctx)
        finally:
            TASK_MODE.reset(token)
        if not start.run_id:  # refused before a run started: the answer says why
            return result
        # Answered only once tasks/get finds the run (the extension's rule).
        run = await self._run_info(start.run_id, Context(request_context=ctx))
        return {"resultType": "task", **_task(run)}

    # -- the methods ----------------------------------------------------------------

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        context = Context(request_context=ctx)
        run = await self._run_info(task_id_of(params), context)
        task = _task(run)
        if task["status"] == "completed":
            result = await self._answer(run, context)
            task["result"] = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return {"resultType": "complete", **task}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        context = Context(request_context=ctx)
        run = await self._run_info(task_id_of(params), context)
        if run.status in _WORKING:
            stop = pb.InterruptRequest(session_id=run.session_id, run_id=run.id)
            await self._call("Interrupt", stop, context)
        return {"resultType": "complete"}

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateParams
    ) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        task_id = task_id_of(params)
        if params.input_responses is not None and not isinstance(params.input_responses, dict):
            got = _json_type(params.input_responses)
            raise MCPError(INVALID_PARAMS, f"inputResponses must be an object, got {got}")
        await self._run_info(task_id, Context(request_context=ctx))
        # No task here asks for input through inputRequests: every response is for a key
        # that is not outstanding, which the extension says to ignore.
        return {"resultType": "complete"}

    # -- the engine -----------------------------------------------------------------

    async def _call(self, method: str, request: Any, ctx: Context) -> Any:
        try:
            return await self.engine.unary(method, request, ctx)
        except grpc.RpcError as exc:
            failure = self.engine.failure(exc, ctx)
            if isinstance(failure, MCPError):
                raise failure from None
            raise MCPError(INTERNAL_ERROR, str(failure)) from None

    async def _run_info(self, task_id: str, ctx: Context) -> pb.RunInfo:
        try:
            run: pb.RunInfo = await self.engine.unary(
                "GetRun", pb.GetRunRequest(run_id=task_id), ctx
            )
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise MCPError(INVALID_PARAMS, f"task {task_id[:64]!r} not found") from None
            failure = self.engine.failure(exc, ctx)
            if isinstance(failure, MCPError):
                raise failure from None
            raise MCPError(INTERNAL_ERROR, str(failure)) from None
        return run

    async def _answer(self, run: pb.RunInfo, ctx: Context) -> Any:
        """The tool's answer for the finished ``run``: its assistant text, and how it ended."""
        text: list[str] = []
        after = ""
        while True:
            page = await self._call(
                "ListMessages",
                pb.ListMessagesRequest(
                    session_id=run.session_id, run_id=run.id, after_message_id=after, limit=1000
                ),
                ctx,
            )
            text += [
                part.text.text
                for message in page.messages
                if message.role == pb.ROLE_ASSISTANT
                for part in message.content
                if part.HasField("text")
            ]
            if not page.has_more or not page.messages:
                break
            after = page.messages[-1].id
        status, detail = "completed", ""
        if run.status == pb.RUN_STATUS_FAILED:
            status, detail = "failed", run.error_message
        elif run.status == pb.RUN_STATUS_INPUT_REQUIRED:
            status, detail = outcome(pb.OUTCOME_TYPE_INTERRUPT, run.interrupts)
        interrupts = [interrupt_json(i) for i in run.interrupts]
        return answer_result(run.session_id, run.id, status, "".join(text), detail, interrupts)


def _task(run: pb.RunInfo) -> dict[str, Any]:
    """The extension's Task for ``run``: its status, times and polling hint."""
    created = run.start_time.ToJsonString()
    task: dict[str, Any] = {
        "taskId": run.id,
        "status": "working",
        "createdAt": created,
        "lastUpdatedAt": run.end_time.ToJsonString() if run.HasField("end_time") else created,
        "ttlMs": None,  # kept as long as the conversation is
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if run.status in _WORKING:
        task["statusMessage"] = "The agent is answering."
    elif run.status == pb.RUN_STATUS_INTERRUPTED:
        task["status"], task["statusMessage"] = "cancelled", "The run was interrupted."
    else:
        task["status"] = "completed"
    return task
