"""The A2A 0.3 dialect: 0.3 params in, 0.3 shapes out, over the same task operations.

Params are read with the SDK's 0.3 models and turned into the 1.0 protobuf requests;
results go back through the SDK's compat conversions, so a 0.3 peer sees ``kind`` fields,
lowercase states and ``final`` on status updates. As the seed's ``message/send`` did, a
blocking ``message/send`` whose task completed answers with one agent message holding
the answer; a task that failed, was canceled or still runs is answered as the task.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, TypeVar

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as v03
from a2a.types import SendMessageRequest, StreamResponse, Task, TaskState
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from agentik.a2a.convert import answer_message
from agentik.images import image_url_problem
from web_facade.a2a.errors import invalid_params
from web_facade.proto_json import whole_numbers

__all__ = ["send_request", "send_result", "stream_json", "task_id", "task_json", "task_query"]

M = TypeVar("M", bound=BaseModel)

_WAITING = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


def _field(location: tuple[int | str, ...]) -> str:
    """``('message', 'parts', 0, 'TextPart', 'text')`` → ``message.parts[0].text``."""
    out = ""
    for step in location:
        if isinstance(step, int):
            out += f"[{step}]"
        elif not step[:1].isupper():  # union member names (TextPart) are not fields
            out += f".{step}" if out else step
    return out or "params"


_WORDS: dict[str, str] = {
    "missing": "is required",
    "model_type": "must be an object",
    "dict_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be a list",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
}
"""pydantic's error types in the words the 1.0 dialect uses (``web_facade.a2a.params``);
others keep pydantic's message."""


def _union_member(location: tuple[int | str, ...]) -> tuple[int | str, ...] | None:
    """The location up to the last union member in it (``(..., 0, 'TextPart')``)."""
    for index in range(len(location) - 1, -1, -1):
        step = location[index]
        if isinstance(step, str) and step[:1].isupper():
            return location[: index + 1]
    return None


def _reported(errors: list[ErrorDetails]) -> tuple[str, str]:
    """The field and problem to report of pydantic's errors. For a union (a part is a
    TextPart, FilePart or DataPart) pydantic reports every member's errors; a member whose
    ``kind`` is not the one sent is not what the peer meant, so its errors are dropped;
    when no member's ``kind`` matches, the ``kind`` is what is wrong."""
    mismatched = [
        error
        for error in errors
        if error["type"] == "literal_error"
        and error["loc"][-1:] == ("kind",)
        and _union_member(tuple(error["loc"])) == tuple(error["loc"][:-1])
    ]
    members = [tuple(error["loc"][:-1]) for error in mismatched]
    kept = [
        error
        for error in errors
        if not any(tuple(error["loc"][: len(member)]) == member for member in members)
    ]
    if not kept:  # every member's kind differs from the one sent
        expected = ", ".join(str(error.get("ctx", {}).get("expected", "")) for error in mismatched)
        return _field(tuple(mismatched[0]["loc"])), f"must be one of {expected}"
    first = kept[0]
    return _field(tuple(first["loc"])), _WORDS.get(first["type"], first["msg"])


def _validated(model: type[M], params: dict[str, Any]) -> M:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        field, problem = _reported(exc.errors())
        raise invalid_params(field, problem) from None


def _dump(model: BaseModel) -> dict[str, Any]:
    """The model as 0.3 JSON, whole numbers as integers (metadata's usage, from a Struct)."""
    out: dict[str, Any] = whole_numbers(
        model.model_dump(mode="json", by_alias=True, exclude_none=True)
    )
    return out


def _check_files(message: v03.Message) -> None:
    """Refuse file parts the SDK's conversion would take wrongly: bytes that are not
    strict base64 (its lenient decoding makes ``"!!!"`` an empty image, and fails with an
    uncaught error on a missing padding), no bytes at all, or a URI the LLM may not be
    sent (``file:``): each named as the 0.3 peer sent it."""
    for index, part in enumerate(message.parts):
        file = part.root.file if isinstance(part.root, v03.FilePart) else None
        where = f"message.parts[{index}].file"
        if isinstance(file, v03.FileWithBytes):
            try:
                data = base64.b64decode(file.bytes, validate=True)
            except (binascii.Error, ValueError):
                raise invalid_params(
                    f"{where}.bytes", "is not valid base64 (standard alphabet, padded with =)"
                ) from None
            if not data:
                raise invalid_params(f"{where}.bytes", "is empty: a file part needs its bytes")
        elif isinstance(file, v03.FileWithUri):
            problem = image_url_problem(file.uri)
            if problem is not None:
                raise invalid_params(f"{where}.uri", problem)


def _check_file_forms(params: dict[str, Any]) -> None:
    """Refuse a file that holds both ``bytes`` and ``uri``: the SDK's model would take the
    bytes and drop the URI without a word (0.3's file is one or the other, and 1.0 refuses
    a part with both ``raw`` and ``url``)."""
    message = params.get("message")
    parts = message.get("parts") if isinstance(message, dict) else None
    for index, part in enumerate(parts if isinstance(parts, list) else []):
        file = part.get("file") if isinstance(part, dict) else None
        if isinstance(file, dict) and "bytes" in file and "uri" in file:
            raise invalid_params(
                f"message.parts[{index}].file", "holds both bytes and uri; send one of them"
            )


def send_request(params: dict[str, Any]) -> SendMessageRequest:
    """``message/send`` and ``message/stream`` params as a 1.0 SendMessageRequest."""
    _check_file_forms(params)
    sent = _validated(v03.MessageSendParams, params)
    _check_files(sent.message)
    try:
        message = conversions.to_core_message(sent.message)
    except (binascii.Error, ValueError):  # what _check_files did not foresee
        raise invalid_params("message.parts", "hold a part A2A 1.0 cannot carry") from None
    request = SendMessageRequest(message=message)
    if sent.configuration is not None:
        request.configuration.CopyFrom(
            conversions.to_core_send_message_configuration(sent.configuration)
        )
    return request


def task_query(params: dict[str, Any]) -> tuple[str, int | None]:
    """``tasks/get`` params: the task id and how much history (0.3: 0 means all)."""
    query = _validated(v03.TaskQueryParams, params)
    return query.id, query.history_length or None


def task_id(params: dict[str, Any]) -> str:
    """``tasks/cancel`` and ``tasks/resubscribe`` params: the task id."""
    return _validated(v03.TaskIdParams, params).id


def task_json(task: Task) -> dict[str, Any]:
    """A task in 0.3 shape."""
    return _dump(conversions.to_compat_task(task))


def send_result(task: Task) -> dict[str, Any]:
    """The ``message/send`` result: the answer as one agent message, else the task."""
    answer = answer_message(task)
    if task.status.state == TaskState.TASK_STATE_COMPLETED and answer is not None:
        return _dump(conversions.to_compat_message(answer))
    return task_json(task)


def stream_json(response: StreamResponse) -> dict[str, Any]:
    """One ``message/stream`` result in 0.3 shape. A status update that waits for input
    is ``final`` as in 0.3 (the stream ends there; the SDK marks only terminal states)."""
    out = _dump(conversions.to_compat_stream_response(response).result)
    if response.status_update.status.state in _WAITING:
        out["final"] = True
    return out
