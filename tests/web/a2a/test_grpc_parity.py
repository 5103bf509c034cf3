"""The two A2A bindings are one set of tasks: what one binding starts the other reads the
same (the facade's JSON-RPC on the in-process app, the
engine's gRPC binding with the a2a-sdk's gRPC client, one real engine behind both)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import grpc
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    GetExtendedAgentCardRequest,
    GetTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SendMessageRequest,
)
from google.protobuf import json_format

from tests.fakes.fake_openai import FakeOpenAI
from tests.web.a2a.conftest import Rpc, user_message
from tests.web.conftest import BackgroundEngine, engine_settings, web_settings
from web_facade import create_app
from web_facade.engine_client import EngineClient


@pytest.fixture
async def grpc_client(engine_target: str) -> AsyncIterator[Client]:
    card = AgentCard(
        name="agentik",
        supported_interfaces=[
            AgentInterface(url=engine_target, protocol_binding="GRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
    )
    config = ClientConfig(
        streaming=False,
        grpc_channel_factory=grpc.aio.insecure_channel,
        supported_protocol_bindings=["GRPC"],
    )
    client = ClientFactory(config).create(card)
    yield client
    await client.close()


async def test_a_task_sent_over_grpc_reads_the_same_over_json_rpc(
    grpc_client: Client, rpc: Rpc
) -> None:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text="hi")])
    [event] = [e async for e in grpc_client.send_message(SendMessageRequest(message=message))]
    got = await grpc_client.get_task(GetTaskRequest(id=event.task.id))
    over_json = rpc.result("GetTask", {"id": event.task.id})
    assert over_json == json_format.MessageToDict(got)
    assert over_json["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_task_sent_over_json_rpc_reads_and_lists_the_same_over_grpc(
    grpc_client: Client, rpc: Rpc
) -> None:
    sent = rpc.result("SendMessage", {"message": user_message("two bindings")})["task"]
    second = user_message("one conversation", contextId=sent["contextId"])
    rpc.result("SendMessage", {"message": second})
    got = await grpc_client.get_task(GetTaskRequest(id=sent["id"]))
    assert json_format.MessageToDict(got) == rpc.result("GetTask", {"id": sent["id"]})
    listed = await grpc_client.list_tasks(ListTasksRequest(context_id=sent["contextId"]))
    over_json = rpc.result("ListTasks", {"contextId": sent["contextId"]})
    # (JSON-RPC's ListTasks writes its fields with default values too: compare the messages.)
    assert json_format.ParseDict(over_json, ListTasksResponse()) == listed
    assert len(listed.tasks) == 2


async def test_the_extended_card_is_the_same_over_json_rpc_and_grpc(llm: FakeOpenAI) -> None:
    """Facade and engine build the extended card from the same settings
    (``agentik.a2a.card``): the default agent's and an agent's, tools included, alike."""
    env = {"AGENTIK_PUBLIC_URL": "https://agents.example.com/"}
    engine = BackgroundEngine(engine_settings(llm, **env))
    target = engine.start()
    client = EngineClient(target)
    try:
        app = create_app(web_settings(target, **env), client)
        app.testing = True
        rpc = Rpc(app.test_client())
        config = ClientConfig(
            streaming=False,
            grpc_channel_factory=grpc.aio.insecure_channel,
            supported_protocol_bindings=["GRPC"],
        )
        card = AgentCard(
            name="agentik",
            supported_interfaces=[
                AgentInterface(url=target, protocol_binding="GRPC", protocol_version="1.0")
            ],
            capabilities=AgentCapabilities(extended_agent_card=True),
        )
        peer = ClientFactory(config).create(card)
        try:
            over_grpc = await peer.get_extended_agent_card(GetExtendedAgentCardRequest())
        finally:
            await peer.close()
        over_json = rpc.result("GetExtendedAgentCard", {})
    finally:
        client.close()
        engine.stop()
    assert over_json == json_format.MessageToDict(over_grpc)
    assert over_json["supportedInterfaces"][0]["url"] == "https://agents.example.com/"
    assert "tool:calculate" in {skill["id"] for skill in over_json["skills"]}
