"""The MCP server: four tools over the engine's gRPC API.

``send_message`` runs one turn (in a new conversation, or an existing one) and answers with
the assistant's text; while the answer streams it sends MCP progress notifications (when the
client asked for them with a progress token), and an MCP cancellation of the call cancels the
engine call, which stops the run (``cancel_on_disconnect``). A turn that stops for a person
(an approval, a question) answers ``status: input_required`` with the interrupts; ``answer``
gives the decisions (as ``POST /agentik/conversations/{id}/resume`` does) and runs the turn
on. ``list_conversations`` and ``read_conversation`` read the engine's sessions and messages.

Every answer of the two turn tools carries its text as content and its facts as
``structuredContent`` (:class:`Answer`, published as the tools' ``outputSchema``). A client
that declares the tasks extension (``io.modelcontextprotocol/tasks``) on a call of either
gets a task instead of waiting: the turn runs in the engine, and ``tasks/get`` reads it
(:mod:`web_facade.mcp.tasks`).

The server checks no credentials itself: every engine call carries the bearer token as
``authorization`` metadata and the engine decides, exactly as for the web facade. A refused
token is an MCP error (the client's call raises); other engine failures (an unknown
conversation, a failed run) are tool errors the calling model can read.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import uuid
from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Any, Literal, NotRequired, cast

import grpc
from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent
from pydantic import ValidationError
from typing_extensions import TypedDict

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.decisions import resume_entries
from web_facade.agentik.shapes import agent_json, interrupt_json
from web_facade.engine_client import UNARY_TIMEOUT, EngineClient
from web_facade.engine_credentials import forwardable
from web_facade.errors import MCP_WORDS, ApiError, from_rpc_error

__all__ = [
    "MAX_OFFSET",
    "TASK_MODE",
    "UNAUTHORIZED",
    "Answer",
    "EngineAccess",
    "TaskStart",
    "answer_result",
    "build_server",
    "outcome",
]

UNAUTHORIZED = -32010
"""The MCP error code of a call the engine refused for its credentials (JSON-RPC's
server-defined range; the SDK uses -32000 for a closed connection, -32001 for a timeout,
-32020..-32042 for protocol conditions)."""

MAX_OFFSET = 2**31 - 1
"""The largest ``offset`` of ``list_conversations`` (the engine's int32)."""

_TITLE_LENGTH = 60
"""Characters of the first message a new conversation is titled with."""

_ROLES = {
    pb.ROLE_USER: "user",
    pb.ROLE_ASSISTANT: "assistant",
    pb.ROLE_SYSTEM: "system",
    pb.ROLE_DEVELOPER: "developer",
    pb.ROLE_TOOL: "tool",
}


class Answer(TypedDict):
    """A turn's answer (send_message, answer): its conversation, run, status and text."""

    conversation_id: str
    """The conversation: give it to the next send_message to continue it."""
    run_id: str
    status: Literal["completed", "failed", "cancelled", "input_required"]
    answer: str
    """The assistant's text."""
    detail: NotRequired[str]
    """Why the turn failed, was cancelled or waits for a person."""
    interrupts: NotRequired[list[dict[str, Any]]]
    """What the turn waits for (status input_required): give decisions with ``answer``."""


class AgentInfo(TypedDict):
    name: str
    description: str
    model: str
    tools: list[str]
    default: bool


class Agents(TypedDict):
    """The agents this server serves, the default one first."""

    agents: list[AgentInfo]


class ConversationInfo(TypedDict):
    id: str
    title: str
    message_count: int
    updated: str
    """When it last changed (RFC 3339)."""
    running: bool
    """Whether a turn is running in it now."""
    agent: str


class Conversations(TypedDict):
    """A page of the caller's conversations, most recently updated first."""

    total: int
    conversations: list[ConversationInfo]


class ToolCallInfo(TypedDict):
    id: str
    name: str
    arguments: str
    """The call's arguments as the LLM wrote them (JSON text)."""


class MessageInfo(TypedDict):
    id: str
    role: Literal["user", "assistant", "system", "developer", "tool", "unknown"]
    text: str
    tool_calls: NotRequired[list[ToolCallInfo]]
    tool_call_id: NotRequired[str]
    status: NotRequired[Literal["interrupted", "error"]]


class ConversationMessages(TypedDict):
    """A conversation's messages, oldest first."""

    conversation_id: str
    messages: list[MessageInfo]
    has_more: bool


@dataclass(slots=True)
class TaskStart:
    """Set in :data:`TASK_MODE` by the tasks extension around a call it runs as a task: the
    turn tools then return once the engine started the run, and leave it running."""

    run_id: str = ""
    session_id: str = ""


TASK_MODE: contextvars.ContextVar[TaskStart | None] = contextvars.ContextVar(
    "agentik_mcp_task_mode", default=None
)


class EngineAccess:
    """The engine, through the facade's engine client (web_facade/engine_client.py: its
    channel options, balancing and retries), and where the bearer token of its calls
    comes from. The client's calls block: they run in the event loop's executor threads.

    Over HTTP (``/mcp``, ``from_request``): the facade's one client, and each MCP request's
    own ``Authorization`` header. Over stdio (``agentik mcp``): a client to the configured
    target, and one ``token`` for the process (``AGENTIK_TOKEN``).
    """

    def __init__(
        self, client: EngineClient, token: str | None = None, *, from_request: bool = False
    ) -> None:
        self.client = client
        self.target = client.target
        self.token = token or None
        self.from_request = from_request

    async def unary(self, method: str, request: Any, ctx: Context) -> Any:
        """The engine's answer to the unary call ``method``; ``grpc.RpcError`` when it fails."""
        metadata = self.metadata(ctx)
        call = getattr(self.client.engine, method)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, partial(call, request, metadata=metadata, timeout=UNARY_TIMEOUT)
        )

    async def run(self, request: pb.RunRequest, ctx: Context) -> AsyncGenerator[pb.Event, None]:
        """The events of the engine's ``Run``; leaving early cancels the call."""
        call = self.client.engine.Run(request, metadata=self.metadata(ctx))
        loop = asyncio.get_running_loop()
        try:
            while True:
                item = await loop.run_in_executor(None, _next, call)
                if item is None:
                    return
                yield item
        finally:
            call.cancel()  # wakes the executor thread still waiting for the next event

    def _authorization(self, ctx: Context) -> str | None:
        if not self.from_request:
            return forwardable(f"Bearer {self.token}") if self.token else None
        value = (ctx.headers or {}).get("authorization")
        return None if value is None else forwardable(value)

    def metadata(self, ctx: Context) -> tuple[tuple[str, str], ...]:
        """The engine call's metadata for the MCP request ``ctx``."""
        authorization = self._authorization(ctx)
        return (("authorization", authorization),) if authorization else ()

    def failure(self, exc: grpc.RpcError, ctx: Context) -> Exception:
        """The MCP error for a failed engine call: worded by the facade's error table
        (web_facade/errors.py), so no internal address or gRPC text reaches the client."""
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        mapped = from_rpc_error(exc, MCP_WORDS)
        if mapped.status == 401:
            where = "the Authorization header" if self.from_request else "AGENTIK_TOKEN"
            hint = (
                f"the token in {where} was refused"
                if self._authorization(ctx)
                else f"the engine needs a token: set {where}"
            )
            return MCPError(UNAUTHORIZED, f"agentik: {hint} ({mapped.message})")
        if mapped.status == 403:
            return MCPError(UNAUTHORIZED, f"agentik: not allowed: {mapped.message}")
        if code == grpc.StatusCode.UNAVAILABLE and not self.from_request:
            # Over stdio the engine's address is the local user's own setting.
            return ToolError(f"the agentik engine at {self.target} is unavailable")
        name = code.name if code is not None else "UNKNOWN"
        return ToolError(f"{name}: {mapped.message}")


class _Server(MCPServer[Any]):
    """The SDK's server, with argument errors said in our words, not pydantic's."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc, UnexpectedToolError) or not isinstance(
                exc.__cause__, ValidationError
            ):
                raise
            problems = "; ".join(_problem(error) for error in exc.__cause__.errors()[:5])
            raise ToolError(f"invalid arguments for {name}: {problems}") from None


_PROBLEMS = {
    "missing": "is required",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be an array",
    "dict_type": "must be an object",
    "extra_forbidden": "is not an argument of this tool",
}


def _problem(error: Any) -> str:
    field = ".".join(str(part) for part in error.get("loc", ())) or "the arguments"
    return f"{field} {_PROBLEMS.get(error.get('type', ''), 'has an unacceptable value')}"


def build_server(engine: EngineAccess) -> MCPServer[Any]:
    """The MCP server with agentik's tools, calling ``engine``."""
    from web_facade.mcp.tasks import RunTasks  # beside this module: it reads the same runs

    server: MCPServer[Any] = _Server(
        name="agentik",
        instructions="Talk to the agentik agent: send_message starts or continues a "
        "conversation; when it answers status input_required, answer gives the person's "
        "decisions; list_conversations and read_conversation read them back; "
        "list_agents names the agents send_message may talk to.",
        extensions=[RunTasks(engine)],
    )

    @server.tool()
    async def send_message(
        text: str, ctx: Context, conversation_id: str | None = None, agent: str | None = None
    ) -> Annotated[CallToolResult, Answer]:
        """Send a message to the agent and return its answer.

        Without conversation_id a new conversation is started; its id is in the result
        (structured content), to continue it with the next message. agent: the agent a
        new conversation talks to (list_agents); left out, the default agent. A
        conversation keeps its agent.
        """
        message = pb.Message(
            role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))]
        )
        # A new conversation is made by the run itself (create_session), so a run the
        # engine refuses (a per-caller limit, overload) leaves no empty conversation.
        request = pb.RunRequest(
            session_id=conversation_id or uuid.uuid4().hex,
            messages=[message],
            create_session=not conversation_id,
            agent=agent or "",
        )
        title = "" if conversation_id else text[:_TITLE_LENGTH]
        try:
            return await _run(engine, ctx, request, title=title)
        except grpc.RpcError as exc:
            raise engine.failure(exc, ctx) from exc

    @server.tool()
    async def answer(
        conversation_id: str, decisions: list[dict[str, Any]], ctx: Context
    ) -> Annotated[CallToolResult, Answer]:
        """Answer what a conversation waits for, then return the agent's answer.

        Use it after send_message (or answer) returned status input_required: give one
        decision per interrupt listed there. An approval: {"interrupt_id": ID, "approve":
        true} (with "arguments": {...} to change the call), or {"interrupt_id": ID,
        "approve": false, "reason": "..."} to decline. A question: {"interrupt_id": ID,
        "answer": "..."}.
        """
        try:
            entries = resume_entries({"decisions": decisions})
        except ApiError as exc:
            raise ToolError(exc.message) from None
        request = pb.RunRequest(session_id=conversation_id, resume=entries)
        try:
            return await _run(engine, ctx, request)
        except grpc.RpcError as exc:
            raise engine.failure(exc, ctx) from exc

    @server.tool()
    async def list_agents(ctx: Context) -> Agents:
        """The agents this server serves: name, description, model and tools; the default
        one (used when send_message names none) first."""
        try:
            listed = await engine.unary("ListAgents", pb.ListAgentsRequest(), ctx)
        except grpc.RpcError as exc:
            raise engine.failure(exc, ctx) from exc
        return cast(Agents, {"agents": [agent_json(a) for a in listed.agents]})

    @server.tool()
    async def list_conversations(
        ctx: Context, limit: int = 20, offset: int = 0, agent: str = ""
    ) -> Conversations:
        """The conversations the caller may see, most recently updated first; ``agent``:
        only that agent's (see list_agents)."""
        if offset > MAX_OFFSET:
            raise ToolError(f"offset must be between 0 and {MAX_OFFSET}; got {offset}")
        request = pb.ListSessionsRequest(
            limit=max(1, min(limit, 1000)), offset=max(0, offset), agent=agent
        )
        try:
            page = await engine.unary("ListSessions", request, ctx)
        except grpc.RpcError as exc:
            raise engine.failure(exc, ctx) from exc
        return {
            "total": page.total,
            "conversations": [
                {
                    "id": s.id,
                    "title": s.title,
                    "message_count": s.message_count,
                    "updated": s.update_time.ToJsonString(),
                    "running": bool(s.active_run_id),
                    "agent": s.agent,
                }
                for s in page.sessions
            ],
        }

    @server.tool()
    async def read_conversation(
        conversation_id: str, ctx: Context, limit: int = 100
    ) -> ConversationMessages:
        """The messages of a conversation, oldest first (the first `limit`)."""
        request = pb.ListMessagesRequest(session_id=conversation_id, limit=max(1, min(limit, 1000)))
        try:
            page = await engine.unary("ListMessages", request, ctx)
        except grpc.RpcError as exc:
            raise engine.failure(exc, ctx) from exc
        return {
            "conversation_id": conversation_id,
            "messages": [_message(m) for m in page.messages],
            "has_more": page.has_more,
        }

    return server


async def _run(
    engine: EngineAccess, ctx: Context, request: pb.RunRequest, *, title: str = ""
) -> CallToolResult:
    """Run the turn ``request`` asks for, relaying its text as progress; the answer.
    ``title`` names the conversation the run made, once the engine accepted the run.

    As a task (:data:`TASK_MODE` set), it returns once the run started, leaving it to run
    on in the engine; the result is then a placeholder the tasks extension replaces."""
    task = TASK_MODE.get()
    # An MCP cancellation cancels this task, hence the call, hence the run; a task's run
    # outlives the call that started it (tasks/cancel stops it).
    request.cancel_on_disconnect = task is None
    session_id = request.session_id
    answer: list[str] = []
    run_id, status, detail = "", "completed", ""
    interrupts: list[dict[str, Any]] = []
    async with contextlib.aclosing(engine.run(request, ctx)) as events:
        async for event in events:
            run_id = run_id or event.run_id
            kind = event.WhichOneof("kind")
            if kind == "run_started" and title:
                await _title(engine, ctx, session_id, title)
            if kind == "run_started" and task is not None:
                task.run_id, task.session_id = event.run_id, session_id
                return CallToolResult(content=[], is_error=True)  # replaced by the task
            if kind == "text_message_content":
                delta = event.text_message_content.delta
                answer.append(delta)
                await ctx.report_progress(sum(map(len, answer)), None, delta)
            elif kind == "run_error":
                status, detail = "failed", event.run_error.message
            elif kind == "run_finished":
                status, detail = outcome(event.run_finished.outcome, event.run_finished.interrupts)
                interrupts = [interrupt_json(i) for i in event.run_finished.interrupts]
    return answer_result(session_id, run_id, status, "".join(answer), detail, interrupts)


def answer_result(
    session_id: str,
    run_id: str,
    status: str,
    text: str,
    detail: str = "",
    interrupts: list[dict[str, Any]] | None = None,
) -> CallToolResult:
    """A turn's answer: its text (and ``detail``) as content, :class:`Answer` as
    ``structuredContent``; a failed turn is a tool error."""
    structured: dict[str, Any] = {
        "conversation_id": session_id,
        "run_id": run_id,
        "status": status,
        "answer": text,
    }
    if detail:
        structured["detail"] = detail
    if interrupts:
        structured["interrupts"] = interrupts
    shown = "\n\n".join(filter(None, [text, detail])) if detail else text
    return CallToolResult(
        content=[TextContent(type="text", text=shown)],
        structured_content=structured,
        is_error=status == "failed",
    )


def _next(call: Iterator[pb.Event]) -> pb.Event | None:
    """The call's next event, None at its end (in an executor thread: it blocks)."""
    event: pb.Event | None = next(call, None)
    return event


async def _title(engine: EngineAccess, ctx: Context, session_id: str, title: str) -> None:
    """Name the new conversation after its first message; a failure leaves it untitled."""
    rename = pb.RenameSessionRequest(session_id=session_id, title=title)
    with contextlib.suppress(grpc.RpcError):
        await engine.unary("RenameSession", rename, ctx)


def outcome(kind: int, interrupts: Any) -> tuple[str, str]:
    """The answer's status and detail for a run that finished with outcome ``kind``
    (``pb.OUTCOME_TYPE_*``) and ``interrupts``."""
    if kind == pb.OUTCOME_TYPE_CANCELLED:
        return "cancelled", "The run was interrupted."
    if kind == pb.OUTCOME_TYPE_INTERRUPT:
        asks = "; ".join(f"{i.message} (interrupt_id {i.id})" for i in interrupts)
        return (
            "input_required",
            f"The agent waits for a person: {asks}. Give the decisions with the answer tool.",
        )
    return "completed", ""


def _message(message: pb.Message) -> MessageInfo:
    out: dict[str, Any] = {
        "id": message.id,
        "role": _ROLES.get(message.role, "unknown"),
        "text": "".join(part.text.text for part in message.content if part.HasField("text")),
    }
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.status == pb.MESSAGE_STATUS_INTERRUPTED:
        out["status"] = "interrupted"
    elif message.status == pb.MESSAGE_STATUS_ERROR:
        out["status"] = "error"
    return cast(MessageInfo, out)
