"""``GET /health``: liveness of the facade and of its engine.

The engine is asked through the standard ``grpc.health.v1`` service. 200 when it is
SERVING; 503 when it is not, or cannot be reached. ``llm`` is the engine's last check of
its agents' LLM endpoints (``ok``, ``model not checked``, ``unreachable``, ``unknown model``,
``unauthorized``, ``offline`` or ``checking``), from the answer's ``agentik-llm`` metadata:
it informs, it never turns the answer into a 503 (a run says what is wrong with the LLM when
it fails).
"""

from __future__ import annotations

from typing import Any

import grpc
from flask import Blueprint
from grpc_health.v1 import health_pb2

from web_facade.engine_client import current_engine
from web_facade.errors import error_body, from_rpc_error

__all__ = ["HEALTH_TIMEOUT", "bp"]

bp = Blueprint("health", __name__)

HEALTH_TIMEOUT = 2.0
"""Seconds the engine has to answer a health check."""


@bp.get("/health")
def health() -> tuple[dict[str, Any], int]:
    try:
        reply, call = current_engine().health.Check.with_call(
            health_pb2.HealthCheckRequest(service=""), timeout=HEALTH_TIMEOUT
        )
    except grpc.RpcError as exc:
        error = from_rpc_error(exc)
        return {
            "status": "unavailable",
            "facade": "ok",
            "engine": "unreachable",
            **error_body(error.code, error.message),
        }, 503
    engine = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status).lower()
    llm = dict(call.initial_metadata() or ()).get("agentik-llm", "unknown")
    if reply.status == health_pb2.HealthCheckResponse.SERVING:
        return {"status": "ok", "facade": "ok", "engine": engine, "llm": llm}, 200
    return {
        "status": "unavailable",
        "facade": "ok",
        "engine": engine,
        "llm": llm,
        **error_body("engine_unavailable", f"the engine reports {engine}"),
    }, 503
