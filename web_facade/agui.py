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

import json
import logging
import time
from collections.abc import Iterator
from typing import Any, Final

import grpc
from ag_ui.core import BaseEvent
from ag_ui.encoder import EventEncoder
from flask import Blueprint, Response

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agui_events import run_error, to_agui
from web_facade.agui_input import parse_input, run_options, run_request
from web_facade.conversations import OPEN_WAIT, _read_body
from web_facade.engine_client import current_engine, current_settings
from web_facade.errors import ApiError, from_rpc_error
from web_facade.sse import DRAINING, HEARTBEAT, EventRelay, sse_response

__all__ = ["AguiStream", "bp"]

log = logging.getLogger(__name__)

bp = Blueprint("agui", __name__)

_POLL: Final = 0.25
"""How often a waiting stream looks at ``DRAINING``, in seconds."""
_BATCH: Final = 256
"""Most events written in one chunk when they are already waiting."""
_ENCODER: Final = EventEncoder()


class AguiStream:
    """The AG-UI SSE body of one run, with its terminal event guaranteed.

    (When the client sends no state, the engine itself follows RUN_STARTED with a
    STATE_SNAPSHOT of the thread's state, so the run's STATE_DELTAs apply.)
    """

    def __init__(self, relay: EventRelay, heartbeat: float) -> None:
        self._relay = relay
        self._heartbeat = heartbeat
        self.ended = False

    def _events(self, event: pb.Event) -> list[BaseEvent]:
        converted = to_agui(event)
        if converted is None:
            return []
        out = [converted]
        if converted.type in ("RUN_FINISHED", "RUN_ERROR"):
            self.ended = True
        return out

    def _frames(self, item: Any) -> bytes:
        """Frames for ``item`` and the events already waiting behind it."""
        events: list[BaseEvent] = []
        while item is not None and not self.ended:
            if isinstance(item, pb.Event):
                events += self._events(item)
            elif isinstance(item, grpc.RpcError):
                error = from_rpc_error(item)
                events.append(run_error(error.code, error.message))
                self.ended = True
            else:  # the engine's stream ended: a run that did not finish is an error
                events.append(
                    run_error("engine_error", "the engine's event stream ended before the run did")
                )
                self.ended = True
            if self.ended or len(events) >= _BATCH:
                break  # take nothing more: an item taken now would not be written
            item = self._relay.get_nowait()
        return b"".join(_ENCODER.encode(e).encode() for e in events)

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield self._frames(self._relay.get_nowait()) or HEARTBEAT  # sends the headers now
            quiet_since = time.monotonic()
            while not self.ended:
                if DRAINING.is_set():
                    message = "the server is restarting; the run goes on, reload the thread"
                    yield _ENCODER.encode(run_error("shutting_down", message)).encode()
                    return
                item = self._relay.get(min(_POLL, self._heartbeat))
                if item is None:
                    if time.monotonic() - quiet_since >= self._heartbeat:
                        quiet_since = time.monotonic()
                        yield HEARTBEAT
                    continue
                chunk = self._frames(item)
                if chunk:
                    yield chunk
                    quiet_since = time.monotonic()
        except Exception:
            # A facade bug must still end the stream the way the protocol asks.
            log.exception("the AG-UI stream failed")
            if not self.ended:
                yield _ENCODER.encode(
                    run_error("internal", "internal error in the web facade")
                ).encode()
        finally:
            self._relay.cancel()


@bp.post("/agui")
def run() -> Response:
    """Run one AG-UI turn and stream its events."""
    try:
        body = json.loads(_read_body())
    except (ValueError, RecursionError) as exc:
        raise ApiError(400, "invalid_json", f"the request body is not valid JSON: {exc}") from None
    run_input = parse_input(body)
    options = run_options(run_input.forwarded_props)
    settings = current_settings()
    cancel = options.cancel_on_disconnect
    if cancel is None:
        cancel = settings.on_disconnect == "cancel"
    request = run_request(run_input, options, cancel_on_disconnect=cancel)
    relay = EventRelay(current_engine().engine.Run(request))
    first = relay.peek(OPEN_WAIT)
    if isinstance(first, grpc.RpcError):
        relay.cancel()
        raise first
    return sse_response(iter(AguiStream(relay, settings.heartbeat_interval)))
