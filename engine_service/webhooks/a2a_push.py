"""A2A push notifications: each update of a task with push configs goes to the outbox (the
updates of a run's end stored with the end, ``core.run_webhooks``).

A task is a run and the runs that resumed it (web_facade/a2a/tasks.py); its id is the
first run's. When one of its runs starts, the task is WORKING; when it ends, its answer
(the run's last assistant message) is an artifact update, and the task's new state a status
update: COMPLETED, INPUT_REQUIRED, CANCELED or FAILED. Each update is one delivery per
config, in the spec's StreamResponse shape (``{"statusUpdate": {...}}`` or
``{"artifactUpdate": {...}}``, ProtoJSON), with the config's ``token`` as
``X-A2A-Notification-Token`` and its ``authentication`` as ``Authorization``. The delivery
id (the ``webhook-id`` header) is the same on every attempt.
"""

from __future__ import annotations

import hashlib
import json

from a2a.types import (
    Artifact,
    Part,
    StreamResponse,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf import json_format

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery, PushConfig
from engine_service.core.models import Role, message_text
from engine_service.core.run_webhooks import RunNotice, incarnation_of
from engine_service.core.store import SessionStore

__all__ = ["TOKEN_HEADER", "A2aPush", "push_updates"]

TOKEN_HEADER = "X-A2A-Notification-Token"
ANSWER = "answer"
"""The artifacts' name, as the A2A facade names them."""

_STATE_OF_OUTCOME = {
    ev.Outcome.SUCCESS: TaskState.TASK_STATE_COMPLETED,
    ev.Outcome.INTERRUPT: TaskState.TASK_STATE_INPUT_REQUIRED,
    ev.Outcome.CANCELLED: TaskState.TASK_STATE_CANCELED,
}


def push_updates(task_id: str, notice: RunNotice) -> list[StreamResponse]:
    """The task's updates a run's start or end makes."""
    context_id = notice.session_id
    status = TaskStatus()
    status.timestamp.FromDatetime(notice.time)
    if notice.started:
        status.state = TaskState.TASK_STATE_WORKING
        update = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
        return [StreamResponse(status_update=update)]
    updates: list[StreamResponse] = []
    answer = next(
        (
            m
            for m in reversed(notice.messages)
            if m.role is Role.ASSISTANT and m.run_id == notice.run_id and message_text(m)
        ),
        None,
    )
    if answer is not None:
        artifact = Artifact(
            artifact_id=answer.id, name=ANSWER, parts=[Part(text=message_text(answer))]
        )
        updates.append(
            StreamResponse(
                artifact_update=TaskArtifactUpdateEvent(
                    task_id=task_id, context_id=context_id, artifact=artifact, last_chunk=True
                )
            )
        )
    final = notice.final
    if isinstance(final, ev.RunFinished):
        status.state = _STATE_OF_OUTCOME.get(final.outcome, TaskState.TASK_STATE_COMPLETED)
    else:
        status.state = TaskState.TASK_STATE_FAILED
    update = TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
    updates.append(StreamResponse(status_update=update))
    return updates


def _headers(config: PushConfig) -> dict[str, str]:
    headers: dict[str, str] = {}
    if config.token:
        headers[TOKEN_HEADER] = config.token
    if config.auth_scheme:
        credentials = f" {config.auth_credentials}" if config.auth_credentials else ""
        headers["Authorization"] = config.auth_scheme + credentials
    return headers


def _delivery_id(config: PushConfig, notice: RunNotice, phase: str, index: int) -> str:
    """The same on every attempt; another for a run under the same id in a conversation
    made after this one was deleted (``incarnation_of``)."""
    run = incarnation_of(notice.session_key, notice.run_id)
    key = "\0".join((config.task_id, config.id, notice.run_id, run, phase, str(index)))
    return "push_" + hashlib.sha256(key.encode()).hexdigest()[:32]


class A2aPush:
    """A pusher (``core.run_webhooks``): the updates of a run's task for its push configs."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def _task_of(self, notice: RunNotice) -> str:
        """The task's id: the first run of the chain the notice's run is in, by the links
        the store holds (``RunRecord.resumed_by``). ``notice.resumes`` names the run it
        resumed when the engine that runs it knows (the store links the two only once the
        run carries out the answers); the end of a run another engine resumed or closed
        does not know it, and finds it in the store."""
        if notice.started and not notice.resumes:
            return notice.run_id  # a new run: nothing links to it yet
        runs = await self.store.list_runs(notice.session_id)
        resumed = {r.resumed_by: r.id for r in runs if r.resumed_by}
        task, seen = notice.resumes or notice.run_id, {notice.run_id}
        while task in resumed and resumed[task] not in seen:
            task = resumed[task]
            seen.add(task)
        return task

    async def __call__(self, notice: RunNotice) -> list[Delivery]:
        """One delivery per update and config (none for a task without configs)."""
        configs = await self.store.session_push_configs(notice.session_id)
        if not configs:
            return []  # most sessions: one indexed read per run start and end
        task_id = await self._task_of(notice)
        configs = [c for c in configs if c.task_id == task_id]
        if not configs:
            return []
        phase = "start" if notice.started else "end"
        bodies = [
            json.dumps(json_format.MessageToDict(update), separators=(",", ":"))
            for update in push_updates(task_id, notice)
        ]
        return [
            Delivery(
                _delivery_id(config, notice, phase, index),
                config.url,
                body,
                notice.time,
                notice.time,
                headers=_headers(config),
                kind="a2a",
                session_id=notice.session_id,
            )
            for config in configs
            for index, body in enumerate(bodies)
        ]
