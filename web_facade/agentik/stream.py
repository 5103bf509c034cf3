"""The ``/agentik`` SSE body: one frame per mapped engine event, resumable by id.

Frames are ``id: <seq>\\nevent: <name>\\ndata: <json>\\n\\n`` (see
:mod:`web_facade.agentik.events`). The stream opens with a ``retry:`` hint for EventSource
clients. It ends when the engine's stream does (``send``: after the turn; ``events``: when
the conversation goes idle with ``until_idle``); a broken engine stream ends with an
``error`` frame without id, and a draining worker ends it without a word — the client
resumes with ``Last-Event-ID`` and misses nothing.
"""

from __future__ import annotations

from typing import Final

import grpc

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.events import event_frame, frame
from web_facade.errors import AGENTIK_WORDS, from_rpc_error
from web_facade.stream import EventStream

__all__ = ["RETRY_MS", "AgentikStream"]

RETRY_MS: Final = 1000
"""What ``retry:`` tells EventSource clients to wait before reconnecting, in ms."""


def _error_frame(code: str, message: str) -> bytes:
    return frame(None, "error", {"type": "error", "code": code, "message": message})


class AgentikStream(EventStream):
    """``/agentik``'s hooks on the shared stream loop."""

    name = "/agentik"

    def opening(self) -> bytes:
        return f"retry: {RETRY_MS}\n\n".encode()

    def encode_event(self, event: pb.Event) -> bytes:
        return event_frame(event) or b""

    def encode_error(self, error: grpc.RpcError) -> bytes:
        mapped = from_rpc_error(error, AGENTIK_WORDS)
        return _error_frame(mapped.code, mapped.message)

    def on_failure(self, exc: Exception) -> bytes:
        return _error_frame("internal", "internal error in the web facade")
