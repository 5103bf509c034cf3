"""The A2A gRPC binding's one error table (A2A 1.0 §10).

An A2A error ends the call with the gRPC status the spec gives it (the SDK's
``A2A_ERROR_MAPPING``: TaskNotFound → NOT_FOUND, InvalidParams → INVALID_ARGUMENT,
UnsupportedOperation → FAILED_PRECONDITION, ...) and a ``google.rpc.Status`` in the
``grpc-status-details-bin`` trailer holding an ``ErrorInfo`` (domain
``a2a-protocol.org``, the error's reason) and, when a field is named, a ``BadRequest``
naming it: what the SDK's client reads back into the same error class.

A refusal of the engine's with an A2A meaning (:data:`agentik.a2a.errors.GRPC_ERRORS`) is
that A2A error; one without (no credentials, a caller over its rate or budget, the engine
shutting down or its store failing) keeps the engine's own status, message and
``agentik-error`` / ``retry-after`` trailers, as ``AgentEngine`` answers it.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc
from a2a.utils.errors import A2A_ERROR_MAPPING, A2AError, InternalError
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2  # type: ignore[import-untyped]

from agentik.a2a.errors import DOMAIN, GRPC_ERRORS, engine_refusal
from engine_service.core.errors import AgentikError
from engine_service.errors import abort, status_for

__all__ = ["DETAILS_KEY", "a2a_error", "abort_a2a", "status_of"]

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]

DETAILS_KEY = "grpc-status-details-bin"
"""The trailer gRPC's rich error model carries a ``google.rpc.Status`` in."""


def a2a_error(exc: AgentikError) -> A2AError | AgentikError:
    """The engine's refusal as the A2A error it is; itself when it is none."""
    error_class = GRPC_ERRORS.get(status_for(exc))
    return exc if error_class is None else engine_refusal(error_class, exc.message)


def status_of(error: A2AError) -> tuple[grpc.StatusCode, status_pb2.Status]:
    """The gRPC status of an A2A error and its rich form: ErrorInfo, and BadRequest when
    the error names a field."""
    mapping = A2A_ERROR_MAPPING.get(type(error), A2A_ERROR_MAPPING[InternalError])
    code = grpc.StatusCode[mapping.grpc_status]
    data = error.data or {}
    metadata = {str(k): str(v) for k, v in data.items()}
    status = status_pb2.Status(code=code.value[0], message=error.message)
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=mapping.reason, domain=DOMAIN, metadata=metadata))
    status.details.append(info)
    field = metadata.get("field")
    if field:
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=field, description=error.message.removeprefix(f"{field}: ")
        )
        bad_request = any_pb2.Any()
        bad_request.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
        status.details.append(bad_request)
    return code, status


async def abort_a2a(context: Context, error: A2AError) -> None:
    """End the call with the A2A error: its status, message and rich details."""
    code, status = status_of(error)
    context.set_trailing_metadata(((DETAILS_KEY, status.SerializeToString()),))
    await abort(context, code, error.message)
