"""``POST /agui`` and ``POST /agui/{agent}``: the AG-UI 1.0 facade; ``GET .../capabilities``:
what the agent supports (:mod:`web_facade.agui.capabilities`).

convert (``RunAgentInput`` → ``RunRequest``, :mod:`web_facade.agui.input`) → one engine
``Run`` call → convert (engine events → AG-UI events, :mod:`web_facade.agui.events`),
streamed by :class:`web_facade.agui.stream.AguiStream` as ``data: <json>`` SSE frames.

Errors: a request the facade or the engine refuses before the run starts is an HTTP error
(422 for input that does not validate; the engine's refusals through ``web_facade.errors``:
400, 409 busy / input_required / already_exists, 503 ...). Once the stream is open every
failure is a RUN_ERROR, and the stream always ends with RUN_FINISHED or RUN_ERROR — also
when the engine connection breaks or the worker shuts down mid-run.

The thread id is the engine's session id, so a thread is also an ``/agentik`` conversation.
The run belongs to the engine: a client that disconnects does not stop it (unless the
server's ``on_disconnect`` setting or ``forwardedProps.agentik.cancelOnDisconnect`` says so).
"""

from __future__ import annotations

from typing import Any

import grpc
from flask import Blueprint, Response

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.engine_client import UNARY_TIMEOUT, current_engine, current_settings
from web_facade.errors import AGUI_WORDS, rpc_error_handler
from web_facade.request_body import read_json
from web_facade.stream import open_run

__all__ = ["bp"]

bp = Blueprint("agui", __name__)
# The engine's refusals in AG-UI's words: thread, resume[i].interruptId.
bp.register_error_handler(grpc.RpcError, rpc_error_handler(AGUI_WORDS))


@bp.post("/agui")
@bp.post("/agui/<agent>")
def run(agent: str = "") -> Response:
    """Run one AG-UI turn and stream its events; ``/agui/{agent}``: as that agent (a new
    thread is made that agent's; a thread of another agent is refused), ``/agui``: a new
    thread is the default agent's (docs/agents.md)."""
    # The AG-UI SDK (pydantic models, ~14 MB) is loaded by the first AG-UI request, not by
    # every worker at start.
    from web_facade.agui.input import parse_input, run_options, run_request
    from web_facade.agui.stream import AguiStream

    run_input = parse_input(read_json(unacceptable=422))
    options = run_options(run_input.forwarded_props)
    settings = current_settings()
    cancel = options.cancel_on_disconnect
    if cancel is None:
        cancel = settings.web.on_disconnect == "cancel"
    request = run_request(run_input, options, cancel_on_disconnect=cancel)
    request.agent = agent
    request.batch_events = True  # the relay unpacks them: fewer messages under load
    # A refusal (409 busy, 503 overloaded ...) is an HTTP error, raised before the stream opens.
    engine = current_engine().engine
    relay = open_run(engine, request)
    return AguiStream(relay, settings.web.heartbeat_interval).response()


@bp.get("/agui/capabilities")
@bp.get("/agui/<agent>/capabilities")
def capabilities(agent: str = "") -> dict[str, Any]:
    """What the agent supports, as AG-UI ``AgentCapabilities``; ``/agui/capabilities``: the
    default agent's. 404 ``agent_not_found`` for an agent not served."""
    from web_facade.agui.capabilities import capabilities as of_agent

    name = agent or current_settings().agent.name
    found = current_engine().engine.GetAgent(pb.GetAgentRequest(name=name), timeout=UNARY_TIMEOUT)
    return of_agent(found)
