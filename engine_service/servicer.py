"""The gRPC servicer: convert → call the engine → convert, errors through one table."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, TypeVar

import grpc

from engine_service.convert import (
    event_to_pb,
    message_to_pb,
    run_input_from_pb,
    run_to_pb,
    session_to_pb,
)
from engine_service.core.engine import Engine
from engine_service.core.errors import AgentikError
from engine_service.errors import status_for
from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc

__all__ = ["AgentEngineServicer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


async def _mapped(context: Context, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call``; a core error aborts the RPC with the status the table gives, anything
    else with INTERNAL and a plain message (the detail goes to the log)."""
    try:
        return await call()
    except AgentikError as exc:
        await context.abort(status_for(exc), exc.message)
        raise  # unreachable: abort raises
    except Exception:
        await _internal(context)
        raise  # unreachable: abort raises


async def _internal(context: Context, run_id: str = "") -> None:
    """Abort with INTERNAL for an unexpected exception (being handled): the client gets
    a reference to the log, never the exception's class or message."""
    reference = f"run {run_id}" if run_id else f"ref {uuid.uuid4().hex[:12]}"
    log.exception("unexpected error in an RPC (%s)", reference)
    await context.abort(
        grpc.StatusCode.INTERNAL, f"internal error; see the engine log ({reference})"
    )


class AgentEngineServicer(pb_grpc.AgentEngineServicer):
    """``agentik.engine.v1.AgentEngine`` over an ``Engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def Run(self, request: pb.RunRequest, context: Context) -> AsyncIterator[pb.Event]:
        run_input = await _mapped(context, lambda: _sync(run_input_from_pb, request))
        handle = await _mapped(context, lambda: self.engine.start_run(run_input))
        ended = False
        try:
            async for event in self.engine.run_events(handle):
                yield event_to_pb(event)
            ended = True
        except AgentikError as exc:
            await context.abort(status_for(exc), exc.message)
        except Exception:
            await _internal(context, handle.run_id)
        finally:
            # The caller went away early. The run is the engine's and goes on, unless asked.
            if not ended and run_input.cancel_on_disconnect:
                self.engine.interrupt_now(handle.thread_id, handle.run_id)

    async def Interrupt(
        self, request: pb.InterruptRequest, context: Context
    ) -> pb.InterruptResponse:
        interrupted, run_id = await _mapped(
            context, lambda: self.engine.interrupt(request.thread_id, request.run_id)
        )
        return pb.InterruptResponse(interrupted=interrupted, run_id=run_id)

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: Context
    ) -> AsyncIterator[pb.Event]:
        events = self.engine.subscribe(
            request.thread_id, request.after_seq, until_idle=request.until_idle
        )
        first = await _mapped(context, lambda: _first(events))
        if first is None:
            return
        try:
            yield event_to_pb(first)
            async for event in events:
                yield event_to_pb(event)
        except AgentikError as exc:
            await context.abort(status_for(exc), exc.message)
        except Exception:
            await _internal(context)

    async def CreateSession(self, request: pb.CreateSessionRequest, context: Context) -> pb.Session:
        session = await _mapped(
            context, lambda: self.engine.create_session(request.title, request.session_id)
        )
        return session_to_pb(session)

    async def GetSession(self, request: pb.GetSessionRequest, context: Context) -> pb.Session:
        session = await _mapped(context, lambda: self.engine.get_session(request.session_id))
        return session_to_pb(session)

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Context
    ) -> pb.ListSessionsResponse:
        sessions, total = await _mapped(
            context, lambda: self.engine.list_sessions(request.offset, request.limit)
        )
        return pb.ListSessionsResponse(sessions=[session_to_pb(s) for s in sessions], total=total)

    async def RenameSession(self, request: pb.RenameSessionRequest, context: Context) -> pb.Session:
        session = await _mapped(
            context, lambda: self.engine.rename_session(request.session_id, request.title)
        )
        return session_to_pb(session)

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: Context
    ) -> pb.DeleteSessionResponse:
        await _mapped(context, lambda: self.engine.delete_session(request.session_id))
        return pb.DeleteSessionResponse()

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: Context
    ) -> pb.ListMessagesResponse:
        messages, has_more = await _mapped(
            context,
            lambda: self.engine.list_messages(
                request.session_id, request.after_message_id, request.limit, request.run_id
            ),
        )
        return pb.ListMessagesResponse(
            messages=[message_to_pb(m) for m in messages], has_more=has_more
        )

    async def GetRun(self, request: pb.GetRunRequest, context: Context) -> pb.RunInfo:
        run = await _mapped(
            context, lambda: self.engine.get_run(request.run_id, request.session_id)
        )
        return run_to_pb(run)

    async def ListRuns(self, request: pb.ListRunsRequest, context: Context) -> pb.ListRunsResponse:
        runs, total = await _mapped(
            context,
            lambda: self.engine.list_runs(request.session_id, request.offset, request.limit),
        )
        return pb.ListRunsResponse(runs=[run_to_pb(r) for r in runs], total=total)


async def _sync(function: Callable[[Any], T], argument: Any) -> T:
    return function(argument)


async def _first(events: AsyncIterator[T]) -> T | None:
    """The first item of an async iterator, or None; errors surface before streaming."""
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None
