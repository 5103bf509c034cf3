"""JSON-RPC 2.0 envelopes of the A2A facade, shared by its plain and streamed answers."""

from __future__ import annotations

import json
import logging
from typing import Any

from a2a.utils.errors import A2AError, InternalError

from web_facade.a2a.errors import error_object

__all__ = ["RequestId", "encode", "error", "reply", "unexpected"]

log = logging.getLogger(__name__)

RequestId = str | int | None


def encode(value: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON; never raises for text: a lone UTF-16 surrogate (no UTF-8 has
    one) that got past the checks on what a client sends is written as a ``\\u`` escape."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


def reply(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error(request_id: RequestId, exc: A2AError) -> dict[str, Any]:
    """A JSON-RPC error response, through the A2A error table."""
    return {"jsonrpc": "2.0", "id": request_id, "error": error_object(exc)}


def unexpected(exc: Exception) -> A2AError:
    """A bug in the facade: logged whole, answered as InternalError without internals."""
    log.error("unhandled error in the A2A facade", exc_info=exc)
    return InternalError("internal error in the A2A facade")
