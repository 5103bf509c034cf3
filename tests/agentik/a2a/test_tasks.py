"""The transport-free steps both A2A task services share (``agentik.a2a.tasks``); the services
themselves are tested through the facade (tests/web/a2a) and the gRPC binding
(tests/engine/test_a2a_grpc.py)."""

from __future__ import annotations

import pytest
from a2a.types import (
    Artifact,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    UnsupportedOperationError,
)

from agentik.a2a import tasks as steps
from agentik.a2a.rules import DEFAULT_PAGE_SIZE, LISTED_MESSAGES, MAX_PAGE_SIZE
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb


def test_a_list_request_is_read_into_a_page() -> None:
    page = steps.list_page(ListTasksRequest(page_token="120", page_size=7))
    assert page == steps.ListPage(size=7, offset=120, last_messages=LISTED_MESSAGES)
    default = steps.list_page(ListTasksRequest(history_length=0))
    assert default == steps.ListPage(size=DEFAULT_PAGE_SIZE, offset=0, last_messages=0)


@pytest.mark.parametrize(
    ("request_", "named"),
    [
        (ListTasksRequest(page_token="x1"), "pageToken"),
        (ListTasksRequest(page_token="1234567890"), "pageToken"),
        (ListTasksRequest(page_token="١٢"), "pageToken"),  # digits, but not ASCII ones
        (ListTasksRequest(page_size=0), "pageSize"),
        (ListTasksRequest(page_size=MAX_PAGE_SIZE + 1), "pageSize"),
        (ListTasksRequest(history_length=-1), "historyLength"),
    ],
)
def test_a_bad_list_request_is_refused_naming_its_field(
    request_: ListTasksRequest, named: str
) -> None:
    with pytest.raises(InvalidParamsError, match=named):
        steps.list_page(request_)


def test_the_next_page_token_follows_the_runs_read() -> None:
    request = ListTasksRequest(page_size=2)
    page = steps.list_page(request)
    chain = pb.RunChain(runs=[pb.RunInfo(id="r1", session_id="s", status=pb.RUN_STATUS_RUNNING)])
    answer = steps.list_response(request, page, [chain], total=5, runs_read=3)
    assert [t.id for t in answer.tasks] == ["r1"]
    assert answer.next_page_token == "3"
    assert not answer.tasks[0].artifacts
    last = steps.list_response(request, page, [], total=2, runs_read=0)
    assert last.next_page_token == ""  # no runs_read: the page's size was read


def test_history_is_trimmed_to_its_last_messages() -> None:
    task = Task(id="t", history=[Message(message_id=str(i)) for i in range(4)])
    assert [m.message_id for m in steps.trim_history(task, 2).history] == ["2", "3"]
    assert len(steps.trim_history(task, None).history) == 2
    with pytest.raises(InvalidParamsError, match="historyLength"):
        steps.check_history_length(-1)


def test_a_send_request_is_checked_before_any_engine_call() -> None:
    with pytest.raises(InvalidParamsError, match="message"):
        steps.check_send(SendMessageRequest())
    request = SendMessageRequest(message=Message(message_id="m", parts=[Part(text="hi")]))
    request.configuration.accepted_output_modes.append("image/png")
    with pytest.raises(ContentTypeNotSupportedError):
        steps.check_send(request)


def test_a_reply_resumes_only_a_task_that_waits() -> None:
    message = Message(message_id="m", task_id="t", parts=[Part(text="yes")])
    running = pb.RunInfo(id="t", session_id="s", status=pb.RUN_STATUS_RUNNING)
    with pytest.raises(UnsupportedOperationError, match="is working"):
        steps.reply_task(message, [running])
    done = pb.RunInfo(id="t", session_id="s", status=pb.RUN_STATUS_SUCCEEDED)
    with pytest.raises(UnsupportedOperationError, match="completed"):
        steps.reply_task(message, [done])
    elsewhere = Message(message_id="m", task_id="t", context_id="other")
    with pytest.raises(InvalidParamsError, match="contextId"):
        steps.reply_task(elsewhere, [running])


def test_cancel_and_subscribe_refuse_an_ended_task() -> None:
    done = pb.RunInfo(id="t", session_id="s", status=pb.RUN_STATUS_SUCCEEDED)
    with pytest.raises(TaskNotCancelableError, match="already completed"):
        steps.check_cancelable("t", done)
    with pytest.raises(UnsupportedOperationError, match="use GetTask"):
        steps.check_subscribable("t", done)
    waiting = pb.RunInfo(id="t", session_id="s", status=pb.RUN_STATUS_INPUT_REQUIRED)
    assert steps.check_cancelable("t", waiting) and steps.check_subscribable("t", waiting)
    failed = Task(id="t")
    failed.status.state = TaskState.TASK_STATE_FAILED
    with pytest.raises(TaskNotCancelableError, match="ended as failed"):
        steps.check_canceled("t", failed)


def _turns(count: int, size: int) -> Task:
    """A task of ``count`` user and agent message pairs of ``size`` characters, each agent
    message with its answer artifact (as ``task_from_runs`` builds it)."""
    task = Task(id="t", context_id="c")
    for index in range(count):
        for role, name in ((Role.ROLE_USER, f"u{index}"), (Role.ROLE_AGENT, f"a{index}")):
            task.history.append(Message(message_id=name, role=role, parts=[Part(text="x" * size)]))
        task.artifacts.append(Artifact(artifact_id=f"a{index}", parts=[Part(text="x" * size)]))
    return task


def test_a_task_that_fits_is_left_whole() -> None:
    task = _turns(3, 100)
    assert steps.fit_task(task, 10_000) == _turns(3, 100)


def test_a_task_over_the_budget_keeps_its_newest_turns_and_counts_what_it_left_out() -> None:
    task = steps.fit_task(_turns(10, 1000), 7_000)
    assert task.ByteSize() <= 7_000
    assert [m.message_id for m in task.history] == ["u8", "a8", "u9", "a9"]
    assert [a.artifact_id for a in task.artifacts] == ["a8", "a9"]
    assert task.metadata["agentik_history_clipped"] == 16
    assert task.metadata["agentik_artifacts_clipped"] == 8


def test_the_latest_answer_is_kept_as_an_artifact_when_no_message_fits() -> None:
    task = steps.fit_task(_turns(1, 3000), 3_500)
    assert not task.history and [a.artifact_id for a in task.artifacts] == ["a0"]
    assert task.metadata["agentik_history_clipped"] == 2
    assert "agentik_artifacts_clipped" not in task.metadata
