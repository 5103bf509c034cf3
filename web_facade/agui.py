"""``POST /agui``: the AG-UI 1.0 facade.

convert (``RunAgentInput`` → ``RunRequest``, :mod:`web_facade.agui_input`) → one engine
``Run`` call → convert (engine events → AG-UI events, :mod:`web_facade.agui_events`),
encoded by ``ag_ui.encoder`` as ``data: <json>`` SSE frames.

Errors: a request the facade or the engine refuses before the run starts is an HTTP error
(422 for input that does not validate; the engine's refusals through
``web_facade.errors``: 400, 409 busy, 503 ...). Once the stream is open every failure is a
RUN_ERROR, and the stream always ends with RUN_FINISHED or RUN_ERROR — also when the engine
connection breaks or the worker shuts down mid-run.

The thread id is the engine's session id, so a thread is also an ``/agentik`` conversation.
The run belongs to the engine: a client that disconnects does not stop it (unless the
server's ``on_disconnect`` setting or ``forwardedProps.agentik.cancelOnDisconnect`` says so).
"""

from __future__ import annotations

from typing import Final

import grpc
from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder
from flask import Blueprint, Response

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agui_events import run_error, to_agui
from web_facade.agui_input import parse_input, run_options, run_request
from web_facade.engine_client import current_engine, current_settings
from web_facade.errors import from_rpc_error
from web_facade.request_body import read_json
from web_facade.stream import EventStream, open_relay

__all__ = ["AguiStream", "bp"]

bp = Blueprint("agui", __name__)

_ENCODER: Final = EventEncoder()
_TERMINAL: Final = frozenset({"RUN_FINISHED", "RUN_ERROR"})


def _encoded(event: BaseEvent) -> bytes:
    return _ENCODER.encode(event).encode()


class AguiStream(EventStream):
    """The AG-UI SSE body of one run, with its terminal event guaranteed: whatever ends
    the stream before the engine's RUN_FINISHED or RUN_ERROR writes a RUN_ERROR.

    (When the client sends no state, the engine itself follows RUN_STARTED with a
    STATE_SNAPSHOT of the thread's state, so the run's STATE_DELTAs apply.)
    """

    name = "AG-UI"

    def encode_event(self, event: pb.Event) -> bytes:
        converted = to_agui(event)
        if converted is None:
            return b""
        if converted.type in _TERMINAL:
            self.done = True
        return _encoded(converted)

    def encode_error(self, error: grpc.RpcError) -> bytes:
        mapped = from_rpc_error(error)
        return _encoded(run_error(mapped.code, mapped.message))

    def on_end(self) -> bytes:
        message = "the engine's event stream ended before the run did"
        return _encoded(run_error("engine_error", message))

    def on_drain(self) -> bytes:
        message = "the server is restarting; the run goes on, reload the thread"
        return _encoded(run_error("shutting_down", message))

    def on_failure(self, exc: Exception) -> bytes:
        return _encoded(run_error("internal", "internal error in the web facade"))


@bp.post("/agui")
def run() -> Response:
    """Run one AG-UI turn and stream its events."""
    run_input = parse_input(read_json())
    options = run_options(run_input.forwarded_props)
    settings = current_settings()
    cancel = options.cancel_on_disconnect
    if cancel is None:
        cancel = settings.on_disconnect == "cancel"
    request = run_request(run_input, options, cancel_on_disconnect=cancel)
    # A refusal (409 busy, 503 overloaded ...) is an HTTP error, raised before the stream opens.
    relay = open_relay(current_engine().engine.Run(request))
    return AguiStream(relay, settings.heartbeat_interval).response()
