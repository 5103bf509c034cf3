"""The A2A errors every binding raises alike.

Errors are the a2a-sdk's exception classes (``a2a.utils.errors``); each binding words them
its own way on the wire (a JSON-RPC error object, a gRPC status with an ErrorInfo). What
they share: :func:`invalid_params`, which names the offending field, :data:`GRPC_ERRORS`,
the A2A error each of the engine's refusals is, and :func:`engine_refusal`, which words
such a refusal with the A2A field names (:data:`ENGINE_FIELDS`) a peer sent.
"""

from __future__ import annotations

import re
from typing import Any

import grpc
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

__all__ = ["DOMAIN", "ENGINE_FIELDS", "GRPC_ERRORS", "engine_refusal", "invalid_params"]

DOMAIN = "a2a-protocol.org"
"""The ErrorInfo domain the A2A spec (and the SDK) use."""

GRPC_ERRORS: dict[grpc.StatusCode, type[A2AError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidParamsError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidParamsError,
    grpc.StatusCode.ALREADY_EXISTS: InvalidParamsError,
    grpc.StatusCode.NOT_FOUND: TaskNotFoundError,
    # The engine's only precondition: the context has a task in flight. A2A has no
    # "busy" error; the operation is refused until that task ends.
    grpc.StatusCode.FAILED_PRECONDITION: UnsupportedOperationError,
    grpc.StatusCode.UNIMPLEMENTED: UnsupportedOperationError,
}
"""The engine's status for a refusal → the A2A error it is; any other is no A2A error (the
caller's credentials, rate or budget, the engine's health: each binding says those its way)."""


def invalid_params(field: str, message: str) -> InvalidParamsError:
    """InvalidParams whose message and ErrorInfo name ``field`` (``message.parts[0]``)."""
    return InvalidParamsError(f"{field}: {message}", data={"field": field})


_PART = r"messages\[0\]\.content\[(\d+)\]"
ENGINE_FIELDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_PART + r"\.image\.url\b"), r"message.parts[\1].url"),
    (re.compile(_PART + r"\.image\.data\b"), r"message.parts[\1].raw"),
    (re.compile(_PART + r"\.(?:image|document)\.mime_type\b"), r"message.parts[\1].mediaType"),
    (re.compile(_PART + r"(?:\.\w+)*"), r"message.parts[\1]"),
    (re.compile(r"messages\[0\](?:\.\w+)*"), "message"),
    (re.compile(r"session_id\b"), "contextId"),
)
"""The engine's field at the start of its refusal (a task's run carries the peer's message
as ``messages[0]``, its context as the session) → the A2A field the peer sent."""


def engine_refusal(error_class: type[A2AError], message: str, **data: Any) -> A2AError:
    """``error_class`` for the engine's refusal ``message``; when it begins with an engine
    field of :data:`ENGINE_FIELDS`, worded ``field: problem`` with the A2A field, which
    ``data["field"]`` names too."""
    for pattern, field in ENGINE_FIELDS:
        match = pattern.match(message)
        if match is not None:
            named = match.expand(field)
            data["field"] = named
            message = f"{named}: {message[match.end() :].lstrip(' :')}"
            break
    return error_class(message, data=data or None)
