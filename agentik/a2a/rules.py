"""What every A2A binding checks and bounds alike, on the engine's messages.

The sizes of a page of tasks, the task id rule, the task one ``RunChain`` is, the state a
run leaves its task in, and the push config as A2A shows it.
"""

from __future__ import annotations

from typing import Final

from a2a.types import AuthenticationInfo, Task, TaskPushNotificationConfig, TaskState

from agentik.a2a.convert import task_from_run, task_from_runs
from agentik.a2a.errors import invalid_params
from agentik.ids import ID_RULE, is_valid_id
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb

__all__ = [
    "CANCEL_WAIT",
    "DEFAULT_PAGE_SIZE",
    "FIRST_WINDOW",
    "LISTED_MESSAGES",
    "MAX_PAGE_SIZE",
    "MAX_TURNS",
    "TEXT_MODES",
    "a2a_push_config",
    "check_task_id",
    "engine_push_config",
    "state_name",
    "state_of",
    "task_of_chain",
]

DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 100
"""The spec's bounds on ``ListTasks.pageSize``."""
CANCEL_WAIT: Final = 10.0
"""Seconds a cancel waits for the run it interrupted to end."""
FIRST_WINDOW: Final = 64
"""Events looked back at first when a subscriber searches a live run's first event."""
TEXT_MODES: Final = frozenset({"text/plain", "text/*", "*/*", "text"})
"""``acceptedOutputModes`` values our text answers satisfy."""
LISTED_MESSAGES: Final = 100
"""Most of a task's latest stored messages ListTasks shows (GetTask shows them all)."""
ID_SHOWN: Final = 40
"""Characters of a refused id an error shows."""
MAX_TURNS: Final = 1000
"""Most runs followed in one task's chain (a bound on a walk through stored links)."""


def check_task_id(task_id: str) -> None:
    """Refuse a task id the engine's id rule refuses, before any engine call; the refusal
    shows only a short prefix of it (a 900 KB id must not come back as a 900 KB error)."""
    if not task_id:
        raise invalid_params("id", "is required")
    if not is_valid_id(task_id):
        shown = repr(task_id[:ID_SHOWN]) + ("…" if len(task_id) > ID_SHOWN else "")
        raise invalid_params("id", f"{shown} is not a valid task id: ids are {ID_RULE}")


def task_of_chain(chain: pb.RunChain) -> Task:
    """The task one chain of runs is, from the latest messages the engine gave."""
    by_run: dict[str, list[pb.Message]] = {run.id: [] for run in chain.runs}
    for message in chain.messages:
        by_run.setdefault(message.run_id, []).append(message)
    return task_from_runs(chain.runs, [by_run[run.id] for run in chain.runs])


def state_name(state: int) -> str:
    """``TASK_STATE_INPUT_REQUIRED`` → ``input_required``."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def state_of(run: pb.RunInfo) -> str:
    """The state (as :func:`state_name` words it) the run leaves its task in."""
    return state_name(task_from_run(run, ()).status.state)


def a2a_push_config(config: pb.PushConfig) -> TaskPushNotificationConfig:
    """The engine's push config as A2A shows it."""
    out = TaskPushNotificationConfig(
        id=config.id, task_id=config.task_id, url=config.url, token=config.token
    )
    if config.auth_scheme:
        out.authentication.CopyFrom(
            AuthenticationInfo(scheme=config.auth_scheme, credentials=config.auth_credentials)
        )
    return out


def engine_push_config(config: TaskPushNotificationConfig, task_id: str) -> pb.PushConfig:
    """A2A's push config of task ``task_id`` for the engine."""
    return pb.PushConfig(
        id=config.id,
        task_id=task_id,
        url=config.url,
        token=config.token,
        auth_scheme=config.authentication.scheme,
        auth_credentials=config.authentication.credentials,
    )
