"""The A2A errors every binding raises alike.

Errors are the a2a-sdk's exception classes (``a2a.utils.errors``); each binding words them
its own way on the wire (a JSON-RPC error object, a gRPC status with an ErrorInfo). What
they share: :func:`invalid_params`, which names the offending field, and
:data:`GRPC_ERRORS`, the A2A error each of the engine's refusals is.
"""

from __future__ import annotations

import grpc
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

__all__ = ["DOMAIN", "GRPC_ERRORS", "invalid_params"]

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
