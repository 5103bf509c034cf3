"""What every engine call carries from the request being handled: its ``Authorization``
header as the ``authorization`` metadata (the facade checks no credentials itself, the engine
does), and the current span's W3C ``traceparent`` while tracing is on (``agentik.tracing``).

:class:`ForwardCredentials` adds both to each call of the sync channels, in the request's
thread; a call made later on another thread (a relay reopening a stream, the asyncio loop)
takes :func:`forwarded_metadata` while the request is handled and passes it itself. A header
gRPC cannot carry (not printable ASCII, or longer than 8 KiB) goes as an empty bearer, which
the engine refuses like any malformed one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

import grpc
from flask import has_request_context, request

from agentik import tracing
from agentik.collector import release

__all__ = ["ForwardCredentials", "forwardable", "forwarded_authorization", "forwarded_metadata"]


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


def forwarded_authorization() -> str | None:
    """The ``authorization`` metadata value for the request being handled, or None.

    A relay thread has no request context: a stream that may reopen its engine call
    takes this value when it opens and passes it as metadata itself.
    """
    if not has_request_context():
        return None
    value = request.headers.get("Authorization")
    return None if value is None else forwardable(value)


def forwardable(value: str) -> str:
    """``value`` if gRPC metadata can carry it (printable ASCII), else an empty bearer."""
    if len(value) <= 8192 and value.isascii() and value.isprintable():
        return value
    return "Bearer"


def forwarded_metadata() -> tuple[tuple[str, str], ...] | None:
    """The metadata :class:`ForwardCredentials` would add now (authorization, trace
    context), for a call made later on a thread without the request (a relay's reopening)."""
    authorization = forwarded_authorization()
    metadata = [] if authorization is None else [("authorization", authorization)]
    if tracing.enabled():
        metadata += tracing.trace_metadata()
    return tuple(metadata) or None


class ForwardCredentials(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """Adds the current request's ``Authorization`` header to each engine call, and the
    current span's trace context while tracing is on."""

    @staticmethod
    def _details(details: Any) -> Any:
        value = forwarded_authorization()
        traced = tracing.enabled()
        if value is None and not traced:
            return details
        metadata = list(details.metadata or ())
        if value is not None:
            metadata.append(("authorization", value))
        if traced and not any(key == "traceparent" for key, _ in metadata):
            metadata += tracing.trace_metadata()
        return _CallDetails(
            details.method,
            details.timeout,
            metadata,
            details.credentials,
            details.wait_for_ready,
            details.compression,
        )

    def intercept_unary_unary(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        outcome = continuation(self._details(details), request)
        if isinstance(outcome, grpc.RpcError):
            return _Refused(outcome)
        return outcome

    def intercept_unary_stream(
        self, continuation: Callable[[Any, Any], Any], details: Any, request: Any
    ) -> Any:
        return continuation(self._details(details), request)


class _Refused:
    """A refused unary call as the interceptor hands it back to gRPC, which raises it from
    ``result()``. gRPC raises the error itself from a frame that holds it (its ``call``):
    a cycle of the error, its traceback and every frame up to where it is caught, the
    route's with the request's body among them, until the collector runs (85 MiB more in a
    web worker after 240 refused 900 KB requests). This raises it once and lets go of it."""

    __slots__ = ("_error",)

    def __init__(self, error: grpc.RpcError) -> None:
        release(error)  # the frames it was raised through first (they have ended)
        self._error: grpc.RpcError | None = error

    def result(self, timeout: float | None = None) -> NoReturn:
        if self._error is None:
            raise RuntimeError("a refused call's error is raised once")
        try:
            raise self._error  # no local of this frame holds it
        finally:
            self._error = None

    def __getattr__(self, name: str) -> Any:  # code(), details(), ... before result()
        return getattr(self._error, name)
