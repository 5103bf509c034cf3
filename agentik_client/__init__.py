"""A small typed client of the engine's gRPC API, for internal services: sync and asyncio.

::

    from agentik_client import Client

    with Client("127.0.0.1:50051", token="...") as engine:
        for event in engine.run("support-42", "what time is it?", create_session=True):
            if event.WhichOneof("kind") == "text_message_content":
                print(event.text_message_content.delta, end="")

A run is an iterator of ``Event`` messages (``agentik.rpc.agentik.engine.v1``) that
resumes by itself after a dropped connection (``Subscribe`` after the last seq it delivered:
no event lost, none twice). Refusals are exceptions (:mod:`agentik_client.errors`).
"""

from __future__ import annotations

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik_client.aio import AsyncClient, AsyncEventStream
from agentik_client.errors import (
    AgentikError,
    AlreadyExists,
    Busy,
    ConnectionLost,
    InternalError,
    InvalidArgument,
    NotFound,
    Overloaded,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from agentik_client.sync import Client, EventStream

__all__ = [
    "AgentikError",
    "AlreadyExists",
    "AsyncClient",
    "AsyncEventStream",
    "Busy",
    "Client",
    "ConnectionLost",
    "EventStream",
    "InternalError",
    "InvalidArgument",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "Unauthenticated",
    "Unavailable",
    "pb",
]
