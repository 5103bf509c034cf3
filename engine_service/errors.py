"""The gRPC boundary's one error table: core exception → status code, and how a call ends
with one (:func:`abort`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn, TypeAlias

import grpc

from agentik.collector import release
from engine_service.core import errors

__all__ = ["STATUS_FOR", "abort", "status_for"]

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

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
    errors.QuotaExceeded: grpc.StatusCode.RESOURCE_EXHAUSTED,
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


async def abort(context: Context, code: grpc.StatusCode, details: str) -> NoReturn:
    """End the call with ``code`` and ``details``, as ``context.abort`` does, without keeping
    the request alive after it.

    gRPC keeps the ``AbortError`` it raises on the call's state, and the error's traceback
    holds the handler's frames, which hold the context, which holds the call's state: a
    cycle. Until the collector finds it, it keeps every local of those frames (the request,
    up to the size limit, and what was made of it). With the collector set for a server
    (:mod:`agentik.collector`) that is many refused requests at once: 100 MiB more resident
    memory after the hostile fuzz. So once the call is done, the frames let go of their
    locals and the error of its traceback.
    """
    try:
        await context.abort(code, details)
    except grpc.aio.AbortError as aborted:
        # grpc-stubs type the callback as a class of their own that no function matches
        context.add_done_callback(_forgetting(aborted))  # type: ignore[arg-type]
        raise
    raise AssertionError("context.abort returned")  # pragma: no cover - it always raises


def _forgetting(aborted: BaseException) -> Callable[[Context], None]:
    def forget(_context: Context) -> None:
        release(aborted)

    return forget
