"""A2A's gRPC binding (A2A 1.0 §10): ``lf.a2a.v1.A2AService`` beside ``AgentEngine``.

The service is the a2a-sdk's generated one (``a2a.types.a2a_pb2_grpc``, pinned by the
``a2a-sdk`` dependency). Each call passes the engine's ``Gate`` with its ``authorization``
metadata, as every ``AgentEngine`` call does, and acts as the caller it names: a task is
visible to its owner (and admins) only, a stranger's is TaskNotFound. A request's
``tenant`` names the agent a new task's context belongs to (the agent's card lists the
gRPC interface with its name as the tenant); "" is the default agent. With a tenant, the
tasks and contexts of other agents are not reached (TaskNotFound; a message on another
agent's context is InvalidParams); without one, every agent's are, as at the facade's root
endpoint.

``GetExtendedAgentCard`` answers the card the facade serves at the tenant's endpoint
(``agentik.a2a.card``, built from the same settings): with ``[a2a] public_url`` set, else
ExtendedAgentCardNotConfigured, since the card must name where peers reach the agent.

The tasks are the engine's runs, read and started as the JSON-RPC binding does
(``engine_service.a2a.tasks``); errors through ``engine_service.a2a.errors``.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Final, TypeVar

from a2a.types import a2a_pb2 as a2a_pb
from a2a.types import a2a_pb2_grpc as a2a_grpc
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    VersionNotSupportedError,
)
from google.protobuf import empty_pb2

from agentik.a2a.card import check_cards, endpoint_config, extended_card
from agentik.a2a.convert import RunStream
from agentik.a2a.errors import invalid_params
from agentik.a2a.rules import a2a_push_config, check_task_id, engine_push_config
from agentik.a2a.tasks import fit_task
from agentik.config import Settings
from agentik.ids import is_valid_id
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.a2a.errors import a2a_error, abort_a2a
from engine_service.a2a.tasks import EngineTasks
from engine_service.auth import Gate
from engine_service.convert import push_config_from_pb, push_config_to_pb
from engine_service.core.caller import Caller
from engine_service.core.engine import Engine
from engine_service.core.errors import AgentikError
from engine_service.core.run_webhooks import PushConfigs
from engine_service.servicer import BATCH_BYTES, Context, _abort, _authorization
from engine_service.stalled_writes import StalledWrites

__all__ = ["SERVICE_NAME", "A2aServicer"]

log = logging.getLogger(__name__)

SERVICE_NAME: Final = a2a_pb.DESCRIPTOR.services_by_name["A2AService"].full_name
"""``lf.a2a.v1.A2AService``."""
VERSION_KEY: Final = "a2a-version"
"""The metadata key of the A2A version a client speaks (the SDK sends ``1.0``)."""
_VERSION: Final = re.compile(r"^\s*(\d{1,4})(?:\.(\d{1,4}))?(?:\.\d{1,4})?\s*$")

T = TypeVar("T")


def _metadata(context: Context, key: str) -> str:
    for name, value in context.invocation_metadata() or ():
        if name == key and isinstance(value, str):
            return value
    return ""


def _check_version(context: Context) -> None:
    """This binding speaks A2A 1.x; no version said is the current one."""
    raw = _metadata(context, VERSION_KEY).strip()
    if not raw:
        return
    match = _VERSION.match(raw)
    if match is None or int(match[1]) != 1:
        raise VersionNotSupportedError(
            f"A2A version {raw[:20]!r} is not supported over gRPC; this agent speaks 1.0",
            data={"supportedVersions": "1.0"},
        )


def _fitted(task: a2a_pb.Task) -> a2a_pb.Task:
    """``task`` in one gRPC message: a task whose history passes it (a long conversation,
    many answered questions) keeps its newest messages, and says how many it left out."""
    return fit_task(task, BATCH_BYTES)


def _fitted_response(response: a2a_pb.StreamResponse) -> a2a_pb.StreamResponse:
    """A stream response in one gRPC message: the task it carries fitted (``_fitted``)."""
    if response.HasField("task"):
        _fitted(response.task)
    return response


async def _unexpected(context: Context) -> None:
    """End the call with INTERNAL for an unexpected exception (being handled): the
    client gets a reference to the log, never the exception's class or message."""
    reference = uuid.uuid4().hex[:12]
    log.exception("unexpected error in an A2A call (ref %s)", reference)
    await abort_a2a(context, InternalError(f"internal error; see the engine log (ref {reference})"))


async def _fail(context: Context, exc: Exception) -> None:
    """End the call with the error ``exc`` is (being handled)."""
    if isinstance(exc, AgentikError):
        mapped = a2a_error(exc)
        if isinstance(mapped, AgentikError):
            await _abort(context, mapped)
        exc = mapped
    if isinstance(exc, A2AError):
        await abort_a2a(context, exc)
    await _unexpected(context)


class A2aServicer(a2a_grpc.A2AServiceServicer):
    """``lf.a2a.v1.A2AService`` over an ``Engine``."""

    def __init__(
        self,
        engine: Engine,
        gate: Gate,
        settings: Settings | None = None,
        stalls: StalledWrites | None = None,
    ) -> None:
        """``settings``: what the extended card is built from (``[a2a]``, ``[[agents]]``,
        the authentication); None: no extended card. A card no setting allows (a skill it
        cannot carry, a bad signing key) raises ``ConfigError`` here, at start. ``stalls``:
        the streams' writes, watched for a client that stopped reading (``[engine]
        write_timeout``; none: never cut)."""
        self.engine = engine
        self.gate = gate
        self.stalls = stalls if stalls is not None else StalledWrites(0)
        self.settings = settings
        self.card = None if settings is None else check_cards(settings)

    def _admit(self, context: Context, tenant: str) -> tuple[Caller, str]:
        """The caller and the agent of the call; raises for what refuses it."""
        caller = self.gate.admit(_authorization(context))
        _check_version(context)
        if tenant and (not is_valid_id(tenant) or tenant not in self.engine.agents):
            names = ", ".join(profile.name for profile in self.engine.agents)
            raise invalid_params(
                "tenant", f"{tenant[:64]!r} is no agent served here; the agents are: {names}"
            )
        return caller, tenant

    def _tasks(self, context: Context, tenant: str) -> EngineTasks:
        caller, agent = self._admit(context, tenant)
        return EngineTasks(self.engine, caller, agent)

    async def _answer(self, context: Context, call: Callable[[], Awaitable[T]]) -> T:
        """``call``'s answer, or the call ends with the error it raised."""
        try:
            return await call()
        except Exception as exc:  # every error is answered, in the binding's words
            await _fail(context, exc)
            raise  # unreachable: abort raises

    # -- messages -----------------------------------------------------------------

    async def SendMessage(
        self, request: a2a_pb.SendMessageRequest, context: Context
    ) -> a2a_pb.SendMessageResponse:
        async def send() -> a2a_pb.SendMessageResponse:
            task = await self._tasks(context, request.tenant).send_message(request)
            return a2a_pb.SendMessageResponse(task=_fitted(task))

        return await self._answer(context, send)

    async def SendStreamingMessage(
        self, request: a2a_pb.SendMessageRequest, context: Context
    ) -> AsyncIterator[a2a_pb.StreamResponse]:
        async def start() -> tuple[EngineTasks, Any, Callable[[], None]]:
            tasks = self._tasks(context, request.tenant)
            release = self.engine.streams.take(tasks.caller.principal, run=True)  # core.streams
            try:
                return tasks, await tasks.start(request), release
            except BaseException:
                release()
                raise

        tasks, (handle, stream), release = await self._answer(context, start)
        watch = self.stalls.watch(context, "SendStreamingMessage", release)
        try:
            followed = self._follow(context, stream, tasks.events(handle), [])
            async with aclosing(followed) as responses:
                with watch:
                    async for response in responses:
                        watch.writes += 1  # odd while gRPC has not taken it
                        yield response
                        watch.writes += 1
        finally:
            watch.release()

    async def _follow(
        self,
        context: Context,
        stream: RunStream,
        events: AsyncIterator[pb.Event],
        first: list[a2a_pb.StreamResponse],
    ) -> AsyncGenerator[a2a_pb.StreamResponse, None]:
        """``first``, then each event of the run folded into stream responses, until the
        task's final (or interrupted) state."""
        for response in first:
            yield _fitted_response(response)
        failure: Exception | None = None
        try:
            async for event in events:
                for response in stream.feed(event):
                    yield _fitted_response(response)
                if stream.done:
                    return
        except Exception as exc:  # answered below, outside the generator's cleanup
            failure = exc
        finally:
            close = getattr(events, "aclose", None)
            if close is not None:
                await close()
        if failure is None:
            failure = InternalError("the engine ended the task's stream early; ask with GetTask")
        await _fail(context, failure)

    # -- tasks --------------------------------------------------------------------

    async def GetTask(self, request: a2a_pb.GetTaskRequest, context: Context) -> a2a_pb.Task:
        length = request.history_length if request.HasField("history_length") else None

        async def get() -> a2a_pb.Task:
            return _fitted(await self._tasks(context, request.tenant).get_task(request.id, length))

        return await self._answer(context, get)

    async def ListTasks(
        self, request: a2a_pb.ListTasksRequest, context: Context
    ) -> a2a_pb.ListTasksResponse:
        return await self._answer(
            context, lambda: self._tasks(context, request.tenant).list_tasks(request)
        )

    async def CancelTask(self, request: a2a_pb.CancelTaskRequest, context: Context) -> a2a_pb.Task:
        async def cancel() -> a2a_pb.Task:
            return _fitted(await self._tasks(context, request.tenant).cancel_task(request.id))

        return await self._answer(context, cancel)

    async def SubscribeToTask(
        self, request: a2a_pb.SubscribeToTaskRequest, context: Context
    ) -> AsyncIterator[a2a_pb.StreamResponse]:
        async def subscribe() -> Any:
            tasks = self._tasks(context, request.tenant)
            release = self.engine.streams.take(tasks.caller.principal)  # core.streams
            try:
                return *(await tasks.subscribe(request.id)), release
            except BaseException:
                release()
                raise

        first, stream, events, release = await self._answer(context, subscribe)
        watch = self.stalls.watch(context, "SubscribeToTask", release)
        try:
            if stream is None or events is None:  # waiting for input: the task is all
                for response in first:
                    yield _fitted_response(response)
                return
            async with aclosing(self._follow(context, stream, events, first)) as responses:
                with watch:
                    async for response in responses:
                        watch.writes += 1  # odd while gRPC has not taken it
                        yield response
                        watch.writes += 1
        finally:
            watch.release()

    # -- push notification configs ------------------------------------------------

    def _push(self) -> PushConfigs:
        if self.engine.notices.push is None:  # the server always sets it; a bare engine has none
            raise InternalError("push notifications are not available on this engine")
        return self.engine.notices.push

    async def _task_caller(self, context: Context, tenant: str, task_id: str) -> Caller:
        """Who a push config method on task ``task_id`` acts as, once the task id is checked
        and the caller may reach the task with this tenant."""
        tasks = self._tasks(context, tenant)
        check_task_id(task_id)
        await tasks.check_task(task_id)
        return tasks.caller

    async def CreateTaskPushNotificationConfig(
        self, request: a2a_pb.TaskPushNotificationConfig, context: Context
    ) -> a2a_pb.TaskPushNotificationConfig:
        async def create() -> a2a_pb.TaskPushNotificationConfig:
            caller = await self._task_caller(context, request.tenant, request.task_id)
            config = push_config_from_pb(engine_push_config(request, request.task_id))
            made = await self._push().set(caller, config)
            return a2a_push_config(push_config_to_pb(made))

        return await self._answer(context, create)

    async def GetTaskPushNotificationConfig(
        self, request: a2a_pb.GetTaskPushNotificationConfigRequest, context: Context
    ) -> a2a_pb.TaskPushNotificationConfig:
        async def get() -> a2a_pb.TaskPushNotificationConfig:
            caller = await self._task_caller(context, request.tenant, request.task_id)
            found = await self._push().get(caller, request.task_id, request.id)
            return a2a_push_config(push_config_to_pb(found))

        return await self._answer(context, get)

    async def ListTaskPushNotificationConfigs(
        self, request: a2a_pb.ListTaskPushNotificationConfigsRequest, context: Context
    ) -> a2a_pb.ListTaskPushNotificationConfigsResponse:
        async def listed() -> a2a_pb.ListTaskPushNotificationConfigsResponse:
            caller = await self._task_caller(context, request.tenant, request.task_id)
            configs = await self._push().list(caller, request.task_id)
            # Every config of a task fits one page ([webhooks] max_push_configs bounds them).
            return a2a_pb.ListTaskPushNotificationConfigsResponse(
                configs=[a2a_push_config(push_config_to_pb(c)) for c in configs]
            )

        return await self._answer(context, listed)

    async def DeleteTaskPushNotificationConfig(
        self, request: a2a_pb.DeleteTaskPushNotificationConfigRequest, context: Context
    ) -> empty_pb2.Empty:
        async def delete() -> empty_pb2.Empty:
            caller = await self._task_caller(context, request.tenant, request.task_id)
            await self._push().delete(caller, request.task_id, request.id)
            return empty_pb2.Empty()

        return await self._answer(context, delete)

    # -- the card -----------------------------------------------------------------

    async def GetExtendedAgentCard(
        self, request: a2a_pb.GetExtendedAgentCardRequest, context: Context
    ) -> a2a_pb.AgentCard:
        async def card() -> a2a_pb.AgentCard:
            _, agent = self._admit(context, request.tenant)
            if self.card is None or self.settings is None:
                raise ExtendedAgentCardNotConfiguredError("this agent has no extended agent card")
            # The card the facade serves at the tenant's endpoint, built alike (agentik.a2a.card).
            config = endpoint_config(self.settings, self.card, agent)
            if not config.public_url:  # the facade names the request's URL; here is none
                raise ExtendedAgentCardNotConfiguredError(
                    "the extended agent card names the URL peers reach this agent at: set "
                    "[a2a] public_url (AGENTIK_PUBLIC_URL) where the engine runs too"
                )
            tools = tuple(self.engine.agents.get(agent).tools.names())
            return extended_card(config, config.public_url, tools)

        return await self._answer(context, card)
