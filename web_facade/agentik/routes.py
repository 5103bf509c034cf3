"""The ``/agentik`` REST + SSE facade: conversations, messages, turns, live events.

Each view is convert → one engine call → convert; errors go through ``web_facade.errors``.
The facade keeps no conversation state: everything lives in the engine.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import grpc
from flask import Blueprint, Response, request

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.decisions import resume_entries
from web_facade.agentik.shapes import (
    agent_json,
    conversation_json,
    failed_webhook_json,
    message_json,
    parts_from_json,
)
from web_facade.agentik.stream import AgentikStream
from web_facade.engine_client import UNARY_TIMEOUT, current_engine, current_settings
from web_facade.errors import (
    AGENTIK_WORDS,
    ApiError,
    from_rpc_error,
    invalid,
    rpc_error_handler,
)
from web_facade.request_body import parse_json, read_body
from web_facade.stream import admitted, follow, open_run, opened

__all__ = ["MAX_PAGE", "MAX_SEQ", "bp"]

bp = Blueprint("agentik", __name__, url_prefix="/agentik")
# The engine's refusals in this API's words: conversation, decisions[i].
bp.register_error_handler(grpc.RpcError, rpc_error_handler(AGENTIK_WORDS))

MAX_PAGE = 1000
"""Largest ``limit`` of a page (the engine's limit)."""
MAX_SEQ = 2**63 - 1
"""Largest event id (``after``, ``Last-Event-ID``): the engine's seq is an int64."""
_MAX_INT_DIGITS = len(str(MAX_SEQ))
"""Significant digits past which an integer is out of every range here: refused before
``int()`` sees it (which would also refuse strings past Python's 4300-digit limit)."""
_SHOWN = 40


def _json_body(*, required: bool) -> dict[str, Any]:
    """The request body as a JSON object (``{}`` when empty and not required)."""
    raw = read_body()
    if not raw.strip():
        if required:
            invalid("the request body must be a JSON object")
        return {}
    value = parse_json(raw)
    if not isinstance(value, dict):
        invalid("the request body must be a JSON object")
    return value


def _optional_string(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        invalid(f"{key} must be a string")
    return value


def _integer(raw: str, name: str, minimum: int, maximum: int) -> int:
    """``raw`` as an integer in ``minimum..maximum``; 400 naming ``name`` and the range when
    it is not an integer or out of range (however many digits it has)."""
    text = raw.strip()
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    if not digits.isascii() or not digits.isdigit():
        invalid(f"{name} must be an integer")
    significant = digits.lstrip("0") or "0"
    if len(significant) > _MAX_INT_DIGITS:
        shown = text if len(text) <= _SHOWN else text[:_SHOWN] + "…"
        invalid(f"{name} must be between {minimum} and {maximum}, got {shown}")
    value = -int(significant) if negative else int(significant)
    if value < minimum or value > maximum:
        invalid(f"{name} must be between {minimum} and {maximum}, got {value}")
    return value


def _int_arg(name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return _integer(raw, name, minimum, maximum)


def _bool_arg(name: str) -> bool:
    raw = request.args.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    invalid(f"{name} must be true or false")


def _get_session(conversation_id: str) -> pb.Session:
    return current_engine().engine.GetSession(
        pb.GetSessionRequest(session_id=conversation_id), timeout=UNARY_TIMEOUT
    )


@bp.post("/conversations")
def create_conversation() -> tuple[dict[str, Any], int]:
    """Create a conversation (``title``, optional client-chosen ``id``, optional ``agent``,
    the default agent when left out, optional default ``webhook``) → 201."""
    body = _json_body(required=False)
    session = current_engine().engine.CreateSession(
        pb.CreateSessionRequest(
            title=_optional_string(body, "title"),
            session_id=_optional_string(body, "id"),
            webhook=_webhook(body),
            agent=_optional_string(body, "agent"),
        ),
        timeout=UNARY_TIMEOUT,
    )
    return conversation_json(session), 201


@bp.patch("/conversations/<conversation_id>")
def update_conversation(conversation_id: str) -> dict[str, Any]:
    """Set the conversation's default ``webhook`` (``null`` clears it)."""
    body = _json_body(required=True)
    unknown = sorted(set(body) - {"webhook"})
    if unknown:
        invalid(f"unknown field {unknown[0][:_SHOWN]!r}: only webhook can be changed here")
    if "webhook" not in body:
        invalid('webhook is required: {"url": "https://..."}, or null to clear it')
    session = current_engine().engine.SetSessionWebhook(
        pb.SetSessionWebhookRequest(session_id=conversation_id, webhook=_webhook(body)),
        timeout=UNARY_TIMEOUT,
    )
    return conversation_json(session)


@bp.get("/agents")
def list_agents() -> dict[str, Any]:
    """The agents this server serves, the default one first."""
    listed = current_engine().engine.ListAgents(pb.ListAgentsRequest(), timeout=UNARY_TIMEOUT)
    return {"items": [agent_json(a) for a in listed.agents]}


@bp.get("/agents/<name>")
def get_agent(name: str) -> dict[str, Any]:
    """One agent; 404 ``agent_not_found`` for one not served."""
    agent = current_engine().engine.GetAgent(pb.GetAgentRequest(name=name), timeout=UNARY_TIMEOUT)
    return agent_json(agent)


@bp.get("/conversations")
def list_conversations() -> dict[str, Any]:
    """A page of conversations, most recently updated first; ``?agent=``: only that
    agent's."""
    offset = _int_arg("offset", 0, 0, 2**31 - 1)
    limit = _int_arg("limit", 50, 1, MAX_PAGE)
    agent = request.args.get("agent", "")  # one the engine does not serve: agent_not_found
    page = current_engine().engine.ListSessions(
        pb.ListSessionsRequest(offset=offset, limit=limit, agent=agent), timeout=UNARY_TIMEOUT
    )
    return {
        "items": [conversation_json(s) for s in page.sessions],
        "offset": offset,
        "limit": limit,
        "total": page.total,
    }


@bp.get("/conversations/<conversation_id>")
def get_conversation(conversation_id: str) -> dict[str, Any]:
    """One conversation with its message count."""
    return conversation_json(_get_session(conversation_id))


@bp.get("/conversations/<conversation_id>/messages")
def list_messages(conversation_id: str) -> dict[str, Any]:
    """Stored messages after a message id, oldest first."""
    limit = _int_arg("limit", 100, 1, MAX_PAGE)
    page = current_engine().engine.ListMessages(
        pb.ListMessagesRequest(
            session_id=conversation_id,
            after_message_id=request.args.get("after", ""),
            limit=limit,
        ),
        timeout=UNARY_TIMEOUT,
    )
    return {"items": [message_json(m) for m in page.messages], "has_more": page.has_more}


@bp.post("/conversations/<conversation_id>/fork")
def fork_conversation(conversation_id: str) -> tuple[dict[str, Any], int]:
    """A new conversation of the caller's holding this one's messages up to and including
    ``up_to_message_id`` (optional ``id`` for it) → 201; the original is untouched."""
    body = _json_body(required=True)
    if not isinstance(body.get("up_to_message_id"), str) or not body["up_to_message_id"]:
        invalid("up_to_message_id is required and must be a message id (a string)")
    session = current_engine().engine.ForkSession(
        pb.ForkSessionRequest(
            session_id=conversation_id,
            up_to_message_id=body["up_to_message_id"],
            new_session_id=_optional_string(body, "id"),
        ),
        timeout=UNARY_TIMEOUT,
    )
    return conversation_json(session), 201


@bp.post("/conversations/<conversation_id>/rename")
def rename_conversation(conversation_id: str) -> dict[str, Any]:
    """Change the title."""
    body = _json_body(required=True)
    if not isinstance(body.get("title"), str):
        invalid("title is required and must be a string")
    session = current_engine().engine.RenameSession(
        pb.RenameSessionRequest(session_id=conversation_id, title=body["title"]),
        timeout=UNARY_TIMEOUT,
    )
    return conversation_json(session)


@bp.delete("/conversations/<conversation_id>")
def delete_conversation(conversation_id: str) -> tuple[str, int]:
    """Delete the conversation with its messages and events → 204."""
    current_engine().engine.DeleteSession(
        pb.DeleteSessionRequest(session_id=conversation_id), timeout=UNARY_TIMEOUT
    )
    return "", 204


_WAITING = (
    "this conversation waits for a person's answer (its pending_interrupts): answer them with "
    "POST /agentik/conversations/{id}/resume, or stop waiting with "
    "POST /agentik/conversations/{id}/interrupt"
)


def _run(run_request: pb.RunRequest) -> Response:
    """Start a turn and stream its events. A refusal (404, 409 busy or input_required,
    503 ...) is an HTTP error, raised before the stream opens."""
    settings = current_settings()
    run_request.create_session = False
    run_request.cancel_on_disconnect = settings.web.on_disconnect == "cancel"
    run_request.batch_events = True  # the relay unpacks them: fewer messages under load
    engine = current_engine().engine
    try:
        relay = open_run(engine, run_request)
    except grpc.RpcError as exc:
        refused = from_rpc_error(exc)
        if refused.code != "input_required":
            raise
        # The engine speaks of resume entries; here the answer is the /resume endpoint.
        raise ApiError(409, "input_required", _WAITING) from exc
    return AgentikStream(relay, settings.web.heartbeat_interval).response()


MAX_WEBHOOK_URL = 2048


def _webhook(body: dict[str, Any]) -> pb.Webhook | None:
    """The body's ``webhook``: ``{"url": "https://..."}`` (the engine's SSRF guard checks
    the URL and refuses it with 400 naming why)."""
    if body.get("webhook") is None:
        return None
    hook = body["webhook"]
    if not isinstance(hook, dict):
        invalid('webhook must be an object: {"url": "https://..."}')
    unknown = sorted(set(hook) - {"url"})
    if unknown:
        invalid(f"webhook has an unknown field {unknown[0][:_SHOWN]!r}")
    url = hook.get("url")
    if not isinstance(url, str) or not url:
        invalid("webhook.url must be a non-empty string")
    if len(url) > MAX_WEBHOOK_URL:
        invalid(f"webhook.url is longer than {MAX_WEBHOOK_URL} characters")
    return pb.Webhook(url=url)


@bp.post("/conversations/<conversation_id>/send")
def send(conversation_id: str) -> Response:
    """Start a turn with one user message and stream its events (``webhook``: told when
    the turn ends)."""
    body = _json_body(required=True)
    message = pb.Message(role=pb.ROLE_USER, content=parts_from_json(body))
    run_request = pb.RunRequest(
        session_id=conversation_id, messages=[message], webhook=_webhook(body)
    )
    return _run(run_request)


@bp.post("/conversations/<conversation_id>/resume")
def resume(conversation_id: str) -> Response:
    """Answer what the conversation waits for (``decisions``, optionally a new user
    ``message``) and stream the turn that carries the answers out."""
    body = _json_body(required=True)
    text = _optional_string(body, "message")
    _get_session(conversation_id)  # 404 before the decisions are read
    entries = resume_entries(body)
    run_request = pb.RunRequest(session_id=conversation_id, resume=entries, webhook=_webhook(body))
    if text:
        run_request.messages.append(
            pb.Message(role=pb.ROLE_USER, content=[pb.ContentPart(text=pb.TextPart(text=text))])
        )
    return _run(run_request)


def _resume_point() -> int | None:
    """The seq to resume after: ``Last-Event-ID`` (what EventSource sends), else ``?after=``."""
    header = request.headers.get("Last-Event-ID")
    if header is not None and header.strip():
        return _integer(header, "Last-Event-ID", 0, MAX_SEQ)
    raw = request.args.get("after")
    if raw is not None and raw.strip():
        return _integer(raw, "after", 0, MAX_SEQ)
    return None


@bp.get("/conversations/<conversation_id>/events")
def events(conversation_id: str) -> Response:
    """Follow a conversation: the events after the resume point, then live ones."""
    after = _resume_point()
    until_idle = _bool_arg("until_idle")
    session = _get_session(conversation_id)  # 404 before the stream opens
    engine = current_engine().engine
    subscription = pb.SubscribeRequest(
        session_id=conversation_id,
        after_seq=session.last_seq if after is None else after,
        until_idle=until_idle,
        batch_events=True,
    )
    relay = follow(engine, subscription)
    if after is not None and after > session.last_seq:
        # Past what the store holds: the engine refuses it unless it showed that much before
        # it could store it. Its answer first, so that a refusal is a 400, not a stream.
        opened(relay)
    else:
        # The engine's admission (or its refusal: a caller at its open streams, over its
        # rate, is a 429, not a stream).
        admitted(relay)
    return AgentikStream(relay, current_settings().web.heartbeat_interval).response()


@bp.post("/conversations/<conversation_id>/interrupt")
def interrupt(conversation_id: str) -> dict[str, Any]:
    """Stop the turn in flight (or only ``run_id``); idle is not an error."""
    body = _json_body(required=False)
    reply = current_engine().engine.Interrupt(
        pb.InterruptRequest(session_id=conversation_id, run_id=_optional_string(body, "run_id")),
        timeout=UNARY_TIMEOUT,
    )
    out: dict[str, Any] = {"interrupted": reply.interrupted}
    if reply.run_id:
        out["run_id"] = reply.run_id
    return out


@bp.get("/webhooks/failed")
def failed_webhooks() -> dict[str, Any]:
    """Webhook deliveries that gave up, newest first (admins only: 403 otherwise)."""
    offset = _int_arg("offset", 0, 0, 2**31 - 1)
    limit = _int_arg("limit", 50, 1, MAX_PAGE)
    page = current_engine().engine.ListFailedWebhooks(
        pb.ListFailedWebhooksRequest(offset=offset, limit=limit), timeout=UNARY_TIMEOUT
    )
    return {
        "items": [failed_webhook_json(w) for w in page.webhooks],
        "offset": offset,
        "limit": limit,
        "total": page.total,
    }


@cache
def _openapi_document() -> bytes:
    return resources.files("web_facade").joinpath("openapi.json").read_bytes()


@bp.get("/openapi.json")
def openapi() -> Response:
    """The OpenAPI 3.1 description of this API."""
    return Response(_openapi_document(), mimetype="application/json")
