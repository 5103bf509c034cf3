"""The facade's one error table and the Flask handlers that make every error JSON.

Every error leaves the facade as ``{"error": {"code": "<snake_case>", "message": "..."}}``
with a fitting HTTP status: never an HTML page, never a stack trace. Four sources:

- :class:`ApiError`, raised by the views for a client's mistake they detect themselves
  (malformed JSON, a missing or mistyped field — the message names it);
- ``grpc.RpcError`` from an engine call, mapped through :data:`GRPC_TO_HTTP` (the
  engine's ``agentik-error`` trailer refines a status where one gRPC code covers two
  HTTP answers: ``rate_limited`` is 429 with ``Retry-After``, ``overloaded`` 503);
- werkzeug's HTTP exceptions (unknown route, wrong method, body over the limit), mapped
  through :data:`HTTP_CODES`;
- a request body that did not arrive within ``web_body_timeout`` (``BodyTimeout``, raised
  by the worker's socket reads): 408 ``request_timeout``.

Anything else is a bug in the facade: it is logged and answered 500 ``internal``.

The engine words its refusals in its own terms: a ``session``, a run's ``resume[i]`` entries.
Each surface says them in its own (:class:`Wording`): ``/agentik`` and MCP speak of a
``conversation`` and of ``decisions[i]`` (``web_facade/agentik/decisions.py`` makes the entries
of them), AG-UI of a ``thread`` and of ``resume[i].interruptId``; gRPC and A2A pass the
engine's words on.

A 401 carries ``WWW-Authenticate: Bearer realm="agentik"`` (with ``error="invalid_token"``
when the request had credentials), as RFC 6750 asks.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import grpc
from flask import Flask, Response, has_request_context, jsonify, request
from werkzeug.exceptions import HTTPException

from agentik.collector import release
from agentik.limits import GRPC_MESSAGE_LIMIT
from web_facade.request_heads import BodyTimeout

__all__ = [
    "AGENTIK_WORDS",
    "AGUI_WORDS",
    "ENGINE_WORDS",
    "GRPC_TO_HTTP",
    "HTTP_CODES",
    "MCP_WORDS",
    "ApiError",
    "Wording",
    "challenge",
    "error_body",
    "error_response",
    "from_rpc_error",
    "install_error_handlers",
    "invalid",
    "rpc_error_handler",
]

log = logging.getLogger(__name__)

GRPC_TO_HTTP: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_argument"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_argument"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "unauthenticated"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "forbidden"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "already_exists"),
    # The conversation has a turn in flight (or waits for a person: see REFINED).
    grpc.StatusCode.FAILED_PRECONDITION: (409, "busy"),
    grpc.StatusCode.ABORTED: (409, "conflict"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "not_implemented"),
    grpc.StatusCode.INTERNAL: (502, "engine_error"),
    grpc.StatusCode.UNKNOWN: (502, "engine_error"),
    grpc.StatusCode.DATA_LOSS: (502, "engine_error"),
    # The engine is at its limit of concurrent turns: the server's state, not the client's.
    grpc.StatusCode.RESOURCE_EXHAUSTED: (503, "overloaded"),
    grpc.StatusCode.UNAVAILABLE: (503, "engine_unavailable"),
    grpc.StatusCode.CANCELLED: (503, "engine_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "engine_timeout"),
}
"""gRPC status of an engine call → (HTTP status, error code)."""

REFINED: dict[tuple[grpc.StatusCode, str], tuple[int, str]] = {
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate_limited"): (429, "rate_limited"),
    # The caller used its tokens of the day ([auth] tokens_per_day); Retry-After: the reset.
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "budget_exceeded"): (429, "budget_exceeded"),
    # The caller holds all the conversations it may ([auth] max_sessions_per_caller): it
    # must delete some, waiting does not help (so no Retry-After).
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "quota_exceeded"): (409, "quota_exceeded"),
    # A request larger than the engine takes in one message (AGENTIK_MAX_MESSAGE_BYTES).
    (grpc.StatusCode.INVALID_ARGUMENT, "payload_too_large"): (413, "payload_too_large"),
    # The conversation waits for a person's answer: resume it (see docs/agentik-api.md).
    (grpc.StatusCode.FAILED_PRECONDITION, "input_required"): (409, "input_required"),
    # A new message alone is larger than the model's context budget (docs/conversations.md).
    (grpc.StatusCode.INVALID_ARGUMENT, "context_too_long"): (400, "context_too_long"),
    # A request names an agent the server does not serve (docs/agents.md).
    (grpc.StatusCode.INVALID_ARGUMENT, "agent_not_found"): (404, "agent_not_found"),
}
"""(gRPC status, the engine's ``agentik-error`` trailer) → (HTTP status, error code), where
it differs from :data:`GRPC_TO_HTTP`."""

REALM = "agentik"

HTTP_CODES: dict[int, str] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    411: "length_required",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    431: "headers_too_large",
}
"""HTTP status of a werkzeug exception → error code (others: ``http_<status>``)."""

_TOO_LARGE = "message larger than max"
"""In gRPC's own details of a message over its size limit."""
_SENT_TOO_LARGE = "sent message larger than max"
"""gRPC's client-side refusal of a request over the channel's send limit."""
_SIZES = re.compile(r"\((\d+) vs\. (\d+)\)")
_UNREACHABLE_DETAILS = ("failed to connect", "connection refused", "dns resolution failed")

_INTERNALS = re.compile(
    r"[A-Za-z][\w+.-]*://"  # a URL
    r"|\b(?:ipv4|ipv6|unix|dns):"  # a gRPC address
    r"|\b\d{1,3}(?:\.\d{1,3}){3}\b"  # an IPv4 address
    r"|\[[0-9a-fA-F:]*:[0-9a-fA-F:]*\]"  # a bracketed IPv6 address
    r"|\b[\w.-]+:\d{2,5}\b"  # host:port
    r"|<class '|\bTraceback\b|\b[A-Z]\w*(?:Error|Exception)\b"  # Python exceptions
    r"|(?<![\w/])/(?:[\w.-]+/)+[\w.-]*"  # an absolute file path
)
"""What must not reach a client: internal URLs, addresses, hosts and exception classes."""

_WITHOUT_DETAILS: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.UNAVAILABLE: "the engine is unavailable",
    grpc.StatusCode.CANCELLED: "the engine call was cancelled",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the engine did not answer in time",
}


_QUOTED = re.compile(r"""(?<!\w)('[^']*'|"[^"]*")""")
"""A quoted value in an engine message (an id, a key, a name: Python's ``repr``), which a
surface's words never change; an apostrophe after a letter (``the session's``) opens none."""


@dataclass(frozen=True, slots=True)
class Wording:
    """How one surface says what the engine's messages name in the engine's terms: regular
    expressions and their replacements, applied in order — ``messages`` to the whole message
    (refusals a surface says its own way), then ``words`` outside quoted values."""

    words: tuple[tuple[str, str], ...] = ()
    messages: tuple[tuple[str, str], ...] = ()

    def say(self, message: str) -> str:
        for pattern, replacement in self.messages:
            message = re.sub(pattern, replacement, message)
        if not self.words:
            return message
        parts = _QUOTED.split(message)  # the odd ones are quoted
        for index in range(0, len(parts), 2):
            for pattern, replacement in self.words:
                parts[index] = re.sub(pattern, replacement, parts[index])
        return "".join(parts)


def _session_is(word: str) -> tuple[tuple[str, str], ...]:
    """``session 'x' not found`` → ``<word> 'x' not found`` (``session_id`` stays)."""
    return ((r"\bsessions\b", f"{word}s"), (r"\bsession\b", word))


# The refusals of a decision that the facade's checks leave to the engine: the entries are
# made from the decisions (web_facade/agentik/decisions.py), so their payload's keys are the
# decision's own (approved: approve).
_DECISION_REFUSALS: tuple[tuple[str, str], ...] = (
    (
        r"^resume\[(\d+)\]\.payload: the answer to a question is .*",
        r"decisions[\1] approves a question: give answer, or approve: false to decline it",
    ),
    (
        r"^resume\[(\d+)\]\.payload has an unknown key 'answer'.*",
        r"decisions[\1] answers an approval: give approve (true or false), not answer",
    ),
)
_DECISIONS: tuple[tuple[str, str], ...] = (
    (r"\bresume\[(\d+)\]\.payload\.approved\b", r"decisions[\1].approve"),
    (r"\bresume\[(\d+)\]\.payload\b", r"decisions[\1]"),
    (r"\bresume\[(\d+)\]", r"decisions[\1]"),
    (r"\bresume must answer\b", "decisions must answer"),
)

ENGINE_WORDS = Wording()
"""gRPC's and A2A's: the engine's own."""
_RESUME_POINT = ((r"\bafter_seq (\d+)", r"the resume point \1 (after, or Last-Event-ID)"),)
"""A subscription's ``after_seq`` as ``/agentik`` takes it: ``?after=`` or ``Last-Event-ID``."""
AGENTIK_WORDS = Wording(
    (*_session_is("conversation"), *_DECISIONS, *_RESUME_POINT), _DECISION_REFUSALS
)
"""``/agentik``'s: conversations, the ``decisions`` of ``POST .../resume``, and the resume
point of ``GET .../events``."""
MCP_WORDS = Wording(
    (
        *_session_is("conversation"),
        *_DECISIONS,
        (r"\bwith resume entries\b", "with the answer tool"),
    ),
    _DECISION_REFUSALS,
)
"""MCP's tools: ``conversation_id``, and the ``decisions`` of the ``answer`` tool."""
AGUI_WORDS = Wording(
    (*_session_is("thread"), (r"\b(resume\[\d+\])\.interrupt_id\b", r"\1.interruptId"))
)
"""AG-UI's: ``threadId``, and ``resume[i].interruptId`` (camelCase, as on the wire)."""


class ApiError(Exception):
    """An error the facade answers itself: HTTP status, code and a message for humans."""

    def __init__(self, status: int, code: str, message: str, *, retry_after: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """Seconds for ``Retry-After`` (429); 0: the default for the status."""


def invalid(message: str) -> NoReturn:
    """Refuse the request with 400 ``invalid_argument``; ``message`` names the field."""
    raise ApiError(400, "invalid_argument", message)


def error_body(code: str, message: str) -> dict[str, Any]:
    """The JSON body of every error."""
    return {"error": {"code": code, "message": message}}


def challenge() -> str:
    """The ``WWW-Authenticate`` value of a 401 to the request being handled."""
    if has_request_context() and request.headers.get("Authorization"):
        return f'Bearer realm="{REALM}", error="invalid_token"'
    return f'Bearer realm="{REALM}"'


def error_response(status: int, code: str, message: str, retry_after: int = 0) -> Response:
    """A JSON error response; 503s and 429s tell clients when to try again, 401s how to
    authenticate."""
    response = jsonify(error_body(code, message))
    response.status_code = status
    if status in (429, 503):
        response.headers["Retry-After"] = str(retry_after or 1)
    elif status == 401:
        response.headers["WWW-Authenticate"] = challenge()
    return response


def _trailer(exc: grpc.RpcError, key: str) -> str:
    trailing = getattr(exc, "trailing_metadata", None)
    try:
        for name, value in (trailing() if callable(trailing) else None) or ():
            if name == key and isinstance(value, str):
                return value
    except Exception:  # a call that never started has no trailers
        return ""
    return ""


def _request_too_large(details: str) -> bool:
    """gRPC's refusal of our request for its size: by our channel ("Sent message ...", not
    "SERVER: Sent ...", the engine failing to send its answer), or
    by the engine, whose receive limit (the number after "vs.") is not our channel's
    receive limit (the engine's answers are bounded under that)."""
    lowered = details.lower()
    if _SENT_TOO_LARGE in lowered:
        return not lowered.startswith("server:")  # the engine's own answer, too large
    sizes = _SIZES.search(details)
    return _TOO_LARGE in lowered and sizes is not None and int(sizes[2]) != GRPC_MESSAGE_LIMIT


def from_rpc_error(exc: grpc.RpcError, words: Wording = ENGINE_WORDS) -> ApiError:
    """Map a failed engine call through :data:`GRPC_TO_HTTP`; details that name internals
    (a URL, an address, a host, an exception class, a file path) stay in the log. The
    engine's message is said in ``words``, the surface's own terms."""
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    status, name = GRPC_TO_HTTP.get(code, (502, "engine_error")) if code else (502, "engine_error")
    retry_after = 0
    if code is not None:
        status, name = REFINED.get((code, _trailer(exc, "agentik-error")), (status, name))
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        seconds = _trailer(exc, "retry-after")
        retry_after = int(seconds) if seconds.isdigit() and len(seconds) < 7 else 0
    details = exc.details() if callable(getattr(exc, "details", None)) else None
    message = str(details or (code.name.lower() if code else "engine call failed"))
    if code is grpc.StatusCode.UNAVAILABLE and any(
        marker in message.lower() for marker in _UNREACHABLE_DETAILS
    ):
        message = "the engine is unreachable"
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED and _request_too_large(message):
        # The request, refused by our own channel before it left: larger than the engine
        # takes (the channel's send limit is the engine's receive limit).
        status, name = 413, "payload_too_large"
        sizes = _SIZES.search(message)
        shown = f" ({sizes[1]} bytes; at most {sizes[2]})" if sizes else ""
        message = (
            f"the request is larger than the engine takes in one message{shown}:"
            " AGENTIK_MAX_MESSAGE_BYTES, or twice AGENTIK_MAX_BODY_BYTES when that is larger"
        )
    elif code is grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE in message:
        # gRPC's own refusal of a message over its size limit (the engine bounds what it
        # sends under it: an older engine, or a misconfigured channel), not the engine's.
        log.error("engine call failed: %s %s", code, details)
        status, name = 502, "engine_error"
        message = "the engine's answer was larger than one gRPC message may be (4 MiB)"
    elif status >= 500 and name == "engine_error":
        log.error("engine call failed: %s %s", code, details)
        message = "the engine failed to answer"
    elif _INTERNALS.search(message):
        log.warning("engine details kept from the client: %s %s", code, details)
        if code is None:
            message = "the engine failed to answer"
        else:
            fallback = f"the engine refused the request: {code.name.lower().replace('_', ' ')}"
            message = _WITHOUT_DETAILS.get(code, fallback)
    return ApiError(status, name, words.say(message), retry_after=retry_after)


def _discarded() -> bool:
    """Whether the rest of a body refused as too large was read and dropped (see
    ``request_body.discard_body``); imported here, as that module imports this one."""
    from web_facade.request_body import discard_body

    return discard_body()


_E = TypeVar("_E", bound=BaseException)


def _releasing(handler: Callable[[_E], Response]) -> Callable[[_E], Response]:
    """``handler``, after which the error lets go of its traceback (``collector.release``):
    errors of gRPC's interceptors and of routing sit in cycles with their frames, which
    hold the request's body, until the collector runs."""

    @functools.wraps(handler)
    def answer(exc: _E) -> Response:
        try:
            return handler(exc)
        finally:
            release(exc)

    return answer


def rpc_error_handler(words: Wording) -> Callable[[grpc.RpcError], Response]:
    """A blueprint's handler of failed engine calls: the app's, said in ``words``."""

    @_releasing
    def answer(exc: grpc.RpcError) -> Response:
        mapped = from_rpc_error(exc, words)
        return error_response(mapped.status, mapped.code, mapped.message, mapped.retry_after)

    return answer


def install_error_handlers(app: Flask) -> None:
    """Make every error of ``app`` a JSON error body."""

    @app.errorhandler(ApiError)
    @_releasing
    def _api_error(exc: ApiError) -> Response:
        return error_response(exc.status, exc.code, exc.message, exc.retry_after)

    # A blueprint whose surface has words of its own registers its own (rpc_error_handler).
    app.register_error_handler(grpc.RpcError, rpc_error_handler(ENGINE_WORDS))

    @app.errorhandler(BodyTimeout)
    @_releasing
    def _body_timeout(exc: BodyTimeout) -> Response:
        response = error_response(408, "request_timeout", str(exc))
        response.headers["Connection"] = "close"
        return response

    @app.errorhandler(HTTPException)
    @_releasing
    def _http_error(exc: HTTPException) -> Response:
        if isinstance(exc.__context__, BodyTimeout):  # werkzeug: "the client disconnected"
            return _body_timeout(exc.__context__)
        status = exc.code or 500
        code = HTTP_CODES.get(status, f"http_{status}")
        message = exc.description or exc.name
        allowed = getattr(exc, "valid_methods", None) or []
        if status == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif status == 405:
            message = f"{request.method} is not allowed on {request.path}; use {', '.join(allowed)}"
        elif status == 413:
            limit = app.config.get("MAX_CONTENT_LENGTH")
            message = f"the request body is larger than {limit} bytes"
        response = error_response(status, code, message)
        if status == 413 and not _discarded():
            response.headers["Connection"] = "close"
        if status == 405 and allowed:
            response.headers["Allow"] = ", ".join(allowed)
        return response

    @app.errorhandler(Exception)
    @_releasing
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error in the web facade")
        return error_response(500, "internal", "internal error in the web facade")
