"""AG-UI ``RunAgentInput`` → the engine's ``RunRequest``.

The body is validated with ``ag_ui.core.RunAgentInput``; a body that does not validate, or
that asks for something the engine cannot do, is refused with 422 and a message that names
the field (``messages[2].content[0].source.value``, camelCase as on the wire).

agentik reads its own options from ``forwardedProps.agentik`` (see :class:`RunOptions`); the
whole ``forwardedProps`` object still reaches the engine untouched.

Messages map one to one (``metadata`` included: the engine keeps it with the message and
hands it back in MESSAGES_SNAPSHOT; the LLM never sees it), with two exceptions:
``activity`` and ``reasoning`` messages are views the client builds from events, which the
engine neither stores nor sends to the LLM, so they are dropped; audio and video parts, an
image given as a provider ``file`` handle and a document given by URL are refused (the
engine holds text, images, and documents inline or as the provider's file id). Whether the
agent's model takes images or documents is the engine's to judge (400 naming the part and
the agent; ``[llm] input_modalities``).

``resume`` entries answer the thread's pending interrupts (see docs/agui.md, "Human in the
loop"): ``status`` maps to the engine's ``ResumeStatus``, ``payload`` to a JSON ``Value``.
Whether the entries answer what the thread waits for is the engine's to judge (400 naming
``resume[i]``, ``interruptId`` as on the wire: ``web_facade.errors.AGUI_WORDS``; 409
``input_required`` for a run without them while the thread waits).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from ag_ui.core import (
    AssistantMessage,
    ContentPart,
    DataSource,
    DeveloperMessage,
    DocumentPart,
    FileSource,
    ImagePart,
    Message,
    ResumeEntry,
    RunAgentInput,
    SystemMessage,
    TextPart,
    ToolMessage,
    UrlSource,
    UserMessage,
)
from google.protobuf import json_format, struct_pb2
from pydantic import ValidationError

from agentik.images import image_type_problem, image_url_problem
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.errors import ApiError

__all__ = [
    "OPTIONS_KEY",
    "RunOptions",
    "parse_input",
    "run_options",
    "run_request",
    "sends_state",
    "unprocessable",
]

OPTIONS_KEY = "agentik"
"""The ``forwardedProps`` key that holds agentik's run options."""

_MAX_REPORTED_ERRORS = 3


def unprocessable(message: str) -> NoReturn:
    """Refuse the request with 422 ``invalid_argument``; ``message`` names the field."""
    raise ApiError(422, "invalid_argument", message)


# -- validation -----------------------------------------------------------------------


def _path(loc: Sequence[int | str], data: Any) -> str:
    """A pydantic error location as a wire path, without union-member labels.

    Pydantic puts the union member it tried into the location (``'user'`` for a
    message's role, ``'str'`` for one branch of a content union). A label is an item of
    the location that is not a key of the data at that point — except the last item,
    which names the missing field.
    """
    out = ""
    for index, item in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(item, int):
            out += f"[{item}]"
            data = data[item] if isinstance(data, list) and item < len(data) else None
        elif isinstance(data, dict) and (item in data or last):
            out += f".{item}" if out else item
            data = data.get(item)
    return out or "body"


def _describe(errors: Sequence[Mapping[str, Any]], data: Any) -> str:
    """One line naming the fields that failed; union alternatives that lost are left out."""
    found: dict[str, str] = {}
    for error in errors:
        path = _path(error["loc"], data)
        message = str(error["msg"])
        if error["type"] == "union_tag_invalid":
            field = str(error.get("ctx", {}).get("discriminator", "")).strip("'\"")
            path = f"{path}.{field}" if field else path
            tag = error.get("ctx", {}).get("tag")
            message = f"unknown value {tag!r}; expected one of {error['ctx']['expected_tags']}"
        found.setdefault(path, message)
    # A shorter path that prefixes a longer one is the union branch that did not apply.
    paths = [
        p for p in found if not any(o != p and o.startswith((p + ".", p + "[")) for o in found)
    ]
    shown = [f"{p}: {found[p]}" for p in paths[:_MAX_REPORTED_ERRORS]]
    more = len(paths) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")


def parse_input(data: Any) -> RunAgentInput:
    """Validate a decoded JSON body as ``RunAgentInput``, or refuse it with 422."""
    if not isinstance(data, dict):
        unprocessable("the request body must be a JSON object (RunAgentInput)")
    try:
        return RunAgentInput.model_validate(data)
    except ValidationError as exc:
        unprocessable(_describe(exc.errors(), data))


# -- options --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunOptions:
    """agentik's options for one run, from ``forwardedProps.agentik``.

    ``reconcile``: ``"append"`` (default; the server's history is the truth, messages it
    already has are ignored by id) or ``"replace"`` (the input's messages become the
    history, and its ``state`` — even ``{}`` — becomes the state).
    ``messagesSnapshot``: end a finished run with MESSAGES_SNAPSHOT (default true).
    ``cancelOnDisconnect``: stop the run when the client goes away (default: the
    server's ``on_disconnect`` setting, ``continue`` unless configured).
    """

    replace: bool = False
    messages_snapshot: bool = True
    cancel_on_disconnect: bool | None = None


def _flag(options: Mapping[str, Any], key: str) -> bool | None:
    value = options.get(key)
    if value is not None and not isinstance(value, bool):
        unprocessable(f"forwardedProps.{OPTIONS_KEY}.{key} must be true or false")
    return value


_OPTION_KEYS = ("reconcile", "messagesSnapshot", "cancelOnDisconnect")


def run_options(forwarded_props: Any) -> RunOptions:
    """Read ``forwardedProps.agentik``; unknown keys and wrong types are refused."""
    if forwarded_props is None:
        return RunOptions()
    if not isinstance(forwarded_props, dict):
        unprocessable("forwardedProps must be a JSON object")
    options = forwarded_props.get(OPTIONS_KEY)
    if options is None:
        return RunOptions()
    if not isinstance(options, dict):
        unprocessable(f"forwardedProps.{OPTIONS_KEY} must be an object")
    unknown = sorted(set(options) - set(_OPTION_KEYS))
    if unknown:
        unprocessable(
            f"forwardedProps.{OPTIONS_KEY}.{unknown[0]} is not an agentik option "
            f"(known: {', '.join(_OPTION_KEYS)})"
        )
    reconcile = options.get("reconcile", "append")
    if reconcile not in ("append", "replace"):
        unprocessable(f'forwardedProps.{OPTIONS_KEY}.reconcile must be "append" or "replace"')
    snapshot = _flag(options, "messagesSnapshot")
    return RunOptions(
        replace=reconcile == "replace",
        messages_snapshot=True if snapshot is None else snapshot,
        cancel_on_disconnect=_flag(options, "cancelOnDisconnect"),
    )


# -- messages -------------------------------------------------------------------------


def _text(text: str) -> pb.ContentPart:
    return pb.ContentPart(text=pb.TextPart(text=text))


def _image(part: ImagePart, where: str) -> pb.ContentPart:
    source = part.source
    # The engine's rules, checked here so that a refusal names the field the client sent.
    if source.mime_type and (problem := image_type_problem(source.mime_type)) is not None:
        unprocessable(f"{where}.source.mimeType {problem}")
    if isinstance(source, UrlSource):
        if (problem := image_url_problem(source.value)) is not None:
            unprocessable(f"{where}.source.value {problem}")
        return pb.ContentPart(
            image=pb.ImagePart(url=source.value, mime_type=source.mime_type or "")
        )
    if isinstance(source, DataSource):
        try:
            data = base64.b64decode(source.value, validate=True)
        except (binascii.Error, ValueError):
            unprocessable(f"{where}.source.value is not valid base64")
        return pb.ContentPart(image=pb.ImagePart(data=data, mime_type=source.mime_type))
    unprocessable(
        f"{where}.source: a provider file handle cannot be read here; send the image "
        "as data (base64) or by url"
    )


def _document(part: DocumentPart, where: str) -> pb.ContentPart:
    """A document part: inline bytes, or a file the LLM provider holds (``file`` source).
    A URL is refused: Chat Completions takes no document by URL, and agentik fetches none."""
    source = part.source
    filename = ""
    if isinstance(part.metadata, dict) and isinstance(part.metadata.get("filename"), str):
        filename = part.metadata["filename"]
    if isinstance(source, DataSource):
        try:
            data = base64.b64decode(source.value, validate=True)
        except (binascii.Error, ValueError):
            unprocessable(f"{where}.source.value is not valid base64")
        document = pb.DocumentPart(data=data, mime_type=source.mime_type, filename=filename)
        return pb.ContentPart(document=document)
    if isinstance(source, FileSource):
        if source.provider not in (None, "openai"):
            unprocessable(
                f"{where}.source: a file handle of {source.provider!r} cannot be used here; "
                'the model is reached through an OpenAI-compatible API (provider "openai")'
            )
        document = pb.DocumentPart(
            file_id=source.value, mime_type=source.mime_type or "", filename=filename
        )
        return pb.ContentPart(document=document)
    unprocessable(
        f"{where}.source: a document cannot be sent by url; send it as data (base64) or as "
        'the provider\'s file id (source type "file")'
    )


def _parts(content: str | list[ContentPart], where: str) -> list[pb.ContentPart]:
    if isinstance(content, str):
        return [_text(content)]
    out: list[pb.ContentPart] = []
    for index, part in enumerate(content):
        at = f"{where}[{index}]"
        if isinstance(part, TextPart):
            out.append(_text(part.text))
        elif isinstance(part, ImagePart):
            out.append(_image(part, at))
        elif isinstance(part, DocumentPart):
            out.append(_document(part, at))
        else:
            unprocessable(
                f"{at}: {part.type} parts are not supported (text, image and document only)"
            )
    return out


def _plain(role: pb.Role.ValueType) -> Callable[[Any, str], pb.Message]:
    def convert(message: SystemMessage | DeveloperMessage, where: str) -> pb.Message:
        return pb.Message(role=role, content=[_text(message.content)])

    return convert


def _user(message: UserMessage, where: str) -> pb.Message:
    return pb.Message(role=pb.ROLE_USER, content=_parts(message.content, f"{where}.content"))


def _assistant(message: AssistantMessage, where: str) -> pb.Message:
    return pb.Message(
        role=pb.ROLE_ASSISTANT,
        content=[_text(message.content)] if message.content else [],
        tool_calls=[
            pb.ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
            for call in message.tool_calls or []
        ],
    )


def _tool(message: ToolMessage, where: str) -> pb.Message:
    content = _parts(message.content, f"{where}.content")
    if message.error and not any(p.text.text for p in content if p.HasField("text")):
        content = [_text(message.error)]
    return pb.Message(
        role=pb.ROLE_TOOL,
        content=content,
        tool_call_id=message.tool_call_id,
        status=pb.MESSAGE_STATUS_ERROR if message.error else pb.MESSAGE_STATUS_COMPLETE,
    )


_MESSAGE_TABLE: dict[str, Callable[[Any, str], pb.Message]] = {
    "user": _user,
    "assistant": _assistant,
    "system": _plain(pb.ROLE_SYSTEM),
    "developer": _plain(pb.ROLE_DEVELOPER),
    "tool": _tool,
}
"""AG-UI role → converter; roles without a row (activity, reasoning) are dropped."""


def _messages(messages: Sequence[Message]) -> list[pb.Message]:
    out: list[pb.Message] = []
    for index, message in enumerate(messages):
        convert = _MESSAGE_TABLE.get(message.role)
        if convert is None:
            continue
        converted = convert(message, f"messages[{index}]")
        converted.id = message.id
        name = getattr(message, "name", None)
        if name:
            converted.name = name
        if message.metadata is not None:
            json_format.ParseDict(message.metadata, converted.metadata)
        out.append(converted)
    return out


# -- the request ----------------------------------------------------------------------


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    json_format.ParseDict(value, out)
    return out


def _value(value: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    json_format.ParseDict(value, out)
    return out


_RESUME_STATUS: dict[str, pb.ResumeStatus.ValueType] = {
    "resolved": pb.RESUME_STATUS_RESOLVED,
    "cancelled": pb.RESUME_STATUS_CANCELLED,
}
"""AG-UI ``ResumeEntry.status`` → the engine's (the model admits no other value)."""


def _resume_entry(entry: ResumeEntry) -> pb.ResumeEntry:
    """One answer to a pending interrupt. ``payload`` travels as JSON (a ``null`` one counts
    as absent); ``metadata`` is the client's own and does not reach the engine."""
    out = pb.ResumeEntry(interrupt_id=entry.interrupt_id, status=_RESUME_STATUS[entry.status])
    if entry.payload is not None:
        out.payload.CopyFrom(_value(entry.payload))
    return out


def _tools(run_input: RunAgentInput) -> list[pb.Tool]:
    tools = []
    for index, tool in enumerate(run_input.tools or []):
        parameters = tool.parameters
        if parameters is not None and not isinstance(parameters, dict):
            unprocessable(f"tools[{index}].parameters must be a JSON Schema object")
        tools.append(
            pb.Tool(
                name=tool.name,
                description=tool.description,
                parameters=_struct(parameters or {}),
            )
        )
    return tools


def sends_state(run_input: RunAgentInput, options: RunOptions) -> bool:
    """Whether the input's ``state`` replaces the thread's.

    In append mode the server owns the thread, and ``{}`` (what a client with no state
    sends) keeps the stored state; in replace mode the client's state always wins.
    """
    state = run_input.state
    if options.replace:
        return state is not None
    return state is not None and state != {}


def run_request(
    run_input: RunAgentInput, options: RunOptions, *, cancel_on_disconnect: bool
) -> pb.RunRequest:
    """The engine's ``RunRequest`` for a validated input."""
    request = pb.RunRequest(
        session_id=run_input.thread_id,
        run_id=run_input.run_id,
        messages=_messages(run_input.messages),
        tools=_tools(run_input),
        context=[
            pb.ContextItem(description=item.description, value=item.value)
            for item in run_input.context or []
        ],
        forwarded_props=_struct(run_input.forwarded_props or {}),
        reconcile=pb.RECONCILE_MODE_REPLACE if options.replace else pb.RECONCILE_MODE_APPEND,
        create_session=True,
        cancel_on_disconnect=cancel_on_disconnect,
        parent_run_id=run_input.parent_run_id or "",
        messages_snapshot=options.messages_snapshot,
        resume=[_resume_entry(entry) for entry in run_input.resume or []],
    )
    if sends_state(run_input, options):
        request.state.CopyFrom(_value(run_input.state))
    return request
