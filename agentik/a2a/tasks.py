"""The transport-free steps of A2A's task methods, shared by both bindings.

The facade's task service (``web_facade/a2a/tasks.py``, over the engine's gRPC stubs) and
the engine's own (``engine_service/a2a/tasks.py``, over the core ``Engine``, async) differ
only in how they reach the engine. What they check, how they read a request and how they
build an answer from the engine's runs and messages lives here, once: each function takes
what the engine gave and either answers or raises an ``A2AError``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from a2a.types import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    TaskNotCancelableError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length

from agentik.a2a.convert import task_from_runs
from agentik.a2a.errors import invalid_params
from agentik.a2a.interrupts import resume_entries
from agentik.a2a.rules import (
    DEFAULT_PAGE_SIZE,
    LISTED_MESSAGES,
    MAX_PAGE_SIZE,
    TEXT_MODES,
    engine_push_config,
    state_name,
    state_of,
    task_of_chain,
)
from agentik.ids import ID_RULE, is_valid_id
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb

__all__ = [
    "ARTIFACTS_CLIPPED",
    "HISTORY_CLIPPED",
    "ListPage",
    "answered",
    "check_cancelable",
    "check_canceled",
    "check_history_length",
    "check_send",
    "check_subscribable",
    "fit_task",
    "list_page",
    "list_response",
    "new_task",
    "push_config",
    "reply_task",
    "subscribe_snapshot",
    "trim_history",
    "waiting_refusal",
    "waits",
]


# -- reading --------------------------------------------------------------------


def check_history_length(history_length: int | None, field: str = "historyLength") -> None:
    """Refuse a negative ``historyLength``."""
    if history_length is not None and history_length < 0:
        raise invalid_params(field, "must not be negative")


def trim_history(task: Task, history_length: int | None) -> Task:
    """``task`` with only its last ``history_length`` messages (None: all of them)."""
    if history_length is not None and len(task.history) > history_length:
        del task.history[: len(task.history) - history_length]
    return task


HISTORY_CLIPPED = "agentik_history_clipped"
"""The task metadata key of how many of its oldest history messages :func:`fit_task` left
out; ``agentik_artifacts_clipped`` counts its artifacts left out."""
ARTIFACTS_CLIPPED = "agentik_artifacts_clipped"

_TAG = 1
"""Bytes a repeated message field adds to its item's own size, at least (its tag; the
length adds more): what is left is never counted smaller than it is."""


def fit_task(task: Task, budget: int) -> Task:
    """``task`` at most ``budget`` bytes as protobuf (one gRPC message): its oldest history
    messages left out first (with the answer artifact each agent message carries, but the
    task's latest answer), then its oldest artifacts, until the rest fits. The metadata
    counts what was left out (:data:`HISTORY_CLIPPED`, :data:`ARTIFACTS_CLIPPED`: a few
    bytes more, which ``budget`` must leave room for). Whole when it fits."""
    size = task.ByteSize()
    if size <= budget:
        return task
    history = [m.ByteSize() + _TAG for m in task.history]
    artifacts = {a.artifact_id: a.ByteSize() + _TAG for a in task.artifacts}
    latest = task.artifacts[-1].artifact_id if task.artifacts else ""
    dropped_history = 0
    dropped_artifacts: set[str] = set()
    # Leave out from the oldest until what is left fits, each item's size counted once.
    while size > budget and dropped_history < len(history):
        message = task.history[dropped_history]
        size -= history[dropped_history]
        dropped_history += 1
        answer = message.message_id
        if answer in artifacts and answer != latest and answer not in dropped_artifacts:
            dropped_artifacts.add(answer)
            size -= artifacts[answer]
    kept_artifacts = [a for a in task.artifacts if a.artifact_id not in dropped_artifacts]
    while size > budget and kept_artifacts:
        size -= artifacts[kept_artifacts[0].artifact_id]
        dropped_artifacts.add(kept_artifacts.pop(0).artifact_id)
    del task.history[:dropped_history]
    for index in reversed(range(len(task.artifacts))):
        if task.artifacts[index].artifact_id in dropped_artifacts:
            del task.artifacts[index]
    clipped = {HISTORY_CLIPPED: dropped_history}
    if dropped_artifacts:
        clipped[ARTIFACTS_CLIPPED] = len(dropped_artifacts)
    task.metadata.update(clipped)
    return task


@dataclass(frozen=True)
class ListPage:
    """What a checked ListTasks request asks the engine for."""

    size: int
    """Runs on the page."""
    offset: int
    """Runs before the page (from the page token)."""
    last_messages: int
    """Most of each task's latest messages to read (0: none are shown)."""


def list_page(request: ListTasksRequest) -> ListPage:
    """Check a ListTasks request; the page of run chains it asks for."""
    if request.status or request.HasField("status_timestamp_after"):
        raise UnsupportedOperationError(
            "ListTasks cannot filter by status or statusTimestampAfter yet; "
            "list by contextId and filter on the client"
        )
    if request.context_id and not is_valid_id(request.context_id):
        raise invalid_params("contextId", f"is not a valid context id: ids are {ID_RULE}")
    size = request.page_size if request.HasField("page_size") else DEFAULT_PAGE_SIZE
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise invalid_params("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
    if request.HasField("history_length") and request.history_length < 0:
        raise invalid_params("historyLength", "must not be negative")
    token = request.page_token
    if token and (not token.isascii() or not token.isdigit() or len(token) > 9):
        raise invalid_params("pageToken", "is not a token this server gave")
    with_messages = (
        request.include_artifacts
        or not request.HasField("history_length")
        or request.history_length > 0
    )
    return ListPage(
        size=size,
        offset=int(token or "0"),
        last_messages=LISTED_MESSAGES if with_messages else 0,
    )


def list_response(
    request: ListTasksRequest,
    page: ListPage,
    chains: Iterable[pb.RunChain],
    total: int,
    runs_read: int,
) -> ListTasksResponse:
    """The ListTasks answer for the engine's page of run chains."""
    tasks = []
    for chain in chains:
        task = apply_history_length(task_of_chain(chain), request)
        if not request.include_artifacts:
            task.ClearField("artifacts")
        tasks.append(task)
    # A page too big for one answer covers fewer runs: the next one starts after them.
    # (0 from an engine that predates runs_read.)
    end = page.offset + (runs_read or page.size)
    return ListTasksResponse(
        tasks=tasks,
        next_page_token=str(end) if end < total else "",
        page_size=page.size,
        total_size=total,
    )


# -- sending --------------------------------------------------------------------


def check_send(request: SendMessageRequest) -> None:
    """Refuse a SendMessage request no task could come of."""
    if not request.HasField("message"):
        raise invalid_params("message", "is required")
    config = request.configuration
    if config.HasField("history_length"):
        check_history_length(config.history_length, "configuration.historyLength")
    accepted = set(config.accepted_output_modes)
    if accepted and not accepted & TEXT_MODES:
        raise ContentTypeNotSupportedError(
            f"this agent answers in text/plain only; acceptedOutputModes has {sorted(accepted)}"
        )


def push_config(request: SendMessageRequest, run_request: pb.RunRequest, task: Task) -> None:
    """Add the request's push config of the task to the run to start (the engine sets it
    as the run begins: nothing of the task is pushed before)."""
    config = request.configuration
    if config.HasField("task_push_notification_config"):
        push = config.task_push_notification_config
        run_request.push_configs.append(engine_push_config(push, task.id))


def new_task(
    message: Message, content: Sequence[pb.ContentPart], context_id: str, agent: str
) -> tuple[pb.RunRequest, Task]:
    """A message that starts a task in context ``context_id`` ("" for a new one, which the
    engine creates), ``content`` its content for the engine (``engine_content``, checked
    before the context is): the run to start and the task it makes."""
    if not context_id:
        context_id = uuid.uuid4().hex
    task = Task(id=uuid.uuid4().hex, context_id=context_id)
    task.status.state = TaskState.TASK_STATE_SUBMITTED
    sent = Message()
    sent.CopyFrom(message)
    sent.context_id, sent.task_id = task.context_id, task.id
    task.history.append(sent)
    run_request = pb.RunRequest(
        session_id=context_id,
        run_id=task.id,
        messages=[pb.Message(id=message.message_id, role=pb.ROLE_USER, content=content)],
        create_session=True,
        agent=agent,
        # A task outlives the call that started it (GetTask, SubscribeToTask).
        cancel_on_disconnect=False,
    )
    return run_request, task


def reply_task(message: Message, runs: Sequence[pb.RunInfo]) -> pb.RunRequest:
    """Check a message on the task whose runs are ``runs``: it must answer what the task
    waits for. The run that resumes its latest run with the answer."""
    root, latest = runs[0], runs[-1]
    if message.context_id and message.context_id != root.session_id:
        raise invalid_params(
            "message.contextId",
            f"{message.context_id!r} is not the context of task {root.id!r}",
        )
    if latest.status != pb.RUN_STATUS_INPUT_REQUIRED or latest.resumed_by_run_id:
        if latest.status == pb.RUN_STATUS_RUNNING:
            raise UnsupportedOperationError(
                f"task {root.id!r} is working and takes no message until it waits for "
                "input or ends; follow it with SubscribeToTask",
                data={"contextId": root.session_id},
            )
        raise UnsupportedOperationError(
            f"task {root.id!r} is {state_of(latest)} and takes no more messages; "
            f"to go on, send a message with contextId {root.session_id!r} and no taskId",
            data={"contextId": root.session_id},
        )
    return pb.RunRequest(
        session_id=root.session_id,
        run_id=uuid.uuid4().hex,
        parent_run_id=latest.id,
        resume=resume_entries(message, latest.interrupts),
        cancel_on_disconnect=False,
    )


def answered(task: Task) -> Task:
    """The task once its request for input is answered: the request moves from the status
    to the history, and the task is submitted again."""
    task.history.append(task.status.message)
    task.status.ClearField("message")
    task.status.state = TaskState.TASK_STATE_SUBMITTED
    return task


def waiting_refusal(context_id: str, waiting: str) -> A2AError:
    """The error for a new task in a context that waits for an answer on task ``waiting``."""
    return invalid_params(
        "message.taskId",
        f"context {context_id!r} waits for an answer on task "
        f"{waiting!r}: send your reply as a message with taskId {waiting!r} "
        "(see its status message)",
    )


# -- cancel and subscribe -------------------------------------------------------


def waits(run: pb.RunInfo) -> bool:
    """Whether ``run``, the latest of its task, waits for a person's answer."""
    return run.status == pb.RUN_STATUS_INPUT_REQUIRED and not run.resumed_by_run_id


def check_cancelable(task_id: str, latest: pb.RunInfo) -> bool:
    """Refuse to cancel a task that ended; whether it waits for input (else it runs)."""
    waiting = waits(latest)
    if latest.status != pb.RUN_STATUS_RUNNING and not waiting:
        raise TaskNotCancelableError(f"task {task_id!r} is already {state_of(latest)}")
    return waiting


def check_canceled(task_id: str, task: Task) -> Task:
    """The canceled task; TaskNotCancelable when it ended otherwise before it stopped."""
    if task.status.state != TaskState.TASK_STATE_CANCELED:
        state = state_name(task.status.state)
        raise TaskNotCancelableError(f"task {task_id!r} ended as {state} before it stopped")
    return task


def check_subscribable(task_id: str, latest: pb.RunInfo) -> bool:
    """Refuse to follow a task that ended; whether it waits for input (else it runs)."""
    if waits(latest):
        return True
    if latest.status != pb.RUN_STATUS_RUNNING:
        raise UnsupportedOperationError(
            f"task {task_id!r} is {state_of(latest)}: nothing more will happen; use GetTask"
        )
    return False


def subscribe_snapshot(
    runs: Sequence[pb.RunInfo], messages: Sequence[Sequence[pb.Message]]
) -> Task:
    """The task a subscriber is shown first: without the running run's answers, which
    come again, whole, from the replay of its events."""
    snapshot = task_from_runs(runs, messages)
    replayed_ids = {message.id for message in messages[-1]}
    kept = [a for a in snapshot.artifacts if a.artifact_id not in replayed_ids]
    del snapshot.artifacts[:]
    snapshot.artifacts.extend(kept)
    return snapshot
