"""The gRPC servicer: admit the caller → convert → call the engine → convert, errors
through one table.

Every RPC first passes the ``Gate`` with its ``authorization`` metadata: no valid
credentials is UNAUTHENTICATED, a caller over its rate RESOURCE_EXHAUSTED with a
``retry-after`` trailer. Each error also carries the core's code in the ``agentik-error``
trailer, so a client can tell, say, ``rate_limited`` from ``overloaded``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any, TypeAlias, TypeVar

import grpc
from google.protobuf import json_format, struct_pb2

from agentik.limits import GRPC_MESSAGE_LIMIT
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.auth import Gate
from engine_service.convert import (
    event_to_pb,
    failed_webhook_to_pb,
    message_to_pb,
    push_config_from_pb,
    push_config_to_pb,
    run_input_from_pb,
    run_to_pb,
    session_to_pb,
)
from engine_service.core import events as ev
from engine_service.core.agents import AgentProfile
from engine_service.core.caller import Caller
from engine_service.core.engine import Engine
from engine_service.core.errors import AgentikError, BudgetExceeded, InvalidInput, RateLimited
from engine_service.core.models import Session
from engine_service.core.run_webhooks import PushConfigs
from engine_service.errors import abort, status_for
from engine_service.malformed import refuse_malformed
from engine_service.stalled_writes import StalledWrites

__all__ = ["BATCH_BYTES", "AgentEngineServicer", "batched"]

log = logging.getLogger(__name__)

RUN_METHOD = "agentik.engine.v1.AgentEngine/Run"
SUBSCRIBE_METHOD = "agentik.engine.v1.AgentEngine/Subscribe"

T = TypeVar("T")
Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


async def _mapped(context: Context, call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call``; a core error aborts the RPC with the status the table gives, anything
    else with INTERNAL and a plain message (the detail goes to the log)."""
    try:
        return await call()
    except AgentikError as exc:
        await _abort(context, exc)
        raise  # unreachable: abort raises
    except Exception:
        await _internal(context)
        raise  # unreachable: abort raises


async def _abort(context: Context, exc: AgentikError) -> None:
    """Abort with the table's status, the message, and the code (and retry time) as trailers."""
    trailers: list[tuple[str, str]] = [("agentik-error", exc.code)]
    if isinstance(exc, RateLimited | BudgetExceeded):
        trailers.append(("retry-after", str(exc.retry_after)))
    context.set_trailing_metadata(tuple(trailers))
    await abort(context, status_for(exc), exc.message)


def _authorization(context: Context) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "authorization":
            return value if isinstance(value, str) else None
    return None


async def _internal(context: Context, run_id: str = "") -> None:
    """Abort with INTERNAL for an unexpected exception (being handled): the client gets
    a reference to the log, never the exception's class or message."""
    reference = f"run {run_id}" if run_id else f"ref {uuid.uuid4().hex[:12]}"
    log.exception("unexpected error in an RPC (%s)", reference)
    await abort(
        context, grpc.StatusCode.INTERNAL, f"internal error; see the engine log ({reference})"
    )


class AgentEngineServicer(pb_grpc.AgentEngineServicer):
    """``agentik.engine.v1.AgentEngine`` over an ``Engine``."""

    def __init__(
        self,
        engine: Engine,
        gate: Gate,
        on_stream: Callable[[str, Context], None] | None = None,
        stalls: StalledWrites | None = None,
    ) -> None:
        """``on_stream(method, context)``: called as each Run or Subscribe stream opens
        (the metrics time them from there, with a done callback, not per message);
        ``stalls``: the streams' writes, watched for a client that stopped reading
        (``[engine] write_timeout``; none: never cut)."""
        self.engine = engine
        self.gate = gate
        self.on_stream = on_stream
        self.stalls = stalls if stalls is not None else StalledWrites(0)

    async def _caller(self, context: Context) -> Caller:
        """The caller the request's credentials name, or the RPC ends here."""
        return await _mapped(context, lambda: _sync(self.gate.admit, _authorization(context)))

    async def _stream_slot(
        self, context: Context, caller: Caller, *, run: bool = False
    ) -> Callable[[], None]:
        """A slot for one more event stream of ``caller`` (``core.streams``), or the RPC
        ends here (RESOURCE_EXHAUSTED naming the setting); the function gives it back."""
        take = partial(self.engine.streams.take, run=run)
        return await _mapped(context, lambda: _sync(take, caller.principal))

    async def Run(self, request: pb.RunRequest, context: Context) -> AsyncIterator[pb.Event]:
        if self.on_stream is not None:
            self.on_stream(RUN_METHOD, context)
        await refuse_malformed(context, "Run", request)
        caller = await self._caller(context)
        # Before the run: none if refused.
        release = await self._stream_slot(context, caller, run=True)
        watch = self.stalls.watch(context, "Run", release)
        try:
            run_input = await _mapped(context, lambda: _sync(run_input_from_pb, request))
            handle = await _mapped(context, lambda: self.engine.start_run(caller, run_input))
            ended = False
            try:
                with watch:
                    # watch.writes is odd while gRPC has not taken the message yielded.
                    if request.batch_events:
                        async for ready in self.engine.run_event_lists(handle):
                            for message in batched(ready):
                                watch.writes += 1
                                yield message
                                watch.writes += 1
                    else:
                        async for event in self.engine.run_events(handle):
                            watch.writes += 1
                            yield event_to_pb(event)
                            watch.writes += 1
                ended = True
            except AgentikError as exc:
                await _abort(context, exc)
            except Exception:
                await _internal(context, handle.run_id)
            finally:
                # The caller went away early. The run is the engine's and goes on, unless
                # asked.
                if not ended and run_input.cancel_on_disconnect:
                    self.engine.stop_local(handle.session_id, handle.run_id)
        finally:
            watch.release()

    async def Interrupt(
        self, request: pb.InterruptRequest, context: Context
    ) -> pb.InterruptResponse:
        caller = await self._caller(context)
        interrupted, run_id = await _mapped(
            context, lambda: self.engine.stop_run(caller, request.session_id, request.run_id)
        )
        return pb.InterruptResponse(interrupted=interrupted, run_id=run_id)

    async def Subscribe(
        self, request: pb.SubscribeRequest, context: Context
    ) -> AsyncIterator[pb.Event]:
        if self.on_stream is not None:
            self.on_stream(SUBSCRIBE_METHOD, context)
        await refuse_malformed(context, "Subscribe", request)
        caller = await self._caller(context)
        release = await self._stream_slot(context, caller)
        watch = self.stalls.watch(context, "Subscribe", release)
        try:
            # Admitted: the response headers say so now, not with the first event, which
            # may be long in coming (the facade answers a refusal before them as an HTTP
            # error, and opens its stream once they come).
            await context.send_initial_metadata(())
            args = (caller, request.session_id, request.after_seq)
            if request.batch_events:
                lists = self.engine.subscribe_lists(*args, until_idle=request.until_idle)
                first_list = await _mapped(context, lambda: _first(lists))
                if first_list is None:
                    return
                try:
                    with watch:
                        for message in batched(first_list):
                            watch.writes += 1
                            yield message
                            watch.writes += 1
                        async for ready in lists:
                            for message in batched(ready):
                                watch.writes += 1
                                yield message
                                watch.writes += 1
                except AgentikError as exc:
                    await _abort(context, exc)
                except Exception:
                    await _internal(context)
                return
            events = self.engine.subscribe(*args, until_idle=request.until_idle)
            first = await _mapped(context, lambda: _first(events))
            if first is None:
                return
            try:
                with watch:
                    watch.writes += 1
                    yield event_to_pb(first)
                    watch.writes += 1
                    async for event in events:
                        watch.writes += 1
                        yield event_to_pb(event)
                        watch.writes += 1
            except AgentikError as exc:
                await _abort(context, exc)
            except Exception:
                await _internal(context)
        finally:
            watch.release()

    async def CreateSession(self, request: pb.CreateSessionRequest, context: Context) -> pb.Session:
        caller = await self._caller(context)
        session = await _mapped(
            context,
            lambda: self.engine.create_session(
                caller, request.title, request.session_id, request.webhook.url, request.agent
            ),
        )
        return self._session_pb(session)

    async def SetSessionWebhook(
        self, request: pb.SetSessionWebhookRequest, context: Context
    ) -> pb.Session:
        caller = await self._caller(context)
        session = await _mapped(
            context,
            lambda: self.engine.set_session_webhook(
                caller, request.session_id, request.webhook.url
            ),
        )
        return self._session_pb(session)

    async def GetSession(self, request: pb.GetSessionRequest, context: Context) -> pb.Session:
        caller = await self._caller(context)
        session = await _mapped(
            context, lambda: self.engine.get_session(caller, request.session_id)
        )
        return self._session_pb(session)

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: Context
    ) -> pb.ListSessionsResponse:
        caller = await self._caller(context)
        sessions, total = await _mapped(
            context,
            lambda: self.engine.list_sessions(caller, request.offset, request.limit, request.agent),
        )
        return pb.ListSessionsResponse(
            sessions=[self._session_pb(s) for s in sessions], total=total
        )

    async def ForkSession(self, request: pb.ForkSessionRequest, context: Context) -> pb.Session:
        caller = await self._caller(context)
        session = await _mapped(
            context,
            lambda: self.engine.fork_session(
                caller, request.session_id, request.up_to_message_id, request.new_session_id
            ),
        )
        return self._session_pb(session)

    async def RenameSession(self, request: pb.RenameSessionRequest, context: Context) -> pb.Session:
        caller = await self._caller(context)
        session = await _mapped(
            context,
            lambda: self.engine.rename_session(caller, request.session_id, request.title),
        )
        return self._session_pb(session)

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: Context
    ) -> pb.DeleteSessionResponse:
        caller = await self._caller(context)
        await _mapped(context, lambda: self.engine.delete_session(caller, request.session_id))
        return pb.DeleteSessionResponse()

    async def ListMessages(
        self, request: pb.ListMessagesRequest, context: Context
    ) -> pb.ListMessagesResponse:
        caller = await self._caller(context)
        messages, has_more = await _mapped(
            context,
            lambda: self.engine.list_messages(
                caller, request.session_id, request.after_message_id, request.limit, request.run_id
            ),
        )
        return pb.ListMessagesResponse(
            messages=[message_to_pb(m) for m in messages], has_more=has_more
        )

    async def GetRun(self, request: pb.GetRunRequest, context: Context) -> pb.RunInfo:
        caller = await self._caller(context)
        run = await _mapped(
            context, lambda: self.engine.get_run(caller, request.run_id, request.session_id)
        )
        return run_to_pb(run)

    async def ListRuns(self, request: pb.ListRunsRequest, context: Context) -> pb.ListRunsResponse:
        caller = await self._caller(context)
        runs, total = await _mapped(
            context,
            lambda: self.engine.list_runs(
                caller, request.session_id, request.offset, request.limit, request.agent
            ),
        )
        return pb.ListRunsResponse(runs=[run_to_pb(r) for r in runs], total=total)

    async def ListRunChains(
        self, request: pb.ListRunChainsRequest, context: Context
    ) -> pb.ListRunChainsResponse:
        caller = await self._caller(context)
        chains, total, runs_read = await _mapped(
            context,
            lambda: self.engine.list_run_chains(
                caller,
                request.session_id,
                request.offset,
                request.limit,
                request.last_messages,
                request.agent,
            ),
        )
        return pb.ListRunChainsResponse(
            chains=[
                pb.RunChain(
                    runs=[run_to_pb(r) for r in chain.runs],
                    messages=[message_to_pb(m) for m in chain.messages],
                    messages_clipped=chain.clipped,
                )
                for chain in chains
            ],
            total=total,
            runs_read=runs_read,
        )

    async def ListFailedWebhooks(
        self, request: pb.ListFailedWebhooksRequest, context: Context
    ) -> pb.ListFailedWebhooksResponse:
        caller = await self._caller(context)
        failed, total = await _mapped(
            context,
            lambda: self.engine.list_failed_webhooks(caller, request.offset, request.limit),
        )
        return pb.ListFailedWebhooksResponse(
            webhooks=[failed_webhook_to_pb(d) for d in failed], total=total
        )

    def _push(self) -> PushConfigs:
        if self.engine.notices.push is None:  # the server always sets it; a bare engine has none
            raise InvalidInput("push notifications are not available on this engine")
        return self.engine.notices.push

    async def SetPushConfig(
        self, request: pb.SetPushConfigRequest, context: Context
    ) -> pb.PushConfig:
        caller = await self._caller(context)
        config = await _mapped(
            context, lambda: self._push().set(caller, push_config_from_pb(request.config))
        )
        return push_config_to_pb(config)

    async def GetPushConfig(
        self, request: pb.GetPushConfigRequest, context: Context
    ) -> pb.PushConfig:
        caller = await self._caller(context)
        config = await _mapped(
            context, lambda: self._push().get(caller, request.task_id, request.id)
        )
        return push_config_to_pb(config)

    async def ListPushConfigs(
        self, request: pb.ListPushConfigsRequest, context: Context
    ) -> pb.ListPushConfigsResponse:
        caller = await self._caller(context)
        configs = await _mapped(context, lambda: self._push().list(caller, request.task_id))
        return pb.ListPushConfigsResponse(configs=[push_config_to_pb(c) for c in configs])

    async def DeletePushConfig(
        self, request: pb.DeletePushConfigRequest, context: Context
    ) -> pb.DeletePushConfigResponse:
        caller = await self._caller(context)
        await _mapped(context, lambda: self._push().delete(caller, request.task_id, request.id))
        return pb.DeletePushConfigResponse()

    def _session_pb(self, session: Session) -> pb.Session:
        return session_to_pb(session, self.engine.agents.default)

    async def ListAgents(
        self, request: pb.ListAgentsRequest, context: Context
    ) -> pb.ListAgentsResponse:
        await self._caller(context)
        agents = self.engine.agents
        return pb.ListAgentsResponse(agents=[_agent_pb(a, agents.default) for a in agents])

    async def GetAgent(self, request: pb.GetAgentRequest, context: Context) -> pb.Agent:
        await self._caller(context)
        agents = self.engine.agents
        profile = await _mapped(context, lambda: _sync(agents.named, request.name))
        return _agent_pb(profile, agents.default)

    async def Authenticate(
        self, request: pb.AuthenticateRequest, context: Context
    ) -> pb.AuthenticateResponse:
        # Credentials only: not counted against the caller's rate (see the proto).
        authenticate = self.gate.authenticator.authenticate
        caller = await _mapped(context, lambda: _sync(authenticate, _authorization(context)))
        return pb.AuthenticateResponse(principal=caller.principal)


def _agent_pb(profile: AgentProfile, default: str) -> pb.Agent:
    """What a caller may know of an agent: never its endpoint or key."""
    specs = []
    for spec in profile.tools.specs():
        parameters = struct_pb2.Struct()
        json_format.ParseDict(spec.parameters, parameters)
        specs.append(pb.Tool(name=spec.name, description=spec.description, parameters=parameters))
    return pb.Agent(
        name=profile.name,
        description=profile.description,
        model=profile.model.name,
        tools=profile.tools.names(),
        is_default=profile.name == default,
        input_modalities=profile.limits.input_modalities,
        tool_specs=specs,
        max_tool_rounds=profile.limits.max_tool_rounds,
    )


async def _sync(function: Callable[[Any], T], argument: Any) -> T:
    return function(argument)


BATCH_BYTES = GRPC_MESSAGE_LIMIT - 64 * 1024
"""The largest batch sent as one message: under what every gRPC client takes, with room."""


def batched(events: list[ev.Event]) -> list[pb.Event]:
    """Events ready together as one message (``batch_events``); one event as itself. The
    follow bounds their bodies to ``max_event_bytes``; should their envelopes push a batch
    past :data:`BATCH_BYTES`, they go one by one instead."""
    messages = [event_to_pb(event) for event in events]
    if len(messages) == 1:
        return messages
    batch = pb.Event(batch=messages)
    return [batch] if batch.ByteSize() <= BATCH_BYTES else messages


async def _first(events: AsyncIterator[T]) -> T | None:
    """The first item of an async iterator, or None; errors surface before streaming."""
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None
