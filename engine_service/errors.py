"""The gRPC boundary's one error table: core exception → status code."""

from __future__ import annotations

import grpc

from engine_service.core import errors

__all__ = ["STATUS_FOR", "status_for"]

STATUS_FOR: dict[type[errors.AgentikError], grpc.StatusCode] = {
    errors.InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,
    errors.ContextTooLong: grpc.StatusCode.INVALID_ARGUMENT,
    errors.SessionNotFound: grpc.StatusCode.NOT_FOUND,
    errors.RunNotFound: grpc.StatusCode.NOT_FOUND,
    errors.PushConfigNotFound: grpc.StatusCode.NOT_FOUND,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.SessionBusy: grpc.StatusCode.FAILED_PRECONDITION,
    errors.InputRequired: grpc.StatusCode.FAILED_PRECONDITION,
    errors.Overloaded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.RateLimited: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.BudgetExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Unauthenticated: grpc.StatusCode.UNAUTHENTICATED,
    errors.Forbidden: grpc.StatusCode.PERMISSION_DENIED,
    errors.ShuttingDown: grpc.StatusCode.UNAVAILABLE,
    errors.LLMError: grpc.StatusCode.UNAVAILABLE,
    errors.StorageUnavailable: grpc.StatusCode.UNAVAILABLE,
}


def status_for(exc: errors.AgentikError) -> grpc.StatusCode:
    for cls in type(exc).__mro__:
        code = STATUS_FOR.get(cls)
        if code is not None:
            return code
    return grpc.StatusCode.INTERNAL
