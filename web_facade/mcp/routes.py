"""``/mcp``: agentik as an MCP server over streamable HTTP (docs/mcp.md).

A Flask view hands the request to :class:`web_facade.mcp.http.McpHttpApp` (a WSGI app around
the MCP SDK's ASGI server), so the facade's host guard, CORS and observability apply to it
as to every other route. The SDK is imported on the first ``/mcp`` request only.

Before the SDK sees a request, the view holds it to the facade's own edge, so MCP answers as
every other surface does (JSON errors from web_facade/errors.py):

- its credentials: the engine's ``Authenticate`` (which counts no request against the
  caller's rate) checks the ``Authorization`` header, so every MCP method, ``tools/list``
  and a ``GET`` stream included, needs a token when the engine has tokens: 401 with
  ``WWW-Authenticate`` before any stream opens. An engine that is down is a 503 that names
  no address;
- its ``GET``: 405 once authenticated. The server is stateless: a standalone stream would
  never carry a message and would only hold a thread;
- its body: read with ``AGENTIK_MAX_BODY_BYTES`` (413, or a chunked body cut at the limit),
  announced as JSON (415), parsed and checked as every body is (400), and shaped as one
  JSON-RPC 2.0 message (400) whose id is a string or an integer (``web_facade.mcp.ids``),
  in our words rather than the SDK's parser's or pydantic's.
"""

from __future__ import annotations

import io
from typing import Any

import grpc
from flask import Blueprint, Response, current_app, request

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.engine_client import current_engine, current_settings
from web_facade.errors import ApiError, error_response, from_rpc_error
from web_facade.mcp.ids import id_problem
from web_facade.request_body import parse_json, read_body

__all__ = ["AUTHENTICATE_TIMEOUT", "bp"]

bp = Blueprint("mcp", __name__)

_EXTENSION = "agentik.mcp"

AUTHENTICATE_TIMEOUT = 5.0
"""Seconds the credentials check may take before the request is refused (503)."""

_MESSAGE = (
    'the request body must be one JSON-RPC 2.0 message: an object with jsonrpc "2.0" '
    "and a method (a request or a notification), or a result or error (a response)"
)


@bp.route("/mcp", methods=["GET", "POST", "DELETE"])
def mcp() -> Any:
    _authenticate()
    if request.method == "GET":
        return _no_get_stream()
    if request.method == "POST":
        _check_body()
    app = current_app.extensions.get(_EXTENSION)
    if app is None:
        from web_facade.mcp.http import McpHttpApp

        made = McpHttpApp(current_engine(), current_settings().web.max_body_bytes)
        app = current_app.extensions.setdefault(_EXTENSION, made)
    return app  # Flask runs a returned WSGI app with this request's environ


def _no_get_stream() -> Response:
    """405 to ``GET``: the server is stateless, so no message could ever reach a standalone
    stream, which would only hold a thread (the spec's answer for "no stream here")."""
    response = error_response(
        405,
        "method_not_allowed",
        "GET is not allowed on /mcp: this server opens no standalone stream; "
        "POST each message (its answer streams in the response)",
    )
    response.headers["Allow"] = "POST, DELETE"
    return response


def _authenticate() -> None:
    """Refuse (401, 503, ...) a request whose credentials the engine does not take."""
    try:
        current_engine().engine.Authenticate(pb.AuthenticateRequest(), timeout=AUTHENTICATE_TIMEOUT)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            return  # an engine older than Authenticate: its tools' calls check instead
        raise from_rpc_error(exc) from None


def _check_body() -> None:
    """Read the body under the facade's limit and rules; hand the SDK exactly those bytes."""
    body = read_body()
    message = parse_json(body)
    if not _is_jsonrpc_message(message):
        raise ApiError(400, "invalid_argument", _MESSAGE)
    problem = id_problem(message)
    if problem is not None:  # the SDK would take it for a notification: a bare 202
        raise ApiError(400, "invalid_argument", problem)
    environ = request.environ
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ.pop("HTTP_TRANSFER_ENCODING", None)
    environ["wsgi.input_terminated"] = True


def _is_jsonrpc_message(value: object) -> bool:
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return False
    if "method" in value:
        return isinstance(value["method"], str) and isinstance(value.get("params", {}), dict)
    return "id" in value and ("result" in value or "error" in value)
