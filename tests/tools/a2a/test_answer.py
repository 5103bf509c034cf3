"""What a remote agent's answer becomes: kept text, clipped text, progress, failure words."""

from __future__ import annotations

import httpx
from a2a.client import A2AClientTimeoutError
from a2a.types import (
    Artifact,
    Part,
    StreamResponse,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)

from engine_service.core.events import Custom, EventBody
from engine_service.core.models import JSON
from engine_service.core.tool import TOOL_PROGRESS, ToolContext
from engine_service.tools.a2a.answer import (
    MAX_RESULT_CHARS,
    RemoteCall,
    clip,
    why_call_failed,
)
from engine_service.tools.a2a.bounded import ResponseTooLarge


def _context(events: list[EventBody]) -> ToolContext:
    state: JSON = {}
    return ToolContext(
        session_id="s1",
        run_id="r1",
        tool_call_id="call-1",
        emit=events.append,
        get_state=lambda: state,
        set_state=lambda _value: None,
    )


def _artifact(text: str, *, append: bool, artifact_id: str = "a1") -> StreamResponse:
    update = TaskArtifactUpdateEvent(
        task_id="t1",
        artifact=Artifact(artifact_id=artifact_id, parts=[Part(text=text)]),
        append=append,
    )
    return StreamResponse(artifact_update=update)


def _status(state: TaskState, text: str) -> StreamResponse:
    status = TaskStatus(state=state)
    status.message.parts.append(Part(text=text))
    return StreamResponse(status_update=TaskStatusUpdateEvent(task_id="t1", status=status))


def test_appended_artifact_chunks_make_one_answer_and_a_replaced_artifact_starts_over() -> None:
    call = RemoteCall("helper", _context([]))
    call.take(_artifact("Hel", append=False))
    call.take(_artifact("lo", append=True))
    call.take(_artifact("other", append=False, artifact_id="a2"))
    assert call.task_id == "t1"
    assert call.known.is_set()
    assert call.answer == "Hello\nother"

    call.take(_artifact("Bye", append=False))
    assert call.answer == "Bye\nother"
    assert call.kept == len("Bye") + len("other")


def test_artifact_text_past_the_result_bound_is_counted_not_kept() -> None:
    call = RemoteCall("helper", _context([]))
    call.take(_artifact("x" * (MAX_RESULT_CHARS + 1), append=False))
    call.take(_artifact("y" * 5_000, append=True))
    assert call.kept == MAX_RESULT_CHARS + 1
    assert call.dropped == 5_000
    said = clip(call.answer, call.dropped)
    assert said.startswith("x" * MAX_RESULT_CHARS)
    assert said.endswith(f"(truncated: the answer had {MAX_RESULT_CHARS + 5_001:,} characters)")
    assert clip("short") == "short"


def test_status_messages_become_throttled_progress_events_until_the_call_is_abandoned() -> None:
    events: list[EventBody] = []
    call = RemoteCall("helper", _context(events))
    call.take(_status(TaskState.TASK_STATE_WORKING, "reading"))
    call.take(_status(TaskState.TASK_STATE_WORKING, "still reading"))  # within PROGRESS_EVERY
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, Custom)
    assert event.name == TOOL_PROGRESS
    assert event.value == {
        "tool_call_id": "call-1",
        "progress": 1,
        "total": None,
        "message": "reading",
        "agent": "helper",
        "state": "working",
    }
    assert call.running
    assert call.status_text == "still reading"

    call.abandoned = True
    call.last_report = 0.0
    call.take(_status(TaskState.TASK_STATE_INPUT_REQUIRED, "which file?"))
    assert len(events) == 1
    assert not call.running  # paused for input


def test_failures_are_worded_without_the_agents_address() -> None:
    request = httpx.Request("POST", "http://10.1.2.3:9999/a2a")
    refused = httpx.ConnectError("connection refused to 10.1.2.3:9999", request=request)
    status = httpx.HTTPStatusError(
        "boom", request=request, response=httpx.Response(503, request=request)
    )
    cases = {
        "the agent 'helper' is unreachable": refused,
        "the agent 'helper' answered HTTP 503": status,
        "the agent 'helper' did not answer in time": A2AClientTimeoutError("slow"),
        "the agent 'helper' sent an answer over 1,024 bytes ([[a2a.agents]] max_response_bytes)": (
            ResponseTooLarge(1024)
        ),
    }
    for words, exc in cases.items():
        assert why_call_failed(exc, "helper") == words
        assert "10.1.2.3" not in why_call_failed(exc, "helper")
    long = why_call_failed(ValueError("z" * 5_000), "helper")
    assert long.startswith("the agent 'helper' refused the call: zzz")
    assert len(long) < 2_100
