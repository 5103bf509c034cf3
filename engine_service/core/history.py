"""Pure rules about history: validating and reconciling incoming messages, and
turning the stored history into what the LLM is sent.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence

from agentik.images import image_type_problem, image_url_problem
from engine_service.core.errors import InvalidInput
from engine_service.core.ids import check_id
from engine_service.core.models import (
    ContextItem,
    DocumentPart,
    ImagePart,
    Message,
    MessageStatus,
    Role,
    TextPart,
)

__all__ = [
    "DOCUMENT_TYPES",
    "chat_messages",
    "check_document",
    "check_image",
    "new_id",
    "prepare_incoming",
    "reconcile",
]

UNANSWERED = "error: no result was provided for this tool call"


def new_id() -> str:
    return uuid.uuid4().hex


def prepare_incoming(messages: Sequence[Message]) -> list[Message]:
    """Check a run's incoming messages and give ids to those without one.

    Raises ``InvalidInput`` naming the offending message for: duplicate ids, ids outside
    the id rule (``core.ids``), a tool message without ``tool_call_id``, tool calls on a
    non-assistant message, an image that is not an http(s) URL, an image ``data:`` URL or
    inline bytes of an ``image/*`` type.
    """
    seen: set[str] = set()
    out: list[Message] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not message.id:
            message.id = new_id()
        else:
            check_id(message.id, f"{where}.id")
        if message.id in seen:
            raise InvalidInput(f"{where}.id {message.id!r} appears twice in the request")
        seen.add(message.id)
        if message.role is Role.TOOL and not message.tool_call_id:
            raise InvalidInput(f"{where}.tool_call_id is required for a tool message")
        if message.tool_call_id:
            check_id(message.tool_call_id, f"{where}.tool_call_id")
        if message.tool_calls and message.role is not Role.ASSISTANT:
            raise InvalidInput(f"{where}.tool_calls is only allowed on assistant messages")
        for part_index, part in enumerate(message.content):
            if isinstance(part, ImagePart):
                check_image(part, f"{where}.content[{part_index}].image")
            elif isinstance(part, DocumentPart):
                check_document(part, f"{where}.content[{part_index}].document")
        for call_index, call in enumerate(message.tool_calls):
            if not call.id or not call.name:
                raise InvalidInput(f"{where}.tool_calls[{call_index}] needs an id and a name")
            check_id(call.id, f"{where}.tool_calls[{call_index}].id")
        out.append(message)
    return out


DOCUMENT_TYPES = ("application/pdf",)
"""What a document part's bytes may be: what Chat Completions' file parts take."""
_FILE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,255}")


def check_document(part: DocumentPart, where: str) -> None:
    """Refuse a document the LLM must not be sent: bytes of a type other than a PDF, or a
    file id that is not one (a provider's ids are short tokens, never paths or URLs)."""
    if part.file_id:
        if not _FILE_ID.fullmatch(part.file_id) or "//" in part.file_id:
            raise InvalidInput(  # not echoed: it may look like a path or an address
                f"{where}.file_id is not a provider file id (letters, digits and _ . : - /, "
                "at most 256)"
            )
        return
    if part.mime_type.lower() not in DOCUMENT_TYPES:
        raise InvalidInput(
            f"{where}.mime_type {part.mime_type[:80]!r} is not a document type the model "
            f"takes ({', '.join(DOCUMENT_TYPES)})"
        )
    if not part.data:
        raise InvalidInput(f"{where}.data is empty")


def check_image(part: ImagePart, where: str) -> None:
    """Refuse an image the LLM must not be sent: a URL that is not http(s) or an image
    ``data:`` URL (``javascript:``, ``file:``, ...), or a type that is not ``image/*``."""
    if part.mime_type and (problem := image_type_problem(part.mime_type)) is not None:
        raise InvalidInput(f"{where}.mime_type {problem}")
    if not part.url:
        return
    problem = image_url_problem(part.url)
    if problem is not None:
        raise InvalidInput(f"{where}.url {problem}")


def reconcile(stored_ids: Iterable[str], incoming: Sequence[Message]) -> list[Message]:
    """Append mode: the server is the source of truth, so known ids are ignored."""
    known = set(stored_ids)
    return [m for m in incoming if m.id not in known]


def chat_messages(
    system_prompt: str, context: Sequence[ContextItem], history: Sequence[Message]
) -> list[Message]:
    """The LLM's view of the conversation.

    The system prompt and the run's context come first. Every assistant tool call is
    followed by its result; a call the client never answered gets an error result, so
    the LLM API accepts the history. Tool messages that answer no call are dropped.
    """
    out: list[Message] = []
    preamble = system_prompt
    if context:
        lines = "\n".join(f"- {item.description}: {item.value}" for item in context)
        preamble = f"{preamble}\n\nContext:\n{lines}" if preamble else f"Context:\n{lines}"
    if preamble:
        out.append(Message(id="system", role=Role.SYSTEM, content=[TextPart(preamble)]))

    results = {m.tool_call_id: m for m in history if m.role is Role.TOOL}
    answered: set[str] = set()
    for message in history:
        if message.role is Role.TOOL:
            continue  # placed right after the call it answers
        if message.role is Role.ASSISTANT and message.status is MessageStatus.INTERRUPTED:
            # An interrupted answer is kept as text; half-made tool calls are not.
            if message.content:
                out.append(Message(id=message.id, role=Role.ASSISTANT, content=message.content))
            continue
        out.append(message)
        for call in message.tool_calls:
            result = results.get(call.id)
            if result is None or call.id in answered:
                result = Message(
                    id=f"{call.id}-unanswered",
                    role=Role.TOOL,
                    content=[TextPart(UNANSWERED)],
                    tool_call_id=call.id,
                    status=MessageStatus.ERROR,
                )
            answered.add(call.id)
            out.append(result)
    return out
