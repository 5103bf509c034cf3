"""Pure conversions between A2A (the a2a-sdk's protobuf types) and the engine's runs.

A task is a chain of runs of the engine: its first run (whose id is the task's), then each
run that resumed the one before it after it stopped for a person (``resumed_by_run_id``);
its context is their session, its state the latest run's. A task's history is the runs'
user and assistant messages, with the agent's request for input of each run that was
answered; its artifacts are the assistant's text answers, one per assistant message, with
the message's id as the artifact id. :class:`RunStream` folds one run's engine events into
A2A stream responses: the task, WORKING, artifact updates as the text streams, then the
run's end state (INPUT_REQUIRED when it stopped for a person).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import ContentTypeNotSupportedError
from google.protobuf import struct_pb2, timestamp_pb2

from agentik.a2a.errors import invalid_params
from agentik.a2a.interrupts import data_value, input_required_message
from agentik.ids import ID_RULE, is_valid_id
from agentik.images import image_url_problem
from agentik.proto_json import json_value
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb

__all__ = [
    "ANSWER",
    "IMAGE_TYPES",
    "MAX_PARTS",
    "TASK_STATES",
    "RunStream",
    "answer_message",
    "check_message",
    "engine_content",
    "record_message",
    "task_from_run",
    "task_from_runs",
]

ANSWER = "answer"
"""The name of the artifacts that carry the agent's answer."""
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
"""Media types of ``raw`` and ``url`` parts passed on to the model as images."""
"""The engine's limit on ids (sessions, runs, messages)."""
MAX_PARTS = 100

TASK_STATES: dict[int, TaskState] = {
    pb.RUN_STATUS_RUNNING: TaskState.TASK_STATE_WORKING,
    pb.RUN_STATUS_SUCCEEDED: TaskState.TASK_STATE_COMPLETED,
    pb.RUN_STATUS_FAILED: TaskState.TASK_STATE_FAILED,
    pb.RUN_STATUS_INTERRUPTED: TaskState.TASK_STATE_CANCELED,
    pb.RUN_STATUS_INPUT_REQUIRED: TaskState.TASK_STATE_INPUT_REQUIRED,
}
"""Engine run status → A2A task state."""
_OUTCOME_STATES: dict[int, TaskState] = {
    pb.OUTCOME_TYPE_UNSPECIFIED: TaskState.TASK_STATE_COMPLETED,
    pb.OUTCOME_TYPE_SUCCESS: TaskState.TASK_STATE_COMPLETED,
    pb.OUTCOME_TYPE_CANCELLED: TaskState.TASK_STATE_CANCELED,
    pb.OUTCOME_TYPE_INTERRUPT: TaskState.TASK_STATE_INPUT_REQUIRED,
}


def _content_part(part: Part, where: str) -> pb.ContentPart:
    kind = part.WhichOneof("content")
    if kind == "text":
        return pb.ContentPart(text=pb.TextPart(text=part.text))
    if kind == "data":
        value = data_value(part, f"{where}.data")
        return pb.ContentPart(text=pb.TextPart(text=json.dumps(value, ensure_ascii=False)))
    if kind in ("raw", "url"):
        if part.media_type not in IMAGE_TYPES:
            accepted = ", ".join(sorted(IMAGE_TYPES))
            raise ContentTypeNotSupportedError(
                f"{where}: a {kind} part of type {part.media_type or '(none)'!r} is not "
                f"supported; send text, data, or an image ({accepted})",
                data={"field": where},
            )
        if kind == "raw":
            if not part.raw:  # the LLM would refuse it on this turn and every later one
                raise invalid_params(f"{where}.raw", "is empty: an image part needs its bytes")
            image = pb.ImagePart(data=part.raw, mime_type=part.media_type)
        else:
            problem = image_url_problem(part.url)
            if problem is not None:
                raise invalid_params(f"{where}.url", problem)
            image = pb.ImagePart(url=part.url, mime_type=part.media_type)
        return pb.ContentPart(image=image)
    raise invalid_params(where, "needs one of text, data, raw or url")


def check_message(message: Message) -> None:
    """Refuse a peer's message without an id, with malformed ids, not from the user, or
    without parts."""
    if not message.message_id:
        raise invalid_params("message.messageId", "is required")
    ids = (("messageId", message.message_id), ("contextId", message.context_id))
    for name, value in (*ids, ("taskId", message.task_id)):
        if value and not is_valid_id(value):
            raise invalid_params(f"message.{name}", f"is not a valid id: ids are {ID_RULE}")
    if message.role != Role.ROLE_USER:
        raise invalid_params("message.role", "must be ROLE_USER")
    if not message.parts:
        raise invalid_params("message.parts", "must not be empty")
    if len(message.parts) > MAX_PARTS:
        raise invalid_params("message.parts", f"has more than {MAX_PARTS} parts")


def engine_content(message: Message) -> list[pb.ContentPart]:
    """The content of the peer's message for the engine; refuses what it cannot take."""
    check_message(message)
    return [_content_part(part, f"message.parts[{i}]") for i, part in enumerate(message.parts)]


def _a2a_part(part: pb.ContentPart) -> Part:
    if part.WhichOneof("part") == "document":
        document = part.document
        if document.WhichOneof("source") == "data":
            return Part(
                raw=document.data, media_type=document.mime_type, filename=document.filename
            )
        return Part(text=f"[document: provider file {document.file_id}]")
    if part.WhichOneof("part") == "image":
        image = part.image
        if image.WhichOneof("source") == "data":
            return Part(raw=image.data, media_type=image.mime_type)
        return Part(url=image.url, media_type=image.mime_type)
    return Part(text=part.text.text)


def _a2a_message(message: pb.Message, task: Task) -> Message | None:
    """A stored user or assistant message as A2A; None for what A2A has no place for."""
    if message.role == pb.ROLE_USER:
        role = Role.ROLE_USER
    elif message.role == pb.ROLE_ASSISTANT:
        role = Role.ROLE_AGENT
    else:
        return None
    parts = [_a2a_part(p) for p in message.content if p.WhichOneof("part")]
    if not parts:
        return None  # an assistant message that only calls tools
    return Message(
        message_id=message.id,
        context_id=task.context_id,
        task_id=task.id,
        role=role,
        parts=parts,
    )


def record_message(task: Task, message: pb.Message) -> None:
    """Add a stored message to the task: its history and, for the answer, its artifacts."""
    if any(m.message_id == message.id for m in task.history):
        return
    converted = _a2a_message(message, task)
    if converted is None:
        return
    task.history.append(converted)
    text = "".join(p.text.text for p in message.content if p.WhichOneof("part") == "text")
    if converted.role == Role.ROLE_AGENT and text:
        task.artifacts.append(
            Artifact(artifact_id=message.id, name=ANSWER, parts=[Part(text=text)])
        )


def _failure(task: Task, code: str, text: str) -> Message:
    metadata = struct_pb2.Struct()
    metadata.update({"code": code or "internal"})
    return Message(
        message_id=f"{task.id}-error",
        context_id=task.context_id,
        task_id=task.id,
        role=Role.ROLE_AGENT,
        parts=[Part(text=text or "the task failed")],
        metadata=metadata,
    )


SUPERSEDED = "superseded"
"""The engine's ``CUSTOM`` event for an answer cut by a dead engine, asked again, and the
metadata key naming its artifact in the WORKING status update A2A clients get."""

USAGE = "usage"
"""The metadata key of the tokens a task used (the task's) or a run of it used (the final
status update's): ``inputTokens``, ``outputTokens``, ``totalTokens``, ``cachedTokens``."""


def _add_usage(metadata: struct_pb2.Struct, usage: pb.Usage) -> None:
    """Add ``usage`` to the tokens ``metadata`` holds under :data:`USAGE`."""
    held = json_value(metadata.fields[USAGE]) if USAGE in metadata.fields else {}
    counts = held if isinstance(held, dict) else {}
    added = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens,
        "cachedTokens": usage.cached_tokens,
    }
    metadata.update({USAGE: {k: int(counts.get(k, 0)) + v for k, v in added.items()}})


def task_from_runs(runs: Sequence[pb.RunInfo], messages: Sequence[Iterable[pb.Message]]) -> Task:
    """The task a chain of stored runs is (the first run's id, the latest run's state):
    history and answers of every run, ``messages`` holding each run's messages."""
    root, latest = runs[0], runs[-1]
    task = Task(id=root.id, context_id=root.session_id)
    for run, stored in zip(runs, messages, strict=True):
        for message in stored:
            record_message(task, message)
        if run is not latest and run.interrupts:  # answered by the next run
            task.history.append(input_required_message(task, run.id, run.interrupts))
        if run.HasField("usage"):
            _add_usage(task.metadata, run.usage)
    task.status.state = TASK_STATES.get(latest.status, TaskState.TASK_STATE_UNSPECIFIED)
    stamp = latest.end_time if latest.HasField("end_time") else latest.start_time
    task.status.timestamp.CopyFrom(stamp)
    if latest.status == pb.RUN_STATUS_FAILED:
        task.status.message.CopyFrom(_failure(task, latest.error_code, latest.error_message))
    elif latest.status == pb.RUN_STATUS_INPUT_REQUIRED:
        task.status.message.CopyFrom(input_required_message(task, latest.id, latest.interrupts))
    return task


def task_from_run(run: pb.RunInfo, messages: Iterable[pb.Message]) -> Task:
    """The task one stored run is: state, history and answer."""
    return task_from_runs([run], [messages])


class RunStream:
    """Folds one run's engine events into A2A stream responses, keeping the task current.

    The run is ``run_id``: the task's own first run, or a later run of the task that
    resumed it. Each text chunk becomes at once an artifact update of its message's answer
    artifact (the first creates it, the others append); when the message ends, an empty
    chunk carries ``lastChunk``.
    """

    def __init__(self, task: Task, run_id: str, *, announce: bool) -> None:
        self.task = task
        self.run_id = run_id
        self.done = False
        self._announce = announce
        self._artifact = ""
        self._started = False

    def _status(
        self, state: TaskState, stamp: timestamp_pb2.Timestamp, usage: pb.Usage | None = None
    ) -> StreamResponse:
        self.task.status.state = state
        self.task.status.timestamp.CopyFrom(stamp)
        if state == TaskState.TASK_STATE_WORKING:
            self.task.status.ClearField("message")
        update = TaskStatusUpdateEvent(task_id=self.task.id, context_id=self.task.context_id)
        update.status.CopyFrom(self.task.status)
        if usage is not None:  # the run's end: its tokens, and the task's so far
            _add_usage(update.metadata, usage)
            _add_usage(self.task.metadata, usage)
        return StreamResponse(status_update=update)

    def _superseded(self, event: pb.Event) -> StreamResponse:
        """The engine running the task died mid-answer, and another goes on: a WORKING
        status update whose message names the cut answer artifact (``superseded`` in its
        metadata); the new answer comes as a new artifact."""
        value = json_value(event.custom.value)
        cut = str(value.get("messageId", "")) if isinstance(value, dict) else ""
        reason = str(value.get("reason", "")) if isinstance(value, dict) else ""
        response = self._status(TaskState.TASK_STATE_WORKING, event.time)
        metadata = struct_pb2.Struct()
        metadata.update({SUPERSEDED: cut})
        note = Message(
            message_id=f"{cut}-{SUPERSEDED}",
            context_id=self.task.context_id,
            task_id=self.task.id,
            role=Role.ROLE_AGENT,
            parts=[Part(text=reason or "the answer was cut; it is asked again")],
            metadata=metadata,
        )
        response.status_update.status.message.CopyFrom(note)
        self._started = False
        return response

    def _chunk(self, text: str, *, last: bool) -> list[StreamResponse]:
        artifact = Artifact(artifact_id=self._artifact, name=ANSWER, parts=[Part(text=text)])
        update = TaskArtifactUpdateEvent(
            task_id=self.task.id,
            context_id=self.task.context_id,
            artifact=artifact,
            append=self._started,
            last_chunk=last,
        )
        self._started = True
        return [StreamResponse(artifact_update=update)]

    def feed(self, event: pb.Event) -> list[StreamResponse]:
        """The stream responses for one engine event (events of other runs give none)."""
        if event.run_id != self.run_id or self.done:
            return []
        kind = event.WhichOneof("kind")
        if kind == "run_started":
            if not self._announce:
                return []  # a subscriber's first response, the task, already says WORKING
            announced = StreamResponse(task=self.task)
            return [announced, self._status(TaskState.TASK_STATE_WORKING, event.time)]
        if kind == "text_message_start":
            self._artifact, self._started = event.text_message_start.message_id, False
        elif kind == "text_message_content" and event.text_message_content.delta:
            return self._chunk(event.text_message_content.delta, last=False)
        elif kind == "text_message_end" and self._started:
            return self._chunk("", last=True)
        elif kind == "message_stored":
            record_message(self.task, event.message_stored.message)
        elif kind == "custom" and event.custom.name == "compacted":
            # The conversation's oldest part was summarised or trimmed for the LLM
            # (docs/conversations.md): a status update whose metadata says so.
            update = TaskStatusUpdateEvent(task_id=self.task.id, context_id=self.task.context_id)
            update.status.CopyFrom(self.task.status)
            update.metadata.update({"agentik_compacted": json_value(event.custom.value)})
            return [StreamResponse(status_update=update)]
        elif kind == "custom" and event.custom.name == SUPERSEDED:
            return [self._superseded(event)]
        elif kind == "run_finished":
            self.done = True
            finished = event.run_finished
            state = _OUTCOME_STATES.get(finished.outcome, TaskState.TASK_STATE_COMPLETED)
            if state == TaskState.TASK_STATE_INPUT_REQUIRED:
                asked = input_required_message(self.task, self.run_id, finished.interrupts)
                self.task.status.message.CopyFrom(asked)
            usage = finished.usage if finished.HasField("usage") else None
            return [self._status(state, event.time, usage)]
        elif kind == "run_error":
            self.done = True
            error = event.run_error
            self.task.status.message.CopyFrom(_failure(self.task, error.code, error.message))
            usage = error.usage if error.HasField("usage") else None
            return [self._status(TaskState.TASK_STATE_FAILED, event.time, usage)]
        return []


def answer_message(task: Task) -> Message | None:
    """The task's answer as one agent message (the artifacts' parts), or None without one."""
    if not task.artifacts:
        return None
    return Message(
        message_id=task.artifacts[-1].artifact_id,
        context_id=task.context_id,
        task_id=task.id,
        role=Role.ROLE_AGENT,
        parts=[part for artifact in task.artifacts for part in artifact.parts],
    )
