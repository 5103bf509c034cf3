"""A2A's gRPC binding judged by the a2a-sdk's own client (its gRPC transport), against a
real engine on a free port: the same tasks as the JSON-RPC binding, owner isolation by the
engine's bearer tokens, human in the loop, push configs, and errors as the spec maps them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import jsonschema
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import parse_agent_card
from a2a.client.errors import A2AClientError
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    a2a_pb2_grpc,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from agentik.a2a.card import card_body, card_config, endpoint_config
from agentik.config import Settings, load_settings
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from engine_service.a2a.servicer import SERVICE_NAME
from tests.engine.auth_helpers import TOKENS, TOKENS_ENV
from tests.engine.harness import WAIT, Harness, engine_settings, running_engine
from tests.engine.webhooks.receiver import Receiver
from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.card_schema import agent_card_schema

COMPLETED = TaskState.TASK_STATE_COMPLETED
CANCELED = TaskState.TASK_STATE_CANCELED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
WORKING = TaskState.TASK_STATE_WORKING

Connect = Callable[..., AbstractAsyncContextManager[Client]]


@pytest.fixture
async def engine(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_TOOLS_APPROVAL="calculate",
        AGENTIK_WEBHOOKS_ALLOW_PRIVATE="true",
    )
    async with running_engine(settings) as running:
        yield running


def _with_bearer(details: Any, token: str) -> Any:
    metadata = [*(details.metadata or ()), ("authorization", f"Bearer {token}")]
    return details._replace(metadata=metadata)


class _UnaryBearer(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds ``authorization`` to every unary call, as a peer's channel would."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_bearer(details, self._token), request)


class _StreamBearer(grpc.aio.UnaryStreamClientInterceptor):
    """The same for every server stream (grpc.aio files an interceptor under one kind)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with_bearer(details, self._token), request)


def _card(target: str, tenant: str = "") -> AgentCard:
    """The card a peer resolves: the gRPC interface alone (what the facade's card lists
    beside JSON-RPC when ``[a2a] grpc_url`` is set)."""
    interface = AgentInterface(
        url=target, protocol_binding="GRPC", protocol_version="1.0", tenant=tenant
    )
    return AgentCard(
        name="agentik",
        version="1.0",
        supported_interfaces=[interface],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
    )


@pytest.fixture
def connect(engine: Harness) -> Connect:
    """a2a-sdk clients over gRPC, each as one principal of ``TOKENS``."""

    @asynccontextmanager
    async def open_client(
        who: str = "alice", *, streaming: bool = True, tenant: str = ""
    ) -> AsyncIterator[Client]:
        def channel(url: str) -> grpc.aio.Channel:
            return grpc.aio.insecure_channel(
                url, interceptors=[_UnaryBearer(TOKENS[who]), _StreamBearer(TOKENS[who])]
            )

        config = ClientConfig(
            streaming=streaming,
            grpc_channel_factory=channel,
            supported_protocol_bindings=["GRPC"],
        )
        client = ClientFactory(config).create(_card(engine.target, tenant))
        try:
            yield client
        finally:
            await client.close()

    return open_client


def _request(text: str, context_id: str = "", task: Task | None = None) -> SendMessageRequest:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    message.context_id = context_id
    if task is not None:
        message.task_id, message.context_id = task.id, task.context_id
    return SendMessageRequest(message=message)


async def _collect(events: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    async with asyncio.timeout(WAIT):
        return [event async for event in events]


async def _task(client: Client, request: SendMessageRequest) -> Task:
    events = await _collect(client.send_message(request))
    assert [e.WhichOneof("payload") for e in events] == ["task"], events
    return events[0].task


def _text(events: list[StreamResponse]) -> str:
    return "".join(
        p.text
        for e in events
        if e.HasField("artifact_update")
        for p in e.artifact_update.artifact.parts
    )


def _answer(task: Task) -> str:
    return "".join(p.text for a in task.artifacts for p in a.parts)


def _stub(engine: Harness) -> Any:
    """The generated A2A stub on the engine's channel, for calls the SDK client cannot make."""
    return a2a_pb2_grpc.A2AServiceStub(engine.channel)  # type: ignore[no-untyped-call]


# -- the service --------------------------------------------------------------------


async def test_the_service_is_served_beside_agent_engine_and_described_by_reflection(
    engine: Harness,
) -> None:
    """What ``grpcurl list`` and ``grpcurl describe lf.a2a.v1.A2AService`` ask."""
    from grpc_reflection.v1alpha import reflection_pb2

    call = engine.channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
    ]
    async with asyncio.timeout(WAIT):
        replies = [reply async for reply in call(iter(requests))]
    names = {s.name for s in replies[0].list_services_response.service}
    assert SERVICE_NAME == "lf.a2a.v1.A2AService"
    assert {SERVICE_NAME, "agentik.engine.v1.AgentEngine"} <= names
    files = replies[1].file_descriptor_response.file_descriptor_proto
    assert files and any(b"A2AService" in f for f in files)


# -- send, stream, get, list ---------------------------------------------------------


async def test_send_message_answers_with_a_completed_task_readable_by_get_and_list(
    connect: Connect,
) -> None:
    async with connect(streaming=False) as client:
        task = await _task(client, _request("hello over grpc"))
        got = await client.get_task(GetTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
        short = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert task.status.state == COMPLETED
    assert _answer(task) == "Echo: hello over grpc"
    assert got.id == task.id and got.status.state == COMPLETED
    assert [(m.role, m.parts[0].text) for m in got.history] == [
        (Role.ROLE_USER, "hello over grpc"),
        (Role.ROLE_AGENT, "Echo: hello over grpc"),
    ]
    assert [t.id for t in listed.tasks] == [task.id] and listed.total_size == 1
    assert [m.parts[0].text for m in short.history] == ["Echo: hello over grpc"]


async def test_streaming_gives_the_task_working_artifact_chunks_and_completed(
    connect: Connect,
) -> None:
    async with connect() as client:
        events = await _collect(client.send_message(_request("[[chunks:3]] stream me")))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task" and kinds[1] == "status_update"
    assert events[1].status_update.status.state == WORKING
    assert _text(events) == "w0 w1 w2 "
    assert events[-1].status_update.status.state == COMPLETED
    assert {e.status_update.task_id for e in events[1:] if e.HasField("status_update")} == {
        events[0].task.id
    }


async def test_a_second_message_in_the_context_is_a_new_task_of_one_conversation(
    connect: Connect, engine: Harness
) -> None:
    async with connect(streaming=False) as client:
        first = await _task(client, _request("my name is Ada"))
        second = await _task(client, _request("what is my name?", context_id=first.context_id))
        listed = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
    assert second.context_id == first.context_id and second.id != first.id
    assert {t.id for t in listed.tasks} == {first.id, second.id}
    stored = await engine.engine.store.list_messages(first.context_id, "", 10)
    assert [m.role.value for m in stored[0]] == ["user", "assistant", "user", "assistant"]


# -- cancel and resubscribe ----------------------------------------------------------


async def test_cancel_task_stops_a_hanging_run_and_the_stream_ends_canceled(
    connect: Connect,
) -> None:
    events: list[StreamResponse] = []
    async with connect() as client, connect() as other, asyncio.timeout(WAIT):
        async for event in client.send_message(_request("[[hang]] a very long answer")):
            events.append(event)
            if event.HasField("artifact_update") and len(events) == 3:
                canceled = await other.cancel_task(CancelTaskRequest(id=events[0].task.id))
                assert canceled.status.state == CANCELED
                assert _answer(canceled) == "Echo: "
        with pytest.raises(TaskNotCancelableError, match="already canceled"):
            await client.cancel_task(CancelTaskRequest(id=events[0].task.id))
    assert events[-1].status_update.status.state == CANCELED


async def test_subscribe_to_task_follows_a_running_task_to_its_end(connect: Connect) -> None:
    async with connect() as sender, connect() as watcher, asyncio.timeout(WAIT):
        stream = sender.send_message(_request("[[slow:0.3]] watch me work"))
        first = await anext(stream)
        watched = await _collect(watcher.subscribe(SubscribeToTaskRequest(id=first.task.id)))
        sent = [first, *await _collect(stream)]
        with pytest.raises(UnsupportedOperationError, match="use GetTask"):
            await _collect(watcher.subscribe(SubscribeToTaskRequest(id=first.task.id)))
    assert watched[0].task.id == first.task.id
    assert watched[0].task.status.state == WORKING
    assert _text(watched) == _text(sent) == "Echo: watch me work"
    assert watched[-1].status_update.status.state == COMPLETED


# -- human in the loop ---------------------------------------------------------------


def _data(value: dict[str, object]) -> Part:
    data = struct_pb2.Value()
    json_format.ParseDict(value, data)
    return Part(data=data)


def _reply(part: Part, task: Task) -> SendMessageRequest:
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=[part],
        task_id=task.id,
        context_id=task.context_id,
    )
    return SendMessageRequest(message=message)


_CALCULATE = '[[tool:calculate {"expression": "2+2"}]]'


async def test_an_approval_completes_the_same_task_with_both_turns(connect: Connect) -> None:
    async with connect(streaming=False) as client:
        paused = await _task(client, _request(_CALCULATE))
        assert paused.status.state == INPUT_REQUIRED
        data = json_format.MessageToDict(paused.status.message.parts[1].data)
        [interrupt] = data["interrupts"]
        assert interrupt["kind"] == "approval" and interrupt["tool"] == "calculate"
        with pytest.raises(InvalidParamsError, match="neither yes nor no"):
            await _task(client, _reply(Part(text="perhaps"), paused))
        done = await _task(client, _reply(_data({"approved": True}), paused))
        got = await client.get_task(GetTaskRequest(id=paused.id))
    assert done.id == paused.id and done.status.state == COMPLETED
    assert _answer(done).startswith("Result: ")
    assert got.status.state == COMPLETED and got.history == done.history


async def test_a_reply_holding_nan_is_invalid_params_naming_the_part_and_the_task_waits_on(
    connect: Connect, engine: Harness
) -> None:
    async with connect(streaming=False) as client:
        paused = await _task(client, _request(_CALCULATE))
        assert paused.status.state == INPUT_REQUIRED
        error = await _raw_error(engine, "SendMessage", _reply(_nan_data(), paused))
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
        assert str(error.details()).startswith("message.parts[0].data: holds an infinite or NaN")
        done = await _task(client, _reply(_data({"approved": True}), paused))
    assert done.status.state == COMPLETED


async def test_a_streamed_no_completes_the_task_and_a_new_message_is_pointed_to_it(
    connect: Connect,
) -> None:
    async with connect() as client:
        first = await _collect(client.send_message(_request(_CALCULATE)))
        assert first[-1].status_update.status.state == INPUT_REQUIRED
        task = first[0].task
        # The context waits for the answer: a message without the taskId is told where.
        with pytest.raises(InvalidParamsError, match=f"taskId {task.id!r}"):
            await _collect(client.send_message(_request("hi", context_id=task.context_id)))
        second = await _collect(client.send_message(_reply(Part(text="no"), task)))
    assert second[0].task.id == task.id
    assert second[-1].status_update.status.state == COMPLETED


async def test_cancel_of_a_task_waiting_for_input_cancels_it(connect: Connect) -> None:
    async with connect(streaming=False) as client:
        paused = await _task(client, _request(_CALCULATE))
        canceled = await client.cancel_task(CancelTaskRequest(id=paused.id))
        with pytest.raises(UnsupportedOperationError, match="is canceled"):
            await _task(client, _reply(Part(text="yes"), paused))
    assert canceled.status.state == CANCELED


# -- push configs --------------------------------------------------------------------


async def test_push_configs_are_created_read_listed_and_deleted(connect: Connect) -> None:
    async with connect(streaming=False) as client, connect("bob") as bob:
        task = await _task(client, _request("push me"))
        config = TaskPushNotificationConfig(
            task_id=task.id, url="http://127.0.0.1:9/hook", token="t-1"
        )
        config.authentication.scheme = "Bearer"
        config.authentication.credentials = "secret-1"
        made = await client.create_task_push_notification_config(config)
        got = await client.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
        )
        listed = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        with pytest.raises(TaskNotFoundError):
            await bob.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=task.id)
            )
        await client.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id=made.id)
        )
        after = await client.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        with pytest.raises(InvalidParamsError, match="metadata"):
            bad = TaskPushNotificationConfig(task_id=task.id, url="http://169.254.169.254/x")
            await client.create_task_push_notification_config(bad)
    assert made.id and made.url == "http://127.0.0.1:9/hook" and made.token == "t-1"
    assert made.authentication.scheme == "Bearer"
    assert got == made and list(listed.configs) == [made]
    assert list(after.configs) == []


# -- owner isolation -----------------------------------------------------------------


async def test_another_principal_sees_none_of_the_tasks(connect: Connect) -> None:
    async with connect("alice", streaming=False) as alice, connect("bob") as bob:
        task = await _task(alice, _request("mine"))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await _collect(bob.subscribe(SubscribeToTaskRequest(id=task.id)))
        with pytest.raises(TaskNotFoundError):
            await _collect(bob.send_message(_reply(Part(text="yes"), task)))
        theirs = await bob.list_tasks(ListTasksRequest(context_id=task.context_id))
        everything = await bob.list_tasks(ListTasksRequest())
        mine = await alice.list_tasks(ListTasksRequest())
    assert list(theirs.tasks) == [] and theirs.total_size == 0
    assert task.id not in {t.id for t in everything.tasks}
    assert task.id in {t.id for t in mine.tasks}


_EVERY_METHOD: dict[str, Any] = {
    "SendMessage": SendMessageRequest(),
    "SendStreamingMessage": SendMessageRequest(),
    "GetTask": GetTaskRequest(id="abc"),
    "ListTasks": ListTasksRequest(),
    "CancelTask": CancelTaskRequest(id="abc"),
    "SubscribeToTask": SubscribeToTaskRequest(id="abc"),
    "CreateTaskPushNotificationConfig": TaskPushNotificationConfig(task_id="abc"),
    "GetTaskPushNotificationConfig": GetTaskPushNotificationConfigRequest(task_id="abc"),
    "ListTaskPushNotificationConfigs": ListTaskPushNotificationConfigsRequest(task_id="abc"),
    "DeleteTaskPushNotificationConfig": DeleteTaskPushNotificationConfigRequest(task_id="abc"),
    "GetExtendedAgentCard": GetExtendedAgentCardRequest(),
}


def test_every_method_of_the_service_is_in_the_table() -> None:
    from a2a.types import a2a_pb2

    service = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
    assert set(_EVERY_METHOD) == {m.name for m in service.methods}


@pytest.mark.parametrize("metadata", [(), (("authorization", "Bearer wrong-Zq81"),)])
async def test_every_method_without_a_valid_token_is_unauthenticated(
    engine: Harness, metadata: tuple[tuple[str, str], ...]
) -> None:
    for method, request in _EVERY_METHOD.items():
        error = await _raw_error(engine, method, request, metadata)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (method, error.details())
        assert "Zq81" not in str(error.details())


# -- errors --------------------------------------------------------------------------


def _status(error: grpc.aio.AioRpcError) -> status_pb2.Status:
    for key, value in error.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            return status_pb2.Status.FromString(value)
    raise AssertionError("no google.rpc.Status in the trailers")


def _nan_data() -> Part:
    """A data part no JSON can carry: ``{"approved": NaN}`` (a protobuf Value can)."""
    value = struct_pb2.Value()
    value.struct_value["approved"] = float("nan")
    return Part(data=value)


async def _raw_error(
    engine: Harness,
    method: str,
    request: Any,
    metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {TOKENS['alice']}"),),
) -> grpc.aio.AioRpcError:
    stub = _stub(engine)
    call = getattr(stub, method)(request, metadata=metadata, timeout=WAIT)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        if hasattr(call, "read"):
            while await call.read() is not grpc.aio.EOF:
                pass
        else:
            await call
    return caught.value


@pytest.mark.parametrize(
    ("method", "request_", "code", "reason", "words"),
    [
        ("GetTask", GetTaskRequest(id=""), "INVALID_ARGUMENT", "INVALID_PARAMS", "id: is required"),
        ("GetTask", GetTaskRequest(id="no/such"), "INVALID_ARGUMENT", "INVALID_PARAMS", "task id"),
        ("GetTask", GetTaskRequest(id="x" * 5000), "INVALID_ARGUMENT", "INVALID_PARAMS", "…"),
        ("GetTask", GetTaskRequest(id="nosuchtask"), "NOT_FOUND", "TASK_NOT_FOUND", "nosuchtask"),
        (
            "GetTask",
            GetTaskRequest(id="abc", history_length=-1),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "historyLength",
        ),
        (
            "ListTasks",
            ListTasksRequest(page_size=1000),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "pageSize",
        ),
        (
            "ListTasks",
            ListTasksRequest(page_token="zz"),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "pageToken",
        ),
        (
            "ListTasks",
            ListTasksRequest(status=TaskState.TASK_STATE_WORKING),
            "FAILED_PRECONDITION",
            "UNSUPPORTED_OPERATION",
            "filter",
        ),
        (
            "ListTasks",
            ListTasksRequest(context_id="bad id!"),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "contextId: is not a valid context id",
        ),
        ("SendMessage", SendMessageRequest(), "INVALID_ARGUMENT", "INVALID_PARAMS", "message"),
        (
            "SendMessage",
            SendMessageRequest(
                message=Message(
                    message_id="m1",
                    role=Role.ROLE_USER,
                    parts=[Part(url="file:///etc/passwd", media_type="image/png")],
                )
            ),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "message.parts[0].url: must be an http(s) URL",
        ),
        (
            "SendMessage",
            SendMessageRequest(
                message=Message(
                    message_id="m1",
                    role=Role.ROLE_USER,
                    parts=[Part(text="see"), Part(raw=b"", media_type="image/png")],
                )
            ),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "message.parts[1].raw: is empty",
        ),
        (
            "SendMessage",
            SendMessageRequest(message=Message(message_id="m1", role=Role.ROLE_USER)),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "message.parts",
        ),
        (
            "SendMessage",
            SendMessageRequest(
                message=Message(
                    message_id="m1", role=Role.ROLE_USER, parts=[Part(text="x"), _nan_data()]
                )
            ),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "message.parts[1].data: holds an infinite or NaN number",
        ),
        (
            "SendStreamingMessage",
            SendMessageRequest(
                message=Message(
                    message_id="m1",
                    role=Role.ROLE_USER,
                    parts=[Part(data=struct_pb2.Value(number_value=float("inf")))],
                )
            ),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "message.parts[0].data: holds an infinite or NaN number",
        ),
        (
            "SendMessage",
            SendMessageRequest(
                message=Message(message_id="m1", role=Role.ROLE_AGENT, parts=[Part(text="x")])
            ),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "ROLE_USER",
        ),
        (
            "SendMessage",
            SendMessageRequest(
                message=Message(
                    message_id="m1",
                    role=Role.ROLE_USER,
                    parts=[Part(raw=b"%PDF", media_type="application/pdf")],
                )
            ),
            "INVALID_ARGUMENT",
            "CONTENT_TYPE_NOT_SUPPORTED",
            "application/pdf",
        ),
        (
            "SendStreamingMessage",
            SendMessageRequest(
                message=Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="x")]),
                tenant="nosuchagent",
            ),
            "INVALID_ARGUMENT",
            "INVALID_PARAMS",
            "tenant",
        ),
        (
            "CancelTask",
            CancelTaskRequest(id="nosuchtask"),
            "NOT_FOUND",
            "TASK_NOT_FOUND",
            "nosuchtask",
        ),
        (
            "SubscribeToTask",
            SubscribeToTaskRequest(id="nosuchtask"),
            "NOT_FOUND",
            "TASK_NOT_FOUND",
            "nosuchtask",
        ),
        (
            "GetTaskPushNotificationConfig",
            GetTaskPushNotificationConfigRequest(task_id="nosuchtask", id="c"),
            "NOT_FOUND",
            "TASK_NOT_FOUND",
            "",
        ),
        (
            "GetExtendedAgentCard",
            GetExtendedAgentCardRequest(),
            "FAILED_PRECONDITION",
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            "extended",
        ),
    ],
)
async def test_bad_input_gets_the_spec_status_with_an_error_info(
    engine: Harness, method: str, request_: Any, code: str, reason: str, words: str
) -> None:
    error = await _raw_error(engine, method, request_)
    assert error.code() == grpc.StatusCode[code], error.details()
    status = _status(error)
    info = error_details_pb2.ErrorInfo()
    assert status.details[0].Unpack(info)
    assert (info.domain, info.reason) == ("a2a-protocol.org", reason)
    assert words in str(error.details())
    assert len(str(error.details())) < 400  # a short prefix of what was refused, never all
    for internal in ("Traceback", "Error(", "engine_service", "127.0.0.1"):
        assert internal not in str(error.details())


async def test_a_field_error_names_the_field_in_a_bad_request(engine: Harness) -> None:
    error = await _raw_error(engine, "ListTasks", ListTasksRequest(page_size=0))
    status = _status(error)
    bad = error_details_pb2.BadRequest()
    assert status.details[1].Unpack(bad)
    assert [v.field for v in bad.field_violations] == ["pageSize"]


async def test_bytes_that_are_no_request_are_invalid_argument(engine: Harness) -> None:
    call: Any = engine.channel.unary_unary(f"/{SERVICE_NAME}/GetTask")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(b"\xff\xff\xff", metadata=(("authorization", f"Bearer {TOKENS['alice']}"),))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_an_a2a_version_this_binding_does_not_speak_is_refused(engine: Harness) -> None:
    stub = _stub(engine)
    metadata = (("authorization", f"Bearer {TOKENS['alice']}"), ("a2a-version", "0.3"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.GetTask(GetTaskRequest(id="abc"), metadata=metadata, timeout=WAIT)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "1.0" in str(caught.value.details())


async def test_the_sdk_client_reads_errors_back_as_its_own_classes(connect: Connect) -> None:
    async with connect(streaming=False) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="nosuchtask"))
        with pytest.raises(InvalidParamsError):
            await client.get_task(GetTaskRequest(id="no/such"))
        request = _request("x")
        request.configuration.accepted_output_modes.append("image/png")
        with pytest.raises(ContentTypeNotSupportedError):
            await _task(client, request)
        with pytest.raises((A2AClientError, InvalidParamsError)):
            await client.get_task(GetTaskRequest(id=""))


# -- from the card -------------------------------------------------------------------


async def test_a_peer_that_prefers_grpc_follows_the_facade_card_to_the_engine(
    engine: Harness,
) -> None:
    """The card the facade serves (``[a2a] grpc_url`` set to the engine's address) is all a
    peer needs: the SDK's factory picks the gRPC interface and the task runs over it."""
    settings = load_settings(
        None,
        {"AGENTIK_PUBLIC_URL": "http://127.0.0.1:9/", "AGENTIK_A2A_GRPC_URL": engine.target},
    )
    body, _ = card_body(card_config(settings), "http://127.0.0.1:9/", "1.0")
    card = parse_agent_card(json.loads(body))

    def channel(url: str) -> grpc.aio.Channel:
        token = TOKENS["alice"]
        return grpc.aio.insecure_channel(
            url, interceptors=[_UnaryBearer(token), _StreamBearer(token)]
        )

    config = ClientConfig(
        streaming=False,
        grpc_channel_factory=channel,
        supported_protocol_bindings=["GRPC", "JSONRPC"],
        use_client_preference=True,
    )
    client = ClientFactory(config).create(card)
    try:
        task = await _task(client, _request("found by the card"))
    finally:
        await client.close()
    assert task.status.state == COMPLETED and _answer(task) == "Echo: found by the card"


async def test_the_tenant_names_the_agent_of_the_context_a_message_starts(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    path = tmp_path / "agentik.toml"
    path.write_text(
        f'[llm]\nbase_url = "{llm.base_url}"\napi_key = "k"\nmax_retries = 0\n\n'
        '[[agents]]\nname = "support"\nmodel = "small-model"\n'
    )
    settings = load_settings(
        path, {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://"}
    )
    async with running_engine(settings) as running:
        config = ClientConfig(
            streaming=False,
            grpc_channel_factory=grpc.aio.insecure_channel,
            supported_protocol_bindings=["GRPC"],
        )
        client = ClientFactory(config).create(_card(running.target, tenant="support"))
        try:
            task = await _task(client, _request("who answers?"))
        finally:
            await client.close()
        session = await running.engine.store.get_session(task.context_id)
    assert task.status.state == COMPLETED
    assert session.agent == "support" and llm.requests[-1]["model"] == "small-model"


def _two_agents(llm: FakeOpenAI, tmp_path: Path) -> tuple[Settings, ClientConfig]:
    """Settings with the agents ``support`` and ``research`` (memory store, a free port),
    and a unary gRPC client config."""
    path = tmp_path / "agentik.toml"
    path.write_text(
        f'[llm]\nbase_url = "{llm.base_url}"\napi_key = "k"\nmax_retries = 0\n\n'
        '[[agents]]\nname = "support"\n\n[[agents]]\nname = "research"\n'
    )
    settings = load_settings(
        path, {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://"}
    )
    config = ClientConfig(
        streaming=False,
        grpc_channel_factory=grpc.aio.insecure_channel,
        supported_protocol_bindings=["GRPC"],
    )
    return settings, config


async def test_a_tenant_lists_its_own_agent_s_tasks_and_no_tenant_every_agent_s(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    settings, config = _two_agents(llm, tmp_path)
    contexts: dict[str, str] = {}
    listed: dict[str, set[str]] = {}
    async with running_engine(settings) as running:
        for tenant in ("support", "research", ""):
            client = ClientFactory(config).create(_card(running.target, tenant=tenant))
            try:
                if tenant:
                    task = await _task(client, _request(f"a task for {tenant}"))
                    contexts[tenant] = task.context_id
                answer = await client.list_tasks(ListTasksRequest(tenant=tenant))
                listed[tenant] = {t.context_id for t in answer.tasks}
            finally:
                await client.close()
    assert listed["support"] == {contexts["support"]}
    assert listed["research"] == {contexts["research"]}
    assert listed[""] == set(contexts.values())


async def test_a_tenant_reaches_only_its_own_agent_s_tasks_and_contexts(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """A task of ``research`` is TaskNotFound with the tenant ``support`` for every task
    and push config method, a message on it too; a message on its context is refused
    naming ``message.contextId``. Its own tenant and no tenant reach it."""
    settings, config = _two_agents(llm, tmp_path)
    async with running_engine(settings) as running:
        research = ClientFactory(config).create(_card(running.target, tenant="research"))
        streaming = replace(config, streaming=True)  # SubscribeToTask needs a stream
        support = ClientFactory(streaming).create(_card(running.target, tenant="support"))
        root = ClientFactory(config).create(_card(running.target))
        try:
            task = await _task(research, _request("a research task"))
            push = TaskPushNotificationConfig(
                task_id=task.id, url="https://example.com/hook", tenant="support"
            )
            refusals: list[Any] = [
                support.get_task(GetTaskRequest(id=task.id, tenant="support")),
                support.cancel_task(CancelTaskRequest(id=task.id, tenant="support")),
                _collect(support.subscribe(SubscribeToTaskRequest(id=task.id, tenant="support"))),
                support.create_task_push_notification_config(push),
                support.get_task_push_notification_config(
                    GetTaskPushNotificationConfigRequest(task_id=task.id, id="c1", tenant="support")
                ),
                support.list_task_push_notification_configs(
                    ListTaskPushNotificationConfigsRequest(task_id=task.id, tenant="support")
                ),
                support.delete_task_push_notification_config(
                    DeleteTaskPushNotificationConfigRequest(
                        task_id=task.id, id="c1", tenant="support"
                    )
                ),
                _collect(support.send_message(_reply(Part(text="go on"), task))),
            ]
            for refusal in refusals:
                with pytest.raises(TaskNotFoundError):
                    await refusal
            with pytest.raises(InvalidParamsError, match=r"message\.contextId") as caught:
                await _collect(support.send_message(_request("go on", task.context_id)))
            assert "belongs to agent 'research'" in str(caught.value)
            own = await research.get_task(GetTaskRequest(id=task.id, tenant="research"))
            anyone = await root.get_task(GetTaskRequest(id=task.id))
        finally:
            for client in (research, support, root):
                await client.close()
    assert own.id == anyone.id == task.id and own.status.state == COMPLETED


async def test_the_extended_card_is_served_over_grpc_per_tenant_signed_with_the_tools(
    llm: FakeOpenAI, tmp_path: Path
) -> None:
    """With ``[a2a] public_url``, ``GetExtendedAgentCard`` answers the card the facade serves
    at the tenant's endpoint: the hidden skills, one skill per tool, signed; a2a-sdk's
    client follows the public card's ``extendedAgentCard`` to it and verifies it."""
    from a2a.utils.signing import create_signature_verifier
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (tmp_path / "card.pem").write_bytes(pem)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    verify = create_signature_verifier(lambda kid, jku: public, ["ES256"])
    path = tmp_path / "agentik.toml"
    path.write_text(
        f'[llm]\nbase_url = "{llm.base_url}"\napi_key = "k"\nmax_retries = 0\n\n'
        f'[a2a]\npublic_url = "https://agents.example.com/"\n'
        f'card_signing_key = "{tmp_path / "card.pem"}"\n'
        'skills = [{ id = "chat", name = "Chat", description = "Talks" },\n'
        '  { id = "ops", name = "Ops", description = "Hidden", extended = true }]\n\n'
        '[[agents]]\nname = "support"\ntools = ["calculate"]\n'
        'skills = [{ id = "help", name = "Help", description = "Helps" }]\n'
    )
    env = {"AGENTIK_GRPC_ADDR": "127.0.0.1:0", "AGENTIK_STORE": "memory://"}
    env["AGENTIK_TOKENS"] = TOKENS_ENV
    settings = load_settings(path, env)
    cards: dict[str, AgentCard] = {}
    async with running_engine(settings) as running:
        settings = load_settings(path, {**env, "AGENTIK_A2A_GRPC_URL": running.target})
        for tenant in ("", "support"):
            body, _ = card_body(endpoint_config(settings, card_config(settings), tenant), "", "1.0")
            card = parse_agent_card(json.loads(body))
            assert card.capabilities.extended_agent_card
            token = TOKENS["alice"]

            def channel(url: str, token: str = token) -> grpc.aio.Channel:
                return grpc.aio.insecure_channel(
                    url, interceptors=[_UnaryBearer(token), _StreamBearer(token)]
                )

            config = ClientConfig(
                streaming=False, grpc_channel_factory=channel, supported_protocol_bindings=["GRPC"]
            )
            client = ClientFactory(config).create(card)
            try:
                cards[tenant] = await client.get_extended_agent_card(
                    GetExtendedAgentCardRequest(tenant=tenant), signature_verifier=verify
                )
            finally:
                await client.close()
        stranger = await _raw_error(
            running, "GetExtendedAgentCard", GetExtendedAgentCardRequest(), metadata=()
        )
    root, support = cards[""], cards["support"]
    assert root.name == "agentik" and support.name == "support"
    assert root.supported_interfaces[0].url == "https://agents.example.com/"
    assert support.supported_interfaces[0].url == "https://agents.example.com/a2a/support/"
    assert [s.id for s in root.skills][:2] == ["chat", "ops"]
    assert "tool:current_time" in {s.id for s in root.skills}
    assert [s.id for s in support.skills] == ["help", "tool:calculate"]
    assert list(support.skills[0].tags) == ["support"]  # no tags configured: the agent's name
    assert len(root.signatures) == len(support.signatures) == 1
    assert stranger.code() == grpc.StatusCode.UNAUTHENTICATED
    schema = agent_card_schema()
    for card in cards.values():
        jsonschema.validate(json_format.MessageToDict(card), schema)


async def test_a_push_config_sent_with_the_message_gets_the_task_s_updates(
    connect: Connect,
) -> None:
    with Receiver() as hook:
        async with connect(streaming=False) as client:
            request = _request("push my updates")
            push = request.configuration.task_push_notification_config
            push.url, push.token = hook.url, "peer-token-1"
            push.authentication.scheme = "Bearer"
            push.authentication.credentials = "peer-credential-1"
            task = await _task(client, request)
            got = await asyncio.to_thread(hook.wait_for, 3, WAIT)
    bodies = [json.loads(g.body) for g in got]
    # Each update is its own delivery, retried on its own: they may arrive in any order.
    assert sorted(next(iter(b)) for b in bodies) == [
        "artifactUpdate",
        "statusUpdate",
        "statusUpdate",
    ]
    assert {b[next(iter(b))]["taskId"] for b in bodies} == {task.id}
    states = {b["statusUpdate"]["status"]["state"] for b in bodies if "statusUpdate" in b}
    assert states == {"TASK_STATE_WORKING", "TASK_STATE_COMPLETED"}
    for delivery in got:
        assert delivery.headers["x-a2a-notification-token"] == "peer-token-1"
        assert delivery.headers["authorization"] == "Bearer peer-credential-1"


async def test_subscribing_to_a_task_that_waits_for_input_gives_the_task_alone(
    connect: Connect,
) -> None:
    async with connect(streaming=False) as client, connect() as watcher:
        paused = await _task(client, _request(_CALCULATE))
        watched = await _collect(watcher.subscribe(SubscribeToTaskRequest(id=paused.id)))
    assert [e.WhichOneof("payload") for e in watched] == ["task"]
    assert watched[0].task.status.state == INPUT_REQUIRED
    assert watched[0].task.status.message == paused.status.message


# -- a task larger than one gRPC message -------------------------------------------------


@pytest.fixture
async def roomy(llm: FakeOpenAI) -> AsyncIterator[Harness]:
    """An engine whose model takes megabytes of context, so a task can pass 4 MiB."""
    settings = engine_settings(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        AGENTIK_LLM_MAX_RETRIES="0",
        AGENTIK_TOKENS=TOKENS_ENV,
        AGENTIK_CONTEXT_TOKENS="10000000",
        AGENTIK_COMPACTION="off",
        AGENTIK_MAX_EVENT_BYTES=str(3 * 1024 * 1024),  # a 2.5 MB message is one message
    )
    async with running_engine(settings) as running:
        yield running


async def test_a_task_past_one_grpc_message_is_read_with_its_newest_history_and_says_so(
    roomy: Harness,
) -> None:
    """Five 700 KB messages, their echo and its artifact: 4.9 MB of task, which GetTask
    used to refuse with gRPC's own RESOURCE_EXHAUSTED, for good."""
    alice = (("authorization", f"Bearer {TOKENS['alice']}"),)
    texts = [f"{index}" + "y" * 700_000 for index in range(5)]
    engine_stub = pb_grpc.AgentEngineStub(roomy.channel)
    request = pb.RunRequest(
        session_id="big",
        create_session=True,
        messages=[
            pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=t))])
            for t in texts
        ],
    )
    async with asyncio.timeout(WAIT):
        events = [event async for event in engine_stub.Run(request, metadata=alice)]
    task_id = events[0].run_id
    stub = _stub(roomy)
    got = await stub.GetTask(GetTaskRequest(id=task_id), metadata=alice, timeout=WAIT)
    assert got.ByteSize() <= 4 * 1024 * 1024 - 64 * 1024
    assert got.status.state == COMPLETED
    kept = [m.parts[0].text for m in got.history]
    clipped = int(got.metadata["agentik_history_clipped"])
    assert clipped >= 1 and len(kept) + clipped == 6  # five messages and the answer
    assert kept == [*texts, "Echo: " + texts[-1]][clipped:]  # the newest, in order
    assert _answer(got) == "Echo: " + texts[-1]  # the answer is kept
    # Asked for less history, nothing is left out: the task fits as asked.
    short = await stub.GetTask(
        GetTaskRequest(id=task_id, history_length=2), metadata=alice, timeout=WAIT
    )
    assert [m.parts[0].text for m in short.history] == kept[-2:]
    assert "agentik_history_clipped" not in short.metadata


async def test_send_message_with_a_task_past_one_grpc_message_answers_it_fitted(
    roomy: Harness,
) -> None:
    """A 2.5 MB message, its 2.5 MB echo and the echo's artifact: 7.5 MB of task."""
    alice = (("authorization", f"Bearer {TOKENS['alice']}"),)
    text = "z" * 2_500_000
    stub = _stub(roomy)
    answer = await stub.SendMessage(_request(text), metadata=alice, timeout=WAIT)
    task = answer.task
    assert task.status.state == COMPLETED and _answer(task) == "Echo: " + text
    assert int(task.metadata["agentik_history_clipped"]) >= 1
    streamed = stub.SendStreamingMessage(_request(text), metadata=alice, timeout=WAIT)
    responses = [response async for response in streamed]
    assert responses[-1].status_update.status.state == COMPLETED
    got = await stub.GetTask(GetTaskRequest(id=responses[0].task.id), metadata=alice, timeout=WAIT)
    assert _answer(got) == "Echo: " + text
