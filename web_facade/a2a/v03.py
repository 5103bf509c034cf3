"""The A2A 0.3 dialect: 0.3 params in, 0.3 shapes out, over the same task operations.

Params are read with the SDK's 0.3 models and turned into the 1.0 protobuf requests;
results go back through the SDK's compat conversions, so a 0.3 peer sees ``kind`` fields,
lowercase states and ``final`` on status updates. As the seed's ``message/send`` did, a
blocking ``message/send`` whose task completed answers with one agent message holding
the answer; a task that failed, was canceled or still runs is answered as the task.
"""

from __future__ import annotations

from typing import Any, TypeVar

from a2a.compat.v0_3 import conversions
from a2a.compat.v0_3 import types as v03
from a2a.types import SendMessageRequest, StreamResponse, Task, TaskState
from pydantic import BaseModel, ValidationError

from agentik.a2a.convert import answer_message
from web_facade.a2a.errors import invalid_params

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


def _validated(model: type[M], params: dict[str, Any]) -> M:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise invalid_params(_field(tuple(first["loc"])), first["msg"]) from None


def _dump(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def send_request(params: dict[str, Any]) -> SendMessageRequest:
    """``message/send`` and ``message/stream`` params as a 1.0 SendMessageRequest."""
    sent = _validated(v03.MessageSendParams, params)
    request = SendMessageRequest(message=conversions.to_core_message(sent.message))
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
