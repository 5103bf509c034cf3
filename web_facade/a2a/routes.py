"""The A2A facade: the agent card, and JSON-RPC 2.0 at ``POST /``.

A2A 1.0 (``A2A-Version: 1.0``): SendMessage, SendStreamingMessage, GetTask, ListTasks,
CancelTask, SubscribeToTask and the push notification config methods (``push``). A2A 0.3
(no ``A2A-Version`` header, or ``0.3``):
message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe. Each method is
a small function over :class:`web_facade.a2a.tasks.TaskService`; every error, wherever it
comes from, leaves through ``web_facade.a2a.errors`` as a JSON-RPC error with HTTP 200 —
a body not sent as ``application/json`` too: ContentTypeNotSupported (-32005).
Streams are SSE whose every ``data:`` is a whole JSON-RPC response.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from a2a.types import (
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    SendMessageRequest,
    SendMessageResponse,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    VersionNotSupportedError,
)
from flask import Blueprint, Flask, Response, current_app, request
from flask.blueprints import BlueprintSetupState
from google.protobuf import json_format
from google.protobuf.message import Message as ProtoMessage
from werkzeug.exceptions import BadRequest, RequestEntityTooLarge, UnsupportedMediaType

from agentik.a2a.card import (
    CARD_MAX_AGE,
    JWKS_PATH,
    CardConfig,
    CardShape,
    card_body,
    card_shape,
    check_cards,
    endpoint_config,
    extended_card_body,
)
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.a2a.errors import (
    AuthenticationRequired,
    RateLimitedError,
    from_rpc,
    invalid_params,
)
from web_facade.a2a.jsonrpc import RequestId, encode, error, reply, unexpected
from web_facade.a2a.params import parse_params
from web_facade.a2a.push import PushConfigService
from web_facade.a2a.stream import A2aStream, Shape, stream_json
from web_facade.a2a.tasks import TaskFollow, TaskService
from web_facade.agents import check_agent
from web_facade.engine_client import UNARY_TIMEOUT, current_engine, current_settings
from web_facade.errors import ApiError, challenge
from web_facade.proto_json import whole_numbers
from web_facade.request_body import (
    UnacceptableJson,
    check_json,
    discard_body,
    parse_failure,
    read_body,
    scalar_problem,
)
from web_facade.stream import sse_response

__all__ = [
    "METHODS",
    "VERSION_HEADER",
    "Card",
    "Result",
    "bp",
    "dialect_of",
    "extended_card",
    "extended_card_response",
]

log = logging.getLogger(__name__)

bp = Blueprint("a2a", __name__)

VERSION_HEADER: Final = "A2A-Version"
_CARD_KEY: Final = "agentik.a2a.card"
_VERSION = re.compile(r"^(\d{1,4})(?:\.(\d{1,4}))?(?:\.\d{1,4})?$")


@dataclass(frozen=True, slots=True)
class _Stream:
    """A streamed result: the live task (or a task that waits for input: only itself) and
    how to shape each of its stream responses."""

    follow: TaskFollow | Task
    shape: Shape


@dataclass(frozen=True, slots=True)
class Card:
    """A card: its JSON, its ETag, and the settings its caching follows."""

    body: bytes
    etag: str
    config: CardConfig


class _CardResult(dict[str, Any]):
    """A card as a method's result: the card's JSON object (any binding can send it as
    it sends other results) that also carries ``card``, so the JSON-RPC answer gets the
    card's ``ETag`` and ``Cache-Control`` as the card's own GET answers do."""

    card: Card


Result = dict[str, Any] | _Stream
Handler = Callable[[TaskService, dict[str, Any]], Result]


# -- the agent card ----------------------------------------------------------------


@bp.record_once
def _read_card_config(state: BlueprintSetupState) -> None:
    """Read the card's settings when the app is made: a bad one (any agent's) stops
    start-up."""
    app = state.app
    assert isinstance(app, Flask)
    with app.app_context():
        config = check_cards(current_settings())
    # On loopback without a public URL the card names the URL each request came to: the
    # usual local setup, so nothing is said (it was once per worker at every start).
    if not config.public_url and not config.reflect_host:
        log.warning(
            "AGENTIK_PUBLIC_URL is not set and the facade listens beyond loopback: the agent "
            "card is not served until it is set to the URL peers reach this facade at"
        )
    app.extensions[_CARD_KEY] = config


_LEGACY_CARD_PATH: Final = "/.well-known/agent.json"


@bp.get("/.well-known/agent-card.json")
@bp.get(_LEGACY_CARD_PATH)
def agent_card() -> Response:
    """The agent card: strict A2A 1.0 unless the request asks for 0.3 (see
    :func:`card_shape`); revalidate with ``If-None-Match`` or ``If-Modified-Since``.
    It is the default agent's; each agent has its own under ``/a2a/{agent}/``."""
    config, request_url = _agent_card_config("")
    return _card_response(config, request_url, legacy=request.path == _LEGACY_CARD_PATH)


@bp.get("/a2a/<agent>/.well-known/agent-card.json")
@bp.get(f"/a2a/<agent>{_LEGACY_CARD_PATH}")
def own_agent_card(agent: str) -> Response:
    """The card of one agent: its name, description and skills, and its own endpoint
    ``/a2a/{agent}/`` (docs/agents.md)."""
    check_agent(current_settings(), agent)
    config, request_url = _agent_card_config(agent)
    return _card_response(config, request_url, legacy=request.path.endswith(_LEGACY_CARD_PATH))


def _agent_card_config(agent: str) -> tuple[CardConfig, str]:
    """The card settings of ``agent`` ("": the root card, the default agent's) and the URL
    its card names when no public URL is set; 503 when the card cannot be served."""
    root: CardConfig = current_app.extensions[_CARD_KEY]
    config = endpoint_config(current_settings(), root, agent)
    request_url = request.url_root + (f"a2a/{agent}/" if agent else "")
    if not config.public_url and not config.reflect_host:
        raise ApiError(
            503,
            "not_configured",
            "this agent's public URL is not configured: set AGENTIK_PUBLIC_URL (or [a2a] "
            "public_url) to the URL peers reach it at",
        )
    return config, request_url


def _asked_shape(*, legacy: bool) -> CardShape:
    asked = request.args.get(VERSION_HEADER) or request.headers.get(VERSION_HEADER)
    return card_shape(asked, legacy_path=legacy)


def _card_response(config: CardConfig, request_url: str, *, legacy: bool) -> Response:
    body, etag = card_body(config, request_url, _asked_shape(legacy=legacy))
    response = Response(body, mimetype="application/json")
    _cache_headers(response, config, etag)
    response.last_modified = config.modified
    # 304 without a body when the ETag matches If-None-Match or, only when the request
    # has no If-None-Match (RFC 9110 13.1.3), when it is not newer than If-Modified-Since.
    response.make_conditional(request)
    return response


def _cache_headers(
    response: Response, config: CardConfig, etag: str, *, extended: bool = False
) -> None:
    """A card's ``ETag`` (``W/`` prefixed: weak) and ``Cache-Control``.

    The public card may be kept by shared caches when it names a configured public URL; the
    extended card only by the caller (``private``, and it varies by ``Authorization``);
    a card that names the request's own URL must be revalidated (``no-cache``)."""
    response.set_etag(etag.removeprefix("W/"), weak=etag.startswith("W/"))
    response.vary.add(VERSION_HEADER)  # the shape follows it (the query is in the URL)
    if config.public_url:
        scope = "private" if extended else "public"
        response.headers["Cache-Control"] = f"{scope}, max-age={CARD_MAX_AGE}"
    else:  # the card depends on the Host header: no shared cache may keep it
        response.headers["Cache-Control"] = "private, no-cache" if extended else "no-cache"
        response.vary.add("Host")
    if extended:
        response.vary.add("Authorization")


def extended_card_response(agent: str) -> Response:
    """The extended card of ``agent`` as a GET answers it (HTTP+JSON's
    ``GET /extendedAgentCard``): the card, its ``ETag`` and ``Cache-Control``, and ``304``
    when ``If-None-Match`` names its ETag. Errors raise as :func:`extended_card`'s do."""
    card = extended_card(agent, _asked_shape(legacy=False))
    response = Response(card.body, mimetype="application/json")
    _cache_headers(response, card.config, card.etag, extended=True)
    response.make_conditional(request)
    return response


def extended_card(agent: str, shape: CardShape) -> Card:
    """The authenticated extended card of ``agent`` ("": the default agent) in ``shape``.

    The engine authenticates the caller (``GetAgent`` with the request's credentials: a
    caller it refuses gets AuthenticationRequired, HTTP 401) and names the agent's tools."""
    try:
        config, request_url = _agent_card_config(agent)
    except ApiError as exc:  # no public URL off loopback: no card of any kind
        raise ExtendedAgentCardNotConfiguredError(exc.message) from None
    name = agent or current_settings().agent.name
    try:
        found = current_engine().engine.GetAgent(
            pb.GetAgentRequest(name=name), timeout=UNARY_TIMEOUT
        )
    except grpc.RpcError as exc:
        raise from_rpc(exc) from None
    body, etag = extended_card_body(config, request_url, shape, tuple(found.tools))
    return Card(body, etag, config)


@bp.get(JWKS_PATH)
def jwks() -> Response:
    """The public key the cards are signed with, as a JWK Set (RFC 7517); 404 when cards
    are not signed."""
    config: CardConfig = current_app.extensions[_CARD_KEY]
    if config.signer is None:
        raise ApiError(
            404, "not_found", "agent cards are not signed here: no [a2a] card_signing_key"
        )
    response = Response(json.dumps(config.signer.jwks()), mimetype="application/jwk-set+json")
    response.headers["Cache-Control"] = f"public, max-age={CARD_MAX_AGE}"
    return response


# -- the methods -------------------------------------------------------------------


def _json(message: ProtoMessage) -> dict[str, Any]:
    """ProtoJSON, whole numbers as integers: a task's ``metadata`` is a ``Struct`` whose
    numbers (``usage``'s token counts) are doubles, ``26.0`` as ``MessageToDict`` gives them."""
    out: dict[str, Any] = whole_numbers(json_format.MessageToDict(message))
    return out


def _send_message(tasks: TaskService, params: dict[str, Any]) -> Result:
    task = tasks.send_message(parse_params(params, SendMessageRequest()))
    return _json(SendMessageResponse(task=task))


def _send_streaming_message(tasks: TaskService, params: dict[str, Any]) -> Result:
    return _Stream(
        tasks.send_streaming_message(parse_params(params, SendMessageRequest())), stream_json
    )


def _get_task(tasks: TaskService, params: dict[str, Any]) -> Result:
    query = parse_params(params, GetTaskRequest())
    length = query.history_length if query.HasField("history_length") else None
    return _json(tasks.get_task(query.id, length))


def _list_tasks(tasks: TaskService, params: dict[str, Any]) -> Result:
    query = parse_params(params, ListTasksRequest())
    page = tasks.list_tasks(query)
    out: dict[str, Any] = whole_numbers(
        json_format.MessageToDict(page, always_print_fields_with_no_presence=True)
    )
    if not query.include_artifacts:
        for task in out["tasks"]:
            task.pop("artifacts", None)
    return out


def _cancel_task(tasks: TaskService, params: dict[str, Any]) -> Result:
    return _json(tasks.cancel_task(parse_params(params, CancelTaskRequest()).id))


def _subscribe_to_task(tasks: TaskService, params: dict[str, Any]) -> Result:
    return _Stream(
        tasks.subscribe_to_task(parse_params(params, SubscribeToTaskRequest()).id), stream_json
    )


def _no_push_notifications(tasks: TaskService, params: dict[str, Any]) -> Result:
    raise PushNotificationNotSupportedError(
        "push notifications are configured with A2A 1.0 (header A2A-Version: 1.0):"
        " CreateTaskPushNotificationConfig"
    )


def _push() -> PushConfigService:
    return PushConfigService(current_engine().engine)


def _create_push_config(tasks: TaskService, params: dict[str, Any]) -> Result:
    config = parse_params(params, TaskPushNotificationConfig())
    tasks.check_task(config.task_id)
    return _json(_push().create(config))


def _get_push_config(tasks: TaskService, params: dict[str, Any]) -> Result:
    query = parse_params(params, GetTaskPushNotificationConfigRequest())
    tasks.check_task(query.task_id)
    return _json(_push().get(query))


def _list_push_configs(tasks: TaskService, params: dict[str, Any]) -> Result:
    query = parse_params(params, ListTaskPushNotificationConfigsRequest())
    tasks.check_task(query.task_id)
    return _json(_push().list(query))


def _delete_push_config(tasks: TaskService, params: dict[str, Any]) -> Result:
    query = parse_params(params, DeleteTaskPushNotificationConfigRequest())
    tasks.check_task(query.task_id)
    _push().delete(query)
    return {}


def _card_result(card: Card) -> Result:
    result = _CardResult(json.loads(card.body))
    result.card = card
    return result


def _extended_card(tasks: TaskService, params: dict[str, Any]) -> Result:
    return _card_result(extended_card((request.view_args or {}).get("agent", ""), "1.0"))


def _v03_extended_card(tasks: TaskService, params: dict[str, Any]) -> Result:
    return _card_result(extended_card((request.view_args or {}).get("agent", ""), "0.3"))


def _v03_send(tasks: TaskService, params: dict[str, Any]) -> Result:
    from web_facade.a2a import v03  # the 0.3 dialect (pydantic types) only when a peer uses it

    return v03.send_result(tasks.send_message(v03.send_request(params)))


def _v03_stream(tasks: TaskService, params: dict[str, Any]) -> Result:
    from web_facade.a2a import v03  # the 0.3 dialect (pydantic types) only when a peer uses it

    stream = tasks.send_streaming_message(v03.send_request(params))
    return _Stream(stream, v03.stream_json)


def _v03_get(tasks: TaskService, params: dict[str, Any]) -> Result:
    from web_facade.a2a import v03  # the 0.3 dialect (pydantic types) only when a peer uses it

    return v03.task_json(tasks.get_task(*v03.task_query(params)))


def _v03_cancel(tasks: TaskService, params: dict[str, Any]) -> Result:
    from web_facade.a2a import v03  # the 0.3 dialect (pydantic types) only when a peer uses it

    return v03.task_json(tasks.cancel_task(v03.task_id(params)))


def _v03_resubscribe(tasks: TaskService, params: dict[str, Any]) -> Result:
    from web_facade.a2a import v03  # the 0.3 dialect (pydantic types) only when a peer uses it

    return _Stream(tasks.subscribe_to_task(v03.task_id(params)), v03.stream_json)


METHODS: dict[str, tuple[str, Handler]] = {
    "SendMessage": ("1.0", _send_message),
    "SendStreamingMessage": ("1.0", _send_streaming_message),
    "GetTask": ("1.0", _get_task),
    "ListTasks": ("1.0", _list_tasks),
    "CancelTask": ("1.0", _cancel_task),
    "SubscribeToTask": ("1.0", _subscribe_to_task),
    "CreateTaskPushNotificationConfig": ("1.0", _create_push_config),
    "GetTaskPushNotificationConfig": ("1.0", _get_push_config),
    "ListTaskPushNotificationConfigs": ("1.0", _list_push_configs),
    "DeleteTaskPushNotificationConfig": ("1.0", _delete_push_config),
    "GetExtendedAgentCard": ("1.0", _extended_card),
    "message/send": ("0.3", _v03_send),
    "message/stream": ("0.3", _v03_stream),
    "tasks/get": ("0.3", _v03_get),
    "tasks/cancel": ("0.3", _v03_cancel),
    "tasks/resubscribe": ("0.3", _v03_resubscribe),
    "tasks/pushNotificationConfig/set": ("0.3", _no_push_notifications),
    "tasks/pushNotificationConfig/get": ("0.3", _no_push_notifications),
    "tasks/pushNotificationConfig/list": ("0.3", _no_push_notifications),
    "tasks/pushNotificationConfig/delete": ("0.3", _no_push_notifications),
    "agent/getAuthenticatedExtendedCard": ("0.3", _v03_extended_card),
}
"""Method name → (the A2A version that names it, handler)."""

_V10_NAMES = {
    "message/send": "SendMessage",
    "message/stream": "SendStreamingMessage",
    "tasks/get": "GetTask",
    "tasks/cancel": "CancelTask",
    "tasks/resubscribe": "SubscribeToTask",
}


# -- JSON-RPC over HTTP ------------------------------------------------------------


def _body() -> bytes:
    """The raw body; a body over the size limit is an invalid request, not an HTTP 413."""
    try:
        return read_body()
    except RequestEntityTooLarge:
        discard_body()  # so a client that sent it all reads the answer
        limit = request.max_content_length
        raise InvalidRequestError(f"the request body is larger than {limit} bytes") from None
    except BadRequest as exc:
        raise InvalidRequestError(exc.description or "the request body is malformed") from None


def _check(body: object) -> None:
    """JSON the engine cannot take: invalid params under ``params``, else an invalid request."""
    try:
        check_json(body)
    except UnacceptableJson as exc:
        if exc.path[:1] == ("params",) and isinstance(body, dict) and "method" in body:
            raise invalid_params(exc.field(skip=1) or "params", exc.problem) from None
        raise InvalidRequestError(str(exc)) from None


_INTEGER_IDS: Final = range(-(2**63), 2**63)
"""Integer ids taken: a signed 64-bit integer, as JSON-RPC clients hold ids (-2^63 too)."""


def _id_problem(value: object) -> str | None:
    """Why ``value`` cannot be a request's id, or None when it can: a string of valid
    Unicode of at most ``[a2a] max_request_id_chars`` characters (the id is echoed in
    every answer, in each frame of a stream), or a 64-bit integer."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return "must be a string or an integer"
    if isinstance(value, int):
        if value not in _INTEGER_IDS:
            return "must be an integer between -2^63 and 2^63 - 1"
        return None
    limit = current_settings().a2a.max_request_id_chars
    if len(value) > limit:
        return (
            f"is longer than {limit} characters, the limit for a request id "
            "([a2a] max_request_id_chars)"
        )
    return scalar_problem(value)


def _request_id(body: object) -> RequestId:
    """The request's id when it is a usable one (see :func:`_id_problem`), else None: an
    error then answers with ``"id": null``, as JSON-RPC 2.0 says for an id that cannot be
    read."""
    if not isinstance(body, dict):
        return None
    value = body.get("id")
    if _id_problem(value) is not None:
        return None
    assert isinstance(value, str | int)
    return value


def _call_of(body: object) -> tuple[str, dict[str, Any]]:
    """The method and params of a JSON-RPC 2.0 request; InvalidRequest for anything else."""
    if isinstance(body, list):
        raise InvalidRequestError("batch requests are not supported")
    if not isinstance(body, dict):
        raise InvalidRequestError("the request must be a JSON-RPC 2.0 request object")
    if body.get("jsonrpc") != "2.0":
        raise InvalidRequestError('jsonrpc must be exactly "2.0"')
    if "id" not in body:
        raise InvalidRequestError("id is required: notifications are not supported")
    id_problem = _id_problem(body["id"])
    if id_problem is not None:
        raise InvalidRequestError(f"id {id_problem}", data={"field": "id"})
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise InvalidRequestError("method must be a non-empty string")
    params = body.get("params")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise invalid_params("params", "must be an object")
    return method, params


def dialect_of(header: str | None) -> str:
    """The A2A version the request speaks: no header (or an empty one) is 0.3."""
    raw = (header or "").strip()
    if not raw:
        return "0.3"
    match = _VERSION.match(raw)
    if match is not None:
        major, minor = int(match[1]), int(match[2] or 0)
        if major == 1:
            return "1.0"
        if (major, minor) == (0, 3):
            return "0.3"
    raise VersionNotSupportedError(
        f"A2A version {raw!r} is not supported; this agent speaks 1.0 and 0.3",
        data={"supportedVersions": "1.0,0.3"},
    )


def _handler(method: str, dialect: str) -> Handler:
    entry = METHODS.get(method)
    if entry is None:
        raise MethodNotFoundError(f"method {method!r} not found")
    version, handler = entry
    if version == dialect:
        return handler
    if version == "1.0":
        hint = f"{method} is an A2A 1.0 method: send the header {VERSION_HEADER}: 1.0"
    else:
        hint = f"{method} is an A2A 0.3 method; in A2A 1.0 call {_V10_NAMES.get(method)}"
    raise VersionNotSupportedError(
        f"{hint} (this request speaks A2A {dialect})", data={"supportedVersions": "1.0,0.3"}
    )


@bp.post("/")
@bp.post("/a2a/<agent>/")
def rpc(agent: str = "") -> Response:
    """One JSON-RPC request: a JSON response, or an SSE stream for the streaming methods.
    ``/a2a/{agent}/``: a new context is that agent's conversation (docs/agents.md)."""
    request_id: RequestId = None
    if agent:
        check_agent(current_settings(), agent)
    try:
        raw = _body()
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise JSONParseError(parse_failure(exc)) from None
        request_id = _request_id(body)
        _check(body)
        method, params = _call_of(body)
        handler = _handler(method, dialect_of(request.headers.get(VERSION_HEADER)))
        result = handler(TaskService(current_engine().engine, agent), params)
    except UnsupportedMediaType as exc:
        # A body not sent as JSON, refused before it is read: A2A's ContentTypeNotSupported
        # (-32005), with HTTP 200 as every JSON-RPC error here (the other surfaces say 415).
        refused = ContentTypeNotSupportedError(exc.description or "the request body must be JSON")
        return Response(encode(error(None, refused)), mimetype="application/json")
    except (AuthenticationRequired, RateLimitedError) as exc:
        response = Response(
            encode(error(request_id, exc)), exc.http_status, mimetype="application/json"
        )
        if isinstance(exc, RateLimitedError):
            response.headers["Retry-After"] = str(exc.retry_after or 1)
        else:
            response.headers["WWW-Authenticate"] = challenge()
        return response
    except A2AError as exc:
        return Response(encode(error(request_id, exc)), mimetype="application/json")
    except Exception as exc:
        return Response(encode(error(request_id, unexpected(exc))), mimetype="application/json")
    if isinstance(result, _CardResult):
        response = Response(encode(reply(request_id, result)), mimetype="application/json")
        _cache_headers(response, result.card.config, result.card.etag, extended=True)
        return response
    if isinstance(result, _Stream):
        if isinstance(result.follow, Task):
            # Nothing happens to a task that waits for input until the peer answers.
            snapshot = result.shape(StreamResponse(task=result.follow))
            return sse_response(iter([A2aStream.frame(reply(request_id, snapshot))]))
        heartbeat = current_settings().web.heartbeat_interval
        return A2aStream(result.follow, heartbeat, request_id, result.shape).response()
    return Response(encode(reply(request_id, result)), mimetype="application/json")
