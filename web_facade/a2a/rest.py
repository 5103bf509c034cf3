"""The A2A HTTP+JSON binding (spec §11): REST paths onto the same methods as JSON-RPC.

Each path is one of the JSON-RPC methods of :data:`web_facade.a2a.routes.METHODS`, its
params gathered from the path, the query (``GET``, ``DELETE``) and the JSON body
(``POST``): the same tasks, owner isolation, limits, history and human-in-the-loop. The
default agent's paths are under ``/a2a``, each agent's under ``/a2a/{agent}``::

    POST   /message:send                                   SendMessage
    POST   /message:stream                                 SendStreamingMessage (SSE)
    GET    /tasks                                          ListTasks
    GET    /tasks/{id}                                     GetTask
    POST   /tasks/{id}:cancel                              CancelTask
    POST   /tasks/{id}:subscribe  (GET too)                SubscribeToTask (SSE)
    POST   /tasks/{id}/pushNotificationConfigs             CreateTaskPushNotificationConfig
    GET    /tasks/{id}/pushNotificationConfigs             ListTaskPushNotificationConfigs
    GET    /tasks/{id}/pushNotificationConfigs/{configId}  GetTaskPushNotificationConfig
    DELETE /tasks/{id}/pushNotificationConfigs/{configId}  DeleteTaskPushNotificationConfig
    GET    /extendedAgentCard                              GetExtendedAgentCard

The binding speaks A2A 1.0 only: a request without ``A2A-Version: 1.0`` is refused with
VersionNotSupported. Answers are ``application/a2a+json``; errors are a ``google.rpc.Status``
on the HTTP status of the spec's table (``web_facade.a2a.errors.rest_error``), but for two
refusals of HTTP itself: a body over the size limit (413) and a body not sent as JSON (415).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from a2a.types import (
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    StreamResponse,
    Task,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    VersionNotSupportedError,
)
from flask import Blueprint, Response, request
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message as ProtoMessage
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, UnsupportedMediaType

from web_facade.a2a.errors import (
    AuthenticationRequired,
    RateLimitedError,
    invalid_params,
    rest_error,
)
from web_facade.a2a.jsonrpc import encode, unexpected
from web_facade.a2a.routes import METHODS, VERSION_HEADER, dialect_of, extended_card_response
from web_facade.a2a.stream import RestStream, stream_json
from web_facade.a2a.tasks import TaskService
from web_facade.agents import check_agent
from web_facade.engine_client import current_engine, current_settings
from web_facade.errors import ApiError, challenge
from web_facade.request_body import (
    UnacceptableJson,
    check_json,
    discard_body,
    parse_failure,
    read_body,
)
from web_facade.stream import sse_response

__all__ = ["MEDIA_TYPE", "bp"]

bp = Blueprint("a2a_rest", __name__)

MEDIA_TYPE: Final = "application/a2a+json"
"""The binding's media type (spec §11.1); requests may also say ``application/json``."""

_PREFIXES: Final = ("/a2a", "/a2a/<agent>")
_VERBS: Final = ("cancel", "subscribe")
"""The custom methods of ``/tasks/{id}:{verb}``."""

Params = dict[str, Any]


# -- the request ------------------------------------------------------------------


def _body() -> Params:
    """The JSON object of the body ({} when empty), checked as JSON-RPC params are."""
    raw = read_body()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise JSONParseError(parse_failure(exc)) from None
    try:
        check_json(body)
    except UnacceptableJson as exc:
        raise invalid_params(exc.field() or "body", exc.problem) from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object")
    return body


def _query(message: ProtoMessage, *, path: tuple[str, ...] = ()) -> Params:
    """The query parameters that are fields of ``message`` (ProtoJSON names, spec §11.5),
    as ProtoJSON params; the fields in ``path`` come from the path and are skipped."""
    fields = {f.json_name: f for f in message.DESCRIPTOR.fields}
    out: Params = {}
    for key in request.args:
        field = fields.get(key)
        if field is None or key in path or key == "tenant":
            continue
        values = request.args.getlist(key)
        if field.is_repeated:
            out[key] = [v for value in values for v in value.split(",") if v]
        elif field.type == FieldDescriptor.TYPE_BOOL:
            if values[-1] not in ("true", "false"):
                raise invalid_params(key, f"must be true or false, not {values[-1][:40]!r}")
            out[key] = values[-1] == "true"
        else:
            out[key] = values[-1]
    return out


def _with(params: Params, **from_path: str) -> Params:
    """``params`` with the ids of the path; a body that names another one is refused."""
    for key, value in from_path.items():
        given = params.get(key)
        if given not in (None, "", value):
            raise invalid_params(key, f"{str(given)[:40]!r} differs from the path's {value!r}")
        params[key] = value
    return params


def _check_agent(agent: str) -> None:
    """A path that names no agent served here names no method: 404 METHOD_NOT_FOUND."""
    try:
        check_agent(current_settings(), agent)
    except ApiError as exc:
        raise MethodNotFoundError(exc.message) from None


def _check_version() -> None:
    if dialect_of(request.headers.get(VERSION_HEADER)) != "1.0":
        raise VersionNotSupportedError(
            f"the HTTP+JSON binding speaks A2A 1.0: send the header {VERSION_HEADER}: 1.0",
            data={"supportedVersions": "1.0"},
        )


# -- the answer -------------------------------------------------------------------


def _json(body: Params, status: int = 200) -> Response:
    return Response(encode(body), status, mimetype=MEDIA_TYPE)


def _refusal(exc: A2AError, status: tuple[int, str] | None = None) -> Response:
    http, body = rest_error(exc, status)
    response = _json(body, http)
    if isinstance(exc, RateLimitedError):
        response.headers["Retry-After"] = str(exc.retry_after or 1)
    elif isinstance(exc, AuthenticationRequired):
        response.headers["WWW-Authenticate"] = challenge()
    return response


def _serve(
    agent: str,
    method: str,
    params: Callable[[], Params],
    answer: Callable[[], Response] | None = None,
) -> Response:
    """Call ``method`` of the JSON-RPC table with ``params()``, or ``answer()`` when the
    binding answers in its own way (a card with its cache headers); every error leaves here."""
    try:
        if agent:
            _check_agent(agent)
        _check_version()
        if answer is not None:
            return answer()
        handler = METHODS[method][1]
        result = handler(TaskService(current_engine().engine, agent), params())
    except RequestEntityTooLarge:
        discard_body()  # so a client that sent it all reads the answer
        limit = request.max_content_length
        too_large = InvalidRequestError(f"the request body is larger than {limit} bytes")
        return _refusal(too_large, (413, "INVALID_ARGUMENT"))
    except UnsupportedMediaType as exc:
        refused = ContentTypeNotSupportedError(exc.description or "the request body must be JSON")
        return _refusal(refused, (415, "INVALID_ARGUMENT"))
    except BadRequest as exc:  # a broken chunked encoding
        return _refusal(InvalidRequestError(exc.description or "the request body is malformed"))
    except A2AError as exc:
        return _refusal(exc)
    except Exception as exc:
        return _refusal(unexpected(exc))
    if isinstance(result, dict):
        return _json(result)
    if isinstance(result.follow, Task):
        # Nothing happens to a task that waits for input until the peer answers.
        snapshot = stream_json(StreamResponse(task=result.follow))
        return sse_response(iter([RestStream.frame(snapshot)]))
    return RestStream(result.follow, current_settings().web.heartbeat_interval).response()


def _route(rule: str, methods: list[str]) -> Callable[[Callable[..., Response]], Any]:
    """Register a view at ``rule`` under the default agent's prefix and each agent's."""

    def register(view: Callable[..., Response]) -> Any:
        for prefix in _PREFIXES:
            bp.add_url_rule(prefix + rule, view_func=view, methods=methods)
        return view

    return register


# -- the paths --------------------------------------------------------------------


@_route("/message:send", ["POST"])
def send_message(agent: str = "") -> Response:
    return _serve(agent, "SendMessage", _body)


@_route("/message:stream", ["POST"])
def send_streaming_message(agent: str = "") -> Response:
    return _serve(agent, "SendStreamingMessage", _body)


@_route("/tasks", ["GET"])
def list_tasks(agent: str = "") -> Response:
    return _serve(agent, "ListTasks", lambda: _query(ListTasksRequest()))


@_route("/tasks/<task>", ["GET", "POST"])
def task_path(task: str, agent: str = "") -> Response:
    """``GET /tasks/{id}``, and the custom methods ``/tasks/{id}:cancel`` and
    ``/tasks/{id}:subscribe`` (a task id may hold a colon: only a known verb is one)."""
    task_id, _, verb = task.rpartition(":")
    if verb not in _VERBS:
        task_id, verb = task, ""
    if verb == "cancel" and request.method == "POST":
        return _serve(agent, "CancelTask", lambda: _with(_body(), id=task_id))
    if verb == "subscribe":
        return _serve(agent, "SubscribeToTask", lambda: {"id": task_id})
    if not verb and request.method == "GET":
        return _serve(
            agent, "GetTask", lambda: _with(_query(GetTaskRequest(), path=("id",)), id=task_id)
        )
    allowed = "POST" if verb else "GET"
    refused = MethodNotFoundError(f"{request.method} {request.path} is not a method: use {allowed}")
    response = _refusal(refused, (405, "UNIMPLEMENTED"))
    response.headers["Allow"] = allowed
    return response


@_route("/tasks/<task>/pushNotificationConfigs", ["POST"])
def create_push_config(task: str, agent: str = "") -> Response:
    return _serve(agent, "CreateTaskPushNotificationConfig", lambda: _with(_body(), taskId=task))


@_route("/tasks/<task>/pushNotificationConfigs", ["GET"])
def list_push_configs(task: str, agent: str = "") -> Response:
    query = ListTaskPushNotificationConfigsRequest()
    return _serve(
        agent,
        "ListTaskPushNotificationConfigs",
        lambda: _with(_query(query, path=("taskId",)), taskId=task),
    )


@_route("/tasks/<task>/pushNotificationConfigs/<config>", ["GET"])
def get_push_config(task: str, config: str, agent: str = "") -> Response:
    return _serve(agent, "GetTaskPushNotificationConfig", lambda: {"taskId": task, "id": config})


@_route("/tasks/<task>/pushNotificationConfigs/<config>", ["DELETE"])
def delete_push_config(task: str, config: str, agent: str = "") -> Response:
    return _serve(agent, "DeleteTaskPushNotificationConfig", lambda: {"taskId": task, "id": config})


@_route("/extendedAgentCard", ["GET"])
def extended_agent_card(agent: str = "") -> Response:
    # The card as JSON-RPC's GetExtendedAgentCard gives it, with its ETag, Cache-Control
    # (private, varies by Authorization) and 304 on If-None-Match.
    return _serve(agent, "GetExtendedAgentCard", dict, lambda: extended_card_response(agent))
