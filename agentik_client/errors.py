"""Errors of the engine as exceptions: one class per kind of failure a caller handles.

Every error is an :class:`AgentikError` with the engine's message (it names the problem, e.g.
the field of a malformed request), the gRPC status code and, where the engine sends one, its
own code (``reason``: ``busy``, ``input_required``, ``overloaded``, ``rate_limited``, ...).
"""

from __future__ import annotations

import grpc

__all__ = [
    "AgentikError",
    "AlreadyExists",
    "Busy",
    "ConnectionLost",
    "InternalError",
    "InvalidArgument",
    "NotFound",
    "Overloaded",
    "PermissionDenied",
    "Unauthenticated",
    "Unavailable",
    "from_rpc_error",
]


class AgentikError(Exception):
    """A call the engine refused or could not answer."""

    def __init__(
        self,
        message: str,
        *,
        status: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        reason: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class InvalidArgument(AgentikError):
    """A malformed request; the message names the field (INVALID_ARGUMENT)."""


class NotFound(AgentikError):
    """An unknown session or run (NOT_FOUND)."""


class AlreadyExists(AgentikError):
    """A session or run id that is taken (ALREADY_EXISTS)."""


class Busy(AgentikError):
    """The session runs another turn, or waits for a person (FAILED_PRECONDITION)."""


class Unauthenticated(AgentikError):
    """No token, or one the engine does not accept (UNAUTHENTICATED)."""


class PermissionDenied(AgentikError):
    """Another principal's session (PERMISSION_DENIED)."""


class Overloaded(AgentikError):
    """At the engine's run limit, the caller's rate limit or its token budget of the day
    (RESOURCE_EXHAUSTED; ``reason`` ``budget_exceeded`` for the budget); ``retry_after``
    says when to try again, where the engine says it."""


class Unavailable(AgentikError):
    """The engine is unreachable or shutting down (UNAVAILABLE)."""


class ConnectionLost(Unavailable):
    """A stream broke and could not be resumed within the client's ``reconnect_within``."""


class InternalError(AgentikError):
    """A bug on the engine's side; the message carries the id to find it in its log."""


_BY_STATUS: dict[grpc.StatusCode, type[AgentikError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: Busy,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Overloaded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.INTERNAL: InternalError,
}


def from_rpc_error(error: grpc.RpcError) -> AgentikError:
    """The exception for a failed call (its status, message and the engine's trailers)."""
    if not isinstance(error, grpc.aio.AioRpcError | grpc.Call):
        return AgentikError(str(error))
    status, details = error.code(), error.details()
    trailers = dict(error.trailing_metadata() or ())
    retry = trailers.get("retry-after")
    cls = _BY_STATUS.get(status, AgentikError)
    return cls(
        details or status.name.lower(),
        status=status,
        reason=str(trailers.get("agentik-error", "")),
        retry_after=float(retry) if isinstance(retry, str) and _is_number(retry) else None,
    )


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
