"""The A2A facade's one error table: every failure becomes a JSON-RPC error object.

Errors are the a2a-sdk's exception classes (``a2a.utils.errors``)::

    A2AError
     ├─ JSONParseError                 -32700  the body is not JSON
     ├─ InvalidRequestError            -32600  not a JSON-RPC 2.0 request (batch, jsonrpc, id)
     ├─ MethodNotFoundError            -32601
     ├─ InvalidParamsError             -32602  ``data["field"]`` names the offending field
     ├─ InternalError                  -32603  the engine failed or is unreachable
     ├─ TaskNotFoundError              -32001
     ├─ TaskNotCancelableError         -32002
     ├─ PushNotificationNotSupportedError  -32003
     ├─ UnsupportedOperationError      -32004
     ├─ ContentTypeNotSupportedError   -32005
     ├─ InvalidAgentResponseError      -32006
     ├─ ExtendedAgentCardNotConfiguredError  -32007
     ├─ ExtensionSupportRequiredError  -32008
     └─ VersionNotSupportedError       -32009

and two of ours for what A2A leaves to HTTP, each with its HTTP status:
:class:`AuthenticationRequired` (401, ``WWW-Authenticate``) and :class:`RateLimitedError`
(429, ``Retry-After``), both with the JSON-RPC body of an InvalidRequest whose ErrorInfo
reason says which; and :class:`QuotaExceededError`, the same body (reason
``QUOTA_EXCEEDED``) on HTTP 200 as any other JSON-RPC error (409 in the HTTP+JSON binding).

:data:`ERRORS` gives each its code and ``google.rpc.ErrorInfo`` reason; :data:`GRPC_ERRORS`
maps the engine's gRPC status codes onto them. ``error.data`` is always a list that starts
with an ErrorInfo (plus a ``google.rpc.BadRequest`` when a field is named). JSON-RPC errors
travel with HTTP 200 — but for those two.

The HTTP+JSON binding (``web_facade.a2a.rest``) answers the same errors as a
``google.rpc.Status`` (``{"error": {code, status, message, details}}``) on the HTTP status
of :data:`HTTP_ERRORS` (the spec's table, §5.4), ``details`` the same list as ``error.data``:
:func:`rest_error`.
"""

from __future__ import annotations

from typing import Any

import grpc
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InternalError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)

from agentik.a2a.errors import DOMAIN, GRPC_ERRORS, engine_refusal, invalid_params
from web_facade.errors import from_rpc_error

__all__ = [
    "DOMAIN",
    "AuthenticationRequired",
    "BudgetExceededError",
    "QuotaExceededError",
    "RateLimitedError",
    "ERRORS",
    "GRPC_ERRORS",
    "HTTP_ERRORS",
    "error_object",
    "from_rpc",
    "rest_error",
    "invalid_params",
]

ERRORS: dict[type[A2AError], tuple[int, str]] = {
    JSONParseError: (-32700, "PARSE_ERROR"),
    InvalidRequestError: (-32600, "INVALID_REQUEST"),
    MethodNotFoundError: (-32601, "METHOD_NOT_FOUND"),
    InvalidParamsError: (-32602, "INVALID_PARAMS"),
    InternalError: (-32603, "INTERNAL_ERROR"),
    TaskNotFoundError: (-32001, "TASK_NOT_FOUND"),
    TaskNotCancelableError: (-32002, "TASK_NOT_CANCELABLE"),
    PushNotificationNotSupportedError: (-32003, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    UnsupportedOperationError: (-32004, "UNSUPPORTED_OPERATION"),
    ContentTypeNotSupportedError: (-32005, "CONTENT_TYPE_NOT_SUPPORTED"),
    InvalidAgentResponseError: (-32006, "INVALID_AGENT_RESPONSE"),
    ExtendedAgentCardNotConfiguredError: (-32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    ExtensionSupportRequiredError: (-32008, "EXTENSION_SUPPORT_REQUIRED"),
    VersionNotSupportedError: (-32009, "VERSION_NOT_SUPPORTED"),
}
"""Error class → (JSON-RPC code, ErrorInfo reason)."""


class AuthenticationRequired(A2AError):
    """No valid credentials: HTTP 401."""

    http_status = 401


class RateLimitedError(A2AError):
    """The caller is over its limits: HTTP 429."""

    http_status = 429

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BudgetExceededError(RateLimitedError):
    """The caller used its tokens of the day: HTTP 429, ``Retry-After`` the reset."""


class QuotaExceededError(A2AError):
    """The caller holds all the conversations it may (``[auth] max_sessions_per_caller``):
    a new task in a new context is refused until it deletes some."""


ERRORS[AuthenticationRequired] = (-32600, "UNAUTHENTICATED")
ERRORS[RateLimitedError] = (-32600, "RATE_LIMITED")
ERRORS[BudgetExceededError] = (-32600, "BUDGET_EXCEEDED")
ERRORS[QuotaExceededError] = (-32600, "QUOTA_EXCEEDED")

HTTP_ERRORS: dict[type[A2AError], tuple[int, str]] = {
    JSONParseError: (400, "INVALID_ARGUMENT"),
    InvalidRequestError: (400, "INVALID_ARGUMENT"),
    MethodNotFoundError: (404, "NOT_FOUND"),
    InvalidParamsError: (400, "INVALID_ARGUMENT"),
    InternalError: (500, "INTERNAL"),
    TaskNotFoundError: (404, "NOT_FOUND"),
    TaskNotCancelableError: (400, "FAILED_PRECONDITION"),
    PushNotificationNotSupportedError: (400, "FAILED_PRECONDITION"),
    UnsupportedOperationError: (400, "FAILED_PRECONDITION"),
    ContentTypeNotSupportedError: (400, "INVALID_ARGUMENT"),
    InvalidAgentResponseError: (500, "INTERNAL"),
    ExtendedAgentCardNotConfiguredError: (400, "FAILED_PRECONDITION"),
    ExtensionSupportRequiredError: (400, "FAILED_PRECONDITION"),
    VersionNotSupportedError: (400, "FAILED_PRECONDITION"),
    AuthenticationRequired: (401, "UNAUTHENTICATED"),
    RateLimitedError: (429, "RESOURCE_EXHAUSTED"),
    BudgetExceededError: (429, "RESOURCE_EXHAUSTED"),
    QuotaExceededError: (409, "RESOURCE_EXHAUSTED"),
}
"""Error class → (HTTP status, ``google.rpc.Code`` name) in the HTTP+JSON binding."""

_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def from_rpc(exc: grpc.RpcError) -> A2AError:
    """Map a failed engine call through :data:`GRPC_ERRORS`."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    error_class = GRPC_ERRORS.get(code, InternalError) if code is not None else InternalError
    # The /agentik table already words engine failures for clients (never internals).
    mapped = from_rpc_error(exc)
    message = mapped.message
    if mapped.status == 401:
        return AuthenticationRequired(message)
    if mapped.code == "payload_too_large":  # as a body over the size limit is
        return InvalidRequestError(message, data={"grpcStatus": "INVALID_ARGUMENT"})
    if mapped.code == "budget_exceeded":
        return BudgetExceededError(message, mapped.retry_after)
    if mapped.code == "quota_exceeded":
        return QuotaExceededError(message)
    if mapped.status == 429:
        return RateLimitedError(message, mapped.retry_after)
    status = code.name if code is not None else "UNKNOWN"
    return engine_refusal(error_class, message, grpcStatus=status)


def _details(error: A2AError) -> list[dict[str, Any]]:
    """An ErrorInfo with the error's reason, and a BadRequest when it names a field."""
    reason = ERRORS.get(type(error), ERRORS[InternalError])[1]
    metadata = {str(k): str(v) for k, v in (error.data or {}).items()}
    details: list[dict[str, Any]] = [
        {"@type": _ERROR_INFO, "reason": reason, "domain": DOMAIN, "metadata": metadata}
    ]
    if "field" in metadata:
        field = metadata["field"]
        violation = {"field": field, "description": error.message.removeprefix(f"{field}: ")}
        details.append({"@type": _BAD_REQUEST, "fieldViolations": [violation]})
    return details


def error_object(error: A2AError) -> dict[str, Any]:
    """The JSON-RPC ``error`` member for ``error``, with an ErrorInfo in ``data``."""
    code = ERRORS.get(type(error), ERRORS[InternalError])[0]
    return {"code": code, "message": error.message, "data": _details(error)}


def rest_error(
    error: A2AError, status: tuple[int, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """The HTTP status and ``google.rpc.Status`` body of ``error`` in the HTTP+JSON
    binding; ``status`` (HTTP status, ``google.rpc.Code`` name) overrides the table's for a
    refusal of HTTP itself (a body over the size limit is an InvalidRequest on 413)."""
    http, code = status or HTTP_ERRORS.get(type(error), HTTP_ERRORS[InternalError])
    body = {"code": http, "status": code, "message": error.message, "details": _details(error)}
    return http, {"error": body}
