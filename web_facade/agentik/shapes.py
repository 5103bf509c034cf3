"""The ``/agentik`` JSON shapes: conversations, messages, content parts and interrupts.

Output converters turn engine messages into the contract's snake_case JSON (times as
ISO-8601 UTC with ``Z``). :func:`parts_from_json` reads the content of a ``send`` body
and refuses a malformed one with a message that names the field.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Any

from google.protobuf import timestamp_pb2

from agentik.images import image_type_problem, image_url_problem
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.errors import invalid
from web_facade.proto_json import json_value

__all__ = [
    "INTERRUPT_KINDS",
    "ROLE_NAMES",
    "STATUS_NAMES",
    "conversation_json",
    "failed_webhook_json",
    "interrupt_json",
    "iso_time",
    "message_json",
    "part_json",
    "parts_from_json",
]

ROLE_NAMES: dict[int, str] = {
    pb.ROLE_USER: "user",
    pb.ROLE_ASSISTANT: "assistant",
    pb.ROLE_SYSTEM: "system",
    pb.ROLE_DEVELOPER: "developer",
    pb.ROLE_TOOL: "tool",
}
STATUS_NAMES: dict[int, str] = {
    pb.MESSAGE_STATUS_UNSPECIFIED: "complete",
    pb.MESSAGE_STATUS_COMPLETE: "complete",
    pb.MESSAGE_STATUS_INTERRUPTED: "interrupted",
    pb.MESSAGE_STATUS_ERROR: "error",
}
INTERRUPT_KINDS: dict[int, str] = {
    pb.INTERRUPT_KIND_APPROVAL: "approval",
    pb.INTERRUPT_KIND_QUESTION: "question",
}
MAX_PARTS = 100


def iso_time(stamp: timestamp_pb2.Timestamp) -> str:
    """``2026-11-30T02:32:00.123Z``: ISO-8601, UTC, milliseconds."""
    moment = datetime.fromtimestamp(stamp.seconds, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.nanos // 1_000_000:03d}Z"


def conversation_json(session: pb.Session) -> dict[str, Any]:
    """A conversation: the contract's fields, then the additions (last event, run)."""
    return {
        "id": session.id,
        "title": session.title,
        "created_at": iso_time(session.create_time),
        "updated_at": iso_time(session.update_time),
        "count": session.message_count,
        "last_event_id": session.last_seq,
        "active_run_id": session.active_run_id or None,
        "pending_interrupts": [interrupt_json(i) for i in session.pending_interrupts],
        "usage": usage_json(session.usage),
        "webhook": {"url": session.webhook.url} if session.HasField("webhook") else None,
        "agent": session.agent,
    }


def failed_webhook_json(hook: pb.FailedWebhook) -> dict[str, Any]:
    """A webhook delivery that gave up (``GET /agentik/webhooks/failed``)."""
    return {
        "id": hook.id,
        "kind": hook.kind,
        "url": hook.url,
        "attempts": hook.attempts,
        "last_error": hook.last_error,
        "created_at": iso_time(hook.create_time),
        "failed_at": iso_time(hook.fail_time) if hook.HasField("fail_time") else None,
    }


def agent_json(agent: pb.Agent) -> dict[str, Any]:
    """An agent the server serves: never its endpoint or key (docs/agents.md)."""
    return {
        "name": agent.name,
        "description": agent.description,
        "model": agent.model,
        "tools": list(agent.tools),
        "default": agent.is_default,
    }


def usage_json(usage: pb.Usage) -> dict[str, int]:
    """Tokens as the LLM reported them; ``cached_tokens`` is part of ``input_tokens``."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cached_tokens": usage.cached_tokens,
    }


def _arguments(text: str) -> dict[str, Any] | str:
    """A tool call's arguments as a JSON object, or as the LLM's text when they are not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def interrupt_json(interrupt: pb.Interrupt) -> dict[str, Any]:
    """What a conversation waits for from a person: an approval of a tool call, or a
    question (``question``, ``choices``?) asked through the ``ask_user`` call."""
    call = interrupt.tool_call
    out: dict[str, Any] = {
        "id": interrupt.id,
        "kind": INTERRUPT_KINDS.get(interrupt.kind, "approval"),
        "message": interrupt.message,
        "run_id": interrupt.run_id,
        "tool_call": {"id": call.id, "name": call.name, "arguments": _arguments(call.arguments)},
    }
    payload = json_value(interrupt.payload) if interrupt.HasField("payload") else {}
    delegation = payload.get("delegation") if isinstance(payload, dict) else None
    if isinstance(delegation, dict) and isinstance(payload, dict):
        # A sub-agent asks (docs/agents.md): the call to approve is its own.
        out["delegated"] = {
            "agent": str(delegation.get("agent", "")),
            "conversation_id": str(delegation.get("conversationId", "")),
        }
        tool = payload.get("tool")
        arguments = payload.get("arguments")
        if interrupt.kind == pb.INTERRUPT_KIND_APPROVAL and isinstance(tool, str):
            shown = arguments if isinstance(arguments, dict | str) else {}
            out["tool_call"] = {"id": call.id, "name": tool, "arguments": shown}
    if interrupt.kind == pb.INTERRUPT_KIND_QUESTION:
        question = payload.get("question") if isinstance(payload, dict) else None
        out["question"] = question if isinstance(question, str) else interrupt.message
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if isinstance(choices, list) and all(isinstance(c, str) for c in choices):
            out["choices"] = choices
    if interrupt.HasField("expire_time"):
        out["expires_at"] = iso_time(interrupt.expire_time)
    return out


def document_note(document: pb.DocumentPart) -> str:
    """What stands for a document (sent through AG-UI) where a surface has no document part."""
    name = f"{document.filename} " if document.filename else ""
    if document.WhichOneof("source") == "file_id":
        return f"[document {name}(provider file {document.file_id})]"
    return f"[document {name}({document.mime_type}, {len(document.data):,} bytes)]"


def part_json(part: pb.ContentPart) -> dict[str, Any]:
    """A content part: text, or an image by URL or as base64 ``data``; a document (which
    only AG-UI sends) as a text note naming it."""
    if part.WhichOneof("part") == "document":
        return {"type": "text", "text": document_note(part.document)}
    if part.WhichOneof("part") == "image":
        image = part.image
        out: dict[str, Any] = {"type": "image"}
        if image.WhichOneof("source") == "data":
            out["data"] = base64.b64encode(image.data).decode("ascii")
        else:
            out["url"] = image.url
        if image.mime_type:
            out["mime_type"] = image.mime_type
        return out
    return {"type": "text", "text": part.text.text}


def message_json(message: pb.Message) -> dict[str, Any]:
    """A stored message; ``tool_calls``, ``tool_call_id`` and ``name`` only where set."""
    out: dict[str, Any] = {
        "id": message.id,
        "role": ROLE_NAMES.get(message.role, "user"),
        "content": [part_json(p) for p in message.content],
        "status": STATUS_NAMES.get(message.status, "complete"),
        "created_at": iso_time(message.create_time),
        "run_id": message.run_id or None,
    }
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
        ]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    return out


def _string(part: dict[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = part.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        kind = "missing" if value is None else f"a {_kind(value)}"
        invalid(f"{where}.{key} must be a string, got {kind}")
    return value


def _kind(value: object) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number"}
    return names.get(type(value), "number" if isinstance(value, float) else "null")


def _part_from_json(raw: object, where: str) -> pb.ContentPart:
    if not isinstance(raw, dict):
        invalid(f"{where} must be an object, got a {_kind(raw)}")
    kind = raw.get("type")
    if kind == "text":
        return pb.ContentPart(text=pb.TextPart(text=_string(raw, "text", where)))
    if kind != "image":
        invalid(f'{where}.type must be "text" or "image"')
    url = _string(raw, "url", where, required=False)
    data = _string(raw, "data", where, required=False)
    mime_type = _string(raw, "mime_type", where, required=False)
    if bool(url) == bool(data):
        invalid(f"{where} must have exactly one of url and data")
    if mime_type and (problem := image_type_problem(mime_type)) is not None:
        invalid(f"{where}.mime_type {problem}")
    if url:
        # The engine's rule, checked here so that the refusal names this body's field.
        if (problem := image_url_problem(url)) is not None:
            invalid(f"{where}.url {problem}")
        return pb.ContentPart(image=pb.ImagePart(url=url, mime_type=mime_type))
    if not mime_type:
        invalid(f"{where}.mime_type is required with data")
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        invalid(f"{where}.data must be base64")
    return pb.ContentPart(image=pb.ImagePart(data=decoded, mime_type=mime_type))


def parts_from_json(body: dict[str, Any]) -> list[pb.ContentPart]:
    """The user message of a ``send`` body: ``{"content": [parts]}`` or ``{"text": "..."}``."""
    if "content" in body:
        content = body["content"]
        if not isinstance(content, list):
            invalid(f"content must be an array of parts, got a {_kind(content)}")
        if not content:
            invalid("content must have at least one part")
        if len(content) > MAX_PARTS:
            invalid(f"content has more than {MAX_PARTS} parts")
        return [_part_from_json(raw, f"content[{i}]") for i, raw in enumerate(content)]
    if "text" in body:
        text = body["text"]
        if not isinstance(text, str):
            invalid(f"text must be a string, got a {_kind(text)}")
        return [pb.ContentPart(text=pb.TextPart(text=text))]
    invalid("content is required (an array of parts), or text (a string)")
