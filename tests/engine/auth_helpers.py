"""Bearer-token helpers shared by the engine's authentication tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

import grpc
import pytest

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from tests.engine.harness import WAIT, collect

Metadata: TypeAlias = tuple[tuple[str, str], ...]

TOKENS = {
    "alice": "alice-Tk-9f3Qz71LmP",
    "bob": "bob-Tk-4Hx82RwvNc",
    "ops": "ops-Tk-6Jd05YbqUe",
}
"""Distinctive strings, so a log or a message that echoes one is easy to catch."""

TOKENS_ENV = ",".join(f"{name}:{token}" for name, token in TOKENS.items())


def bearer(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


def as_(principal: str) -> Metadata:
    """The metadata of a request by ``principal`` (one of ``TOKENS``)."""
    return bearer(TOKENS[principal])


def trailers(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {str(key): str(value) for key, value in error.trailing_metadata() or ()}


async def rpc_error(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    """The error ``call`` ends with; fails when it succeeds."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async with asyncio.timeout(WAIT):
            await call
    return caught.value


async def outcome(call: Any) -> tuple[list[pb.Event], grpc.aio.AioRpcError | None]:
    """The events a server stream gave, and the error it ended with (or None)."""
    events: list[pb.Event] = []
    try:
        async with asyncio.timeout(WAIT):
            while (event := await call.read()) is not grpc.aio.EOF:
                events.append(event)
    except grpc.aio.AioRpcError as exc:
        return events, exc
    return events, None


RpcCall: TypeAlias = Callable[["pb_grpc.AgentEngineAsyncStub", Metadata], Awaitable[Any]]


def every_rpc(session_id: str, run_id: str) -> dict[str, RpcCall]:
    """One call of each AgentEngine RPC on these ids, by name."""
    return {
        "Run": lambda s, md: collect(
            s.Run(
                pb.RunRequest(
                    session_id=session_id,
                    create_session=True,
                    messages=[pb.Message(role=pb.ROLE_USER, content=[text("hi")])],
                ),
                metadata=md,
            )
        ),
        "Interrupt": lambda s, md: s.Interrupt(
            pb.InterruptRequest(session_id=session_id), metadata=md
        ),
        "Subscribe": lambda s, md: collect(
            s.Subscribe(pb.SubscribeRequest(session_id=session_id, until_idle=True), metadata=md)
        ),
        "CreateSession": lambda s, md: s.CreateSession(
            pb.CreateSessionRequest(session_id=session_id), metadata=md
        ),
        "GetSession": lambda s, md: s.GetSession(
            pb.GetSessionRequest(session_id=session_id), metadata=md
        ),
        "ListSessions": lambda s, md: s.ListSessions(pb.ListSessionsRequest(), metadata=md),
        "RenameSession": lambda s, md: s.RenameSession(
            pb.RenameSessionRequest(session_id=session_id, title="t"), metadata=md
        ),
        "ForkSession": lambda s, md: s.ForkSession(
            pb.ForkSessionRequest(session_id=session_id, up_to_message_id="m1"), metadata=md
        ),
        "DeleteSession": lambda s, md: s.DeleteSession(
            pb.DeleteSessionRequest(session_id=session_id), metadata=md
        ),
        "ListMessages": lambda s, md: s.ListMessages(
            pb.ListMessagesRequest(session_id=session_id), metadata=md
        ),
        "GetRun": lambda s, md: s.GetRun(pb.GetRunRequest(run_id=run_id), metadata=md),
        "ListRuns": lambda s, md: s.ListRuns(pb.ListRunsRequest(), metadata=md),
        "ListRunChains": lambda s, md: s.ListRunChains(pb.ListRunChainsRequest(), metadata=md),
        "Authenticate": lambda s, md: s.Authenticate(pb.AuthenticateRequest(), metadata=md),
        "ListFailedWebhooks": lambda s, md: s.ListFailedWebhooks(
            pb.ListFailedWebhooksRequest(), metadata=md
        ),
        "SetSessionWebhook": lambda s, md: s.SetSessionWebhook(
            pb.SetSessionWebhookRequest(session_id=session_id), metadata=md
        ),
        "SetPushConfig": lambda s, md: s.SetPushConfig(
            pb.SetPushConfigRequest(
                config=pb.PushConfig(task_id=run_id, url="https://hooks.example.com/")
            ),
            metadata=md,
        ),
        "GetPushConfig": lambda s, md: s.GetPushConfig(
            pb.GetPushConfigRequest(task_id=run_id, id="c1"), metadata=md
        ),
        "ListPushConfigs": lambda s, md: s.ListPushConfigs(
            pb.ListPushConfigsRequest(task_id=run_id), metadata=md
        ),
        "DeletePushConfig": lambda s, md: s.DeletePushConfig(
            pb.DeletePushConfigRequest(task_id=run_id, id="c1"), metadata=md
        ),
        "ListAgents": lambda s, md: s.ListAgents(pb.ListAgentsRequest(), metadata=md),
        "GetAgent": lambda s, md: s.GetAgent(pb.GetAgentRequest(name="agentik"), metadata=md),
    }


def text(value: str) -> pb.ContentPart:
    return pb.ContentPart(text=pb.TextPart(text=value))
