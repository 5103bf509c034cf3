"""The A2A SSE bodies: in JSON-RPC every ``data:`` is a whole JSON-RPC response; in the
HTTP+JSON binding (:class:`RestStream`) it is the bare stream response, and an error is an
``event: error`` frame holding a ``google.rpc.Status``.

A streamed task writes one response per A2A stream response (the task, status and
artifact updates), and ends after the task's final state. A broken engine stream, or one
that ends before the task did, ends with a JSON-RPC error the peer can act on (ask with
GetTask); a draining worker ends the stream without a word, and the peer resubscribes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from a2a.types import StreamResponse
from a2a.utils.errors import A2AError, InternalError
from google.protobuf import json_format

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.a2a.errors import from_rpc, rest_error
from web_facade.a2a.jsonrpc import RequestId, encode, error, reply, unexpected
from web_facade.a2a.tasks import TaskFollow
from web_facade.proto_json import whole_numbers
from web_facade.stream import EventStream

__all__ = ["A2aStream", "RestStream", "Shape", "stream_json"]

Shape = Callable[[StreamResponse], dict[str, Any]]
"""One stream response as the JSON ``result`` of the request's A2A version."""


def stream_json(response: StreamResponse) -> dict[str, Any]:
    """One stream response as ProtoJSON (A2A 1.0's shape), as ``MessageToDict`` gives it,
    whole numbers as integers (``agentik.proto_json``).

    Most of a stream is text chunks (artifact updates of one text part): those are built
    here directly, at a fifth of ``MessageToDict``'s cost per event; anything else (or a
    chunk with fields the direct path does not know) goes through ``MessageToDict``.
    """
    if response.WhichOneof("payload") == "artifact_update":
        update = response.artifact_update
        artifact = update.artifact
        if (
            not update.HasField("metadata")
            and not artifact.HasField("metadata")
            and not artifact.description
            and not artifact.extensions
            and all(
                len(part.ListFields()) == 1 and part.HasField("text") for part in artifact.parts
            )
        ):
            shown: dict[str, Any] = {}
            if artifact.artifact_id:
                shown["artifactId"] = artifact.artifact_id
            if artifact.name:
                shown["name"] = artifact.name
            if artifact.parts:
                shown["parts"] = [{"text": part.text} for part in artifact.parts]
            out: dict[str, Any] = {}
            if update.task_id:
                out["taskId"] = update.task_id
            if update.context_id:
                out["contextId"] = update.context_id
            if update.HasField("artifact"):
                out["artifact"] = shown
            if update.append:
                out["append"] = True
            if update.last_chunk:
                out["lastChunk"] = True
            return {"artifactUpdate": out}
    # A status update's and a task's metadata (usage) hold doubles: sent as integers.
    slow: dict[str, Any] = whole_numbers(json_format.MessageToDict(response))
    return slow


class A2aStream(EventStream):
    """A2A's hooks on the shared stream loop, for one streaming JSON-RPC request."""

    name = "A2A"

    def __init__(
        self, follow: TaskFollow, heartbeat: float, request_id: RequestId, shape: Shape
    ) -> None:
        super().__init__(follow.relay, heartbeat)
        self._follow = follow
        self._request_id = request_id
        self._shape = shape

    def _responses(self, responses: list[StreamResponse]) -> bytes:
        return b"".join(self.frame(reply(self._request_id, self._shape(r))) for r in responses)

    @staticmethod
    def frame(payload: dict[str, Any]) -> bytes:
        """One SSE frame holding one JSON-RPC response."""
        return b"data: " + encode(payload) + b"\n\n"

    def _error(self, exc: A2AError) -> bytes:
        return self.frame(error(self._request_id, exc))

    def opening(self) -> bytes:
        return self._responses(self._follow.first)

    def encode_event(self, event: pb.Event) -> bytes:
        out = self._follow.feed(event)
        self.done = self._follow.done
        return self._responses(out)

    def encode_error(self, exc: grpc.RpcError) -> bytes:
        return self._error(from_rpc(exc))

    def on_end(self) -> bytes:
        return self._error(
            InternalError("the engine ended the task's stream early; ask with GetTask")
        )

    def on_failure(self, exc: Exception) -> bytes:
        return self._error(exc if isinstance(exc, A2AError) else unexpected(exc))


class RestStream(A2aStream):
    """The same stream in the HTTP+JSON binding (spec §11.7): each ``data:`` one stream
    response, an error an ``event: error`` frame with the binding's error body."""

    name = "A2A HTTP+JSON"

    def __init__(self, follow: TaskFollow, heartbeat: float) -> None:
        super().__init__(follow, heartbeat, None, stream_json)

    def _responses(self, responses: list[StreamResponse]) -> bytes:
        return b"".join(self.frame(stream_json(r)) for r in responses)

    def _error(self, exc: A2AError) -> bytes:
        return b"event: error\n" + self.frame(rest_error(exc)[1])
