"""One call's answer from a remote agent, as it arrives, and the words a call ends with.

:class:`RemoteCall` takes the stream's events (or a polled task) and keeps what the LLM will
read: the artifacts' text up to ``MAX_RESULT_CHARS`` (past it only counted), the last
status message, a direct reply; status messages also go out as throttled ``tool_progress``
events. :func:`why_call_failed` words a failure for the LLM and the client that sees tool
results: the agent's name, never its address or a trace.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
from a2a.client import A2AClientError, A2AClientTimeoutError
from a2a.types import Part, Role, StreamResponse, Task, TaskState
from google.protobuf import json_format

from engine_service.core.events import Custom
from engine_service.core.models import JSON
from engine_service.core.tool import TOOL_PROGRESS, ToolContext
from engine_service.tools.a2a.bounded import ResponseTooLarge

__all__ = [
    "DONE",
    "MAX_PROGRESS_CHARS",
    "MAX_RESULT_CHARS",
    "PAUSED",
    "PROGRESS_EVERY",
    "RemoteCall",
    "clip",
    "too_large",
    "why_call_failed",
]

MAX_RESULT_CHARS = 100_000
MAX_PROGRESS_CHARS = 2_000
MAX_ERROR_CHARS = 2_000
"""A remote's error message longer than this is cut (in the result and in the log)."""
PROGRESS_EVERY = 0.1
"""Seconds between two progress events of one call: a chatty (or hostile) agent's status
messages in between are not streamed (the answer is not affected)."""
DONE = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
PAUSED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


@dataclass(slots=True)
class RemoteCall:
    """One message to the remote agent and what came back so far."""

    agent: str
    context: ToolContext
    task_id: str = ""
    state: TaskState = TaskState.TASK_STATE_UNSPECIFIED
    status_text: str = ""
    reply: str = ""
    """The text of a direct reply (a Message instead of a task)."""
    artifacts: dict[str, list[str]] = field(default_factory=dict)
    abandoned: bool = False
    """Our run stopped waiting: no more progress events."""
    known: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the task id (or a direct reply) has arrived."""
    progress: int = 0
    last_report: float = 0.0
    kept: int = 0
    """Characters of artifact text kept so far."""
    dropped: int = 0
    """Characters of artifact text past the answer's limit, not kept (but counted)."""

    @property
    def running(self) -> bool:
        """A task is known and has neither ended nor paused for input."""
        return bool(self.task_id) and self.state not in DONE | PAUSED

    def take(self, event: StreamResponse) -> None:
        if event.HasField("message"):
            self.reply = text_of(event.message.parts)
            self.known.set()
        elif event.HasField("task"):
            self.take_task(event.task)
        elif event.HasField("status_update"):
            update = event.status_update
            self.task_id = update.task_id or self.task_id
            self.known.set()
            self.state = update.status.state
            if update.status.HasField("message"):
                self.status_text = text_of(update.status.message.parts)
                self.report(self.status_text)
        elif event.HasField("artifact_update"):
            update_a = event.artifact_update
            self.task_id = update_a.task_id or self.task_id
            self.known.set()
            artifact = update_a.artifact
            chunks = self.artifacts.setdefault(artifact.artifact_id, [])
            if not update_a.append:
                self.kept -= sum(len(chunk) for chunk in chunks)
                chunks.clear()
            chunk = text_of(artifact.parts)
            if self.kept <= MAX_RESULT_CHARS:  # past that it would be clipped anyway
                self.kept += len(chunk)
                chunks.append(chunk)
            else:
                self.dropped += len(chunk)

    def take_task(self, task: Task) -> None:
        self.task_id = task.id or self.task_id
        self.known.set()
        self.state = task.status.state
        if task.status.HasField("message"):
            self.status_text = text_of(task.status.message.parts)
        if task.artifacts:
            self.artifacts = {a.artifact_id: [text_of(a.parts)] for a in task.artifacts}
        if not self.status_text and not task.artifacts:
            agent_says = [m for m in task.history if m.role == Role.ROLE_AGENT]
            if agent_says:
                self.status_text = text_of(agent_says[-1].parts)

    def report(self, text: str) -> None:
        now = time.monotonic()
        if self.abandoned or not text or now - self.last_report < PROGRESS_EVERY:
            return
        self.last_report = now
        if len(text) > MAX_PROGRESS_CHARS:
            text = text[: MAX_PROGRESS_CHARS - 1] + "…"
        self.progress += 1
        value: JSON = {
            "tool_call_id": self.context.tool_call_id,
            "progress": self.progress,
            "total": None,
            "message": text,
            "agent": self.agent,
            "state": state_name(self.state),
        }
        self.context.emit(Custom(TOOL_PROGRESS, value))

    @property
    def answer(self) -> str:
        texts = ["".join(chunks) for chunks in self.artifacts.values()]
        return "\n".join(t for t in texts if t) or self.reply or self.status_text


def clip(text: str, dropped: int = 0, limit: int = MAX_RESULT_CHARS) -> str:
    """``text`` cut at ``limit`` characters, with a note of how long it was (``dropped``:
    characters that were never kept)."""
    if len(text) <= limit and not dropped:
        return text
    whole = len(text) + dropped
    return text[:limit] + f"\n(truncated: the answer had {whole:,} characters)"


def state_name(state: TaskState) -> str:
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def text_of(parts: Iterable[Part]) -> str:
    """The parts as text: text as is, data as JSON, files by name and URL."""
    texts: list[str] = []
    for part in parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            value = json_format.MessageToDict(part.data)
            texts.append(json.dumps(value, ensure_ascii=False))
        elif part.HasField("url") or part.HasField("raw"):
            label = part.filename or part.media_type or "file"
            texts.append(f"[{label}: {part.url}]" if part.url else f"[{label}]")
    return "\n".join(texts)


def too_large(name: str, exc: ResponseTooLarge) -> str:
    return (
        f"the agent {name!r} sent an answer over {exc.limit:,} bytes "
        "([[a2a.agents]] max_response_bytes)"
    )


def why_call_failed(exc: BaseException, name: str) -> str:
    """Words for the LLM (and the client that sees tool results): no address, no trace."""
    if isinstance(exc, A2AClientTimeoutError | httpx.TimeoutException | TimeoutError):
        return f"the agent {name!r} did not answer in time"
    if isinstance(exc, ResponseTooLarge):  # while cancelling or listing tasks
        return too_large(name, exc)
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError) or isinstance(exc, httpx.HTTPStatusError):
        status_error = cause if isinstance(cause, httpx.HTTPStatusError) else exc
        assert isinstance(status_error, httpx.HTTPStatusError)
        return f"the agent {name!r} answered HTTP {status_error.response.status_code}"
    if isinstance(exc, httpx.TransportError) or isinstance(cause, httpx.TransportError):
        return f"the agent {name!r} is unreachable"
    if isinstance(exc, A2AClientError | httpx.HTTPError):
        # It answered, but not in A2A (not JSON, not an event stream, ...).
        return f"the agent {name!r} sent an answer that could not be read"
    message = getattr(exc, "message", "") or str(exc) or type(exc).__name__
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 1] + "…"
    return f"the agent {name!r} refused the call: {message}"
