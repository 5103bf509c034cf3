"""A2A task operations over the engine: a task is one run, its context the run's session.

Nothing is kept here: every answer is built from the engine (``GetRun`` + ``ListMessages``
for a stored task, the run's events for a live one), so any worker of any facade process
answers for any task, before and after a restart.

A streamed task is a :class:`TaskFollow`: the relayed engine call and the fold of its events
into :class:`a2a.types.StreamResponse`; the HTTP layer streams it with the facade's shared
stream loop. The errors raised are the SDK's ``A2AError`` classes; engine failures go
through ``web_facade.a2a.errors.from_rpc``.
"""

from __future__ import annotations

import time
import uuid
from typing import Final

import grpc
from a2a.types import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InternalError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length

from engine_service.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from web_facade.a2a.convert import RunStream, engine_content, task_from_run
from web_facade.a2a.errors import from_rpc, invalid_params
from web_facade.engine_client import UNARY_TIMEOUT
from web_facade.stream import OPEN_WAIT, POLL, EventRelay, Resume, open_relay

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_PAGE_SIZE", "TEXT_MODES", "TaskFollow", "TaskService"]

DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 100
"""The spec's bounds on ``ListTasks.pageSize``."""
SETTLE_WAIT: Final = 10.0
"""Seconds to wait for the engine to store the end of a run whose last event arrived."""
_FIRST_WINDOW: Final = 64
"""Events looked back at first when a subscriber searches a live run's first event."""
TEXT_MODES: Final = frozenset({"text/plain", "text/*", "*/*", "text"})
"""``acceptedOutputModes`` values our text answers satisfy."""


class TaskService:
    """A2A's task methods, each a few engine calls."""

    def __init__(self, engine: pb_grpc.AgentEngineStub) -> None:
        self._engine = engine

    # -- reading ------------------------------------------------------------------

    def _run(self, task_id: str) -> pb.RunInfo:
        if not task_id:
            raise invalid_params("id", "is required")
        try:
            return self._engine.GetRun(pb.GetRunRequest(run_id=task_id), timeout=UNARY_TIMEOUT)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise TaskNotFoundError(f"task {task_id!r} not found") from None
            raise from_rpc(exc) from None

    def _messages(self, run: pb.RunInfo) -> list[pb.Message]:
        out: list[pb.Message] = []
        after = ""
        while True:
            try:
                page = self._engine.ListMessages(
                    pb.ListMessagesRequest(
                        session_id=run.session_id, run_id=run.id, after_message_id=after, limit=1000
                    ),
                    timeout=UNARY_TIMEOUT,
                )
            except grpc.RpcError as exc:
                raise from_rpc(exc) from None
            out.extend(page.messages)
            if not page.has_more or not page.messages:
                return out
            after = page.messages[-1].id

    def _task(self, run: pb.RunInfo, *, with_messages: bool = True) -> Task:
        return task_from_run(run, self._messages(run) if with_messages else ())

    def get_task(self, task_id: str, history_length: int | None = None) -> Task:
        """GetTask: the stored run as a task; its last ``history_length`` messages."""
        if history_length is not None and history_length < 0:
            raise invalid_params("historyLength", "must not be negative")
        task = self._task(self._run(task_id))
        if history_length is not None and len(task.history) > history_length:
            del task.history[: len(task.history) - history_length]
        return task

    def list_tasks(self, request: ListTasksRequest) -> ListTasksResponse:
        """ListTasks: the runs of one context (or of all), newest first."""
        if request.status or request.HasField("status_timestamp_after"):
            raise UnsupportedOperationError(
                "ListTasks cannot filter by status or statusTimestampAfter yet; "
                "list by contextId and filter on the client"
            )
        size = request.page_size if request.HasField("page_size") else DEFAULT_PAGE_SIZE
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise invalid_params("pageSize", f"must be between 1 and {MAX_PAGE_SIZE}")
        if request.HasField("history_length") and request.history_length < 0:
            raise invalid_params("historyLength", "must not be negative")
        token = request.page_token
        if token and (not token.isascii() or not token.isdigit() or len(token) > 9):
            raise invalid_params("pageToken", "is not a token this server gave")
        offset = int(token or "0")
        try:
            page = self._engine.ListRuns(
                pb.ListRunsRequest(session_id=request.context_id, offset=offset, limit=size),
                timeout=UNARY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # an unknown context has no tasks
                return ListTasksResponse(page_size=size, total_size=0)
            raise from_rpc(exc) from None
        with_messages = (
            request.include_artifacts
            or not request.HasField("history_length")
            or request.history_length > 0
        )
        tasks = []
        for run in page.runs:
            task = apply_history_length(self._task(run, with_messages=with_messages), request)
            if not request.include_artifacts:
                task.ClearField("artifacts")
            tasks.append(task)
        end = offset + len(page.runs)
        return ListTasksResponse(
            tasks=tasks,
            next_page_token=str(end) if page.runs and end < page.total else "",
            page_size=size,
            total_size=page.total,
        )

    # -- sending ------------------------------------------------------------------

    def _check_fresh(self, context_id: str, message_id: str) -> None:
        """A messageId already stored in the context would be dropped silently by the
        engine's reconciliation (known ids are ignored): refuse it instead."""
        try:
            self._engine.ListMessages(
                pb.ListMessagesRequest(session_id=context_id, after_message_id=message_id, limit=1),
                timeout=UNARY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            # NOT_FOUND: a new context. An unknown after_message_id is NOT_FOUND by the
            # contract but INVALID_ARGUMENT from the stores today: a new message id.
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                return
            raise from_rpc(exc) from None
        raise invalid_params(
            "message.messageId", f"{message_id!r} was already sent in context {context_id!r}"
        )

    def _prepare(self, request: SendMessageRequest) -> tuple[pb.RunRequest, Task]:
        """Check the request, resolve its ids; the run to start and the task it makes."""
        if not request.HasField("message"):
            raise invalid_params("message", "is required")
        config = request.configuration
        if config.HasField("task_push_notification_config"):
            raise PushNotificationNotSupportedError("this agent does not send push notifications")
        if config.HasField("history_length") and config.history_length < 0:
            raise invalid_params("configuration.historyLength", "must not be negative")
        accepted = set(config.accepted_output_modes)
        if accepted and not accepted & TEXT_MODES:
            raise ContentTypeNotSupportedError(
                f"this agent answers in text/plain only; acceptedOutputModes has {sorted(accepted)}"
            )
        message = request.message
        content = engine_content(message)
        context_id = message.context_id
        if message.task_id:
            run = self._run(message.task_id)
            if context_id and context_id != run.session_id:
                raise invalid_params(
                    "message.contextId",
                    f"{context_id!r} is not the context of task {message.task_id!r}",
                )
            raise UnsupportedOperationError(
                f"task {message.task_id!r} is {_state_of(run)} and takes no more messages; "
                f"to go on, send a message with contextId {run.session_id!r} and no taskId",
                data={"contextId": run.session_id},
            )
        if context_id:
            self._check_fresh(context_id, message.message_id)
        else:
            context_id = uuid.uuid4().hex  # a new context: the engine creates the session
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
            # A task outlives the HTTP call that started it (GetTask, SubscribeToTask).
            cancel_on_disconnect=False,
        )
        return run_request, task

    def _start(self, request: SendMessageRequest) -> tuple[EventRelay, RunStream]:
        run_request, task = self._prepare(request)
        try:
            relay = open_relay(
                self._engine.Run(run_request), resume=Resume.of_run(self._engine, run_request)
            )
        except grpc.RpcError as exc:  # the engine's refusal (busy, overloaded, ...)
            raise from_rpc(exc) from None
        first = relay.peek(0)
        if not isinstance(first, pb.Event):
            relay.cancel()
            if first is None:
                raise InternalError("the engine did not start the task in time")
            _relayed(first)  # the stream ended before the run started
        return relay, RunStream(task, announce=True)

    def send_message(self, request: SendMessageRequest) -> Task:
        """SendMessage: run the task to its end (or, with ``returnImmediately``, until it
        started) and answer with it."""
        relay, stream = self._start(request)
        try:
            while not stream.done:
                event = _relayed(relay.get(POLL))
                if event is None:
                    continue
                stream.feed(event)
                if stream.done:
                    self.settle(stream.task.context_id, stream.task.id, event.seq)
                elif request.configuration.return_immediately:
                    break
        finally:
            relay.cancel()
        return apply_history_length(stream.task, request.configuration)

    def send_streaming_message(self, request: SendMessageRequest) -> TaskFollow:
        """SendStreamingMessage; errors before the run starts are raised here, at once."""
        relay, stream = self._start(request)
        return TaskFollow(self, relay, stream, [])

    def settle(self, context_id: str, task_id: str, after_seq: int) -> None:
        """Wait until the engine has stored the end of the run.

        The engine publishes a run's last event before it stores the run's final status.
        A subscription with ``until_idle`` ends only once that is stored, and an event of
        a later run also means it is. Without this wait, a GetTask sent right after the
        answer could still read WORKING.
        """
        call = self._engine.Subscribe(
            pb.SubscribeRequest(session_id=context_id, after_seq=after_seq, until_idle=True),
            timeout=SETTLE_WAIT,
        )
        try:
            for event in call:
                if event.run_id != task_id:
                    break
        except grpc.RpcError:
            pass  # best effort: the answer stands either way
        finally:
            call.cancel()

    # -- cancel and subscribe -----------------------------------------------------

    def _last_seq(self, context_id: str) -> int:
        try:
            session = self._engine.GetSession(
                pb.GetSessionRequest(session_id=context_id), timeout=UNARY_TIMEOUT
            )
        except grpc.RpcError as exc:
            raise from_rpc(exc) from None
        return session.last_seq

    def cancel_task(self, task_id: str) -> Task:
        """CancelTask: interrupt the run (its partial answer is kept) → CANCELED."""
        run = self._run(task_id)
        if run.status != pb.RUN_STATUS_RUNNING:
            raise TaskNotCancelableError(f"task {task_id!r} is already {_state_of(run)}")
        last_seq = self._last_seq(run.session_id)
        try:
            self._engine.Interrupt(
                pb.InterruptRequest(session_id=run.session_id, run_id=task_id),
                timeout=UNARY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            raise from_rpc(exc) from None
        self.settle(run.session_id, task_id, last_seq)
        task = self._task(self._run(task_id))
        if task.status.state != TaskState.TASK_STATE_CANCELED:
            state = _state_name(task.status.state)
            raise TaskNotCancelableError(f"task {task_id!r} ended as {state} before it stopped")
        return task

    def subscribe_to_task(self, task_id: str) -> TaskFollow:
        """SubscribeToTask: the task now, then its updates from its first event on."""
        run = self._run(task_id)
        if run.status != pb.RUN_STATUS_RUNNING:
            raise UnsupportedOperationError(
                f"task {task_id!r} is {_state_of(run)}: nothing more will happen; use GetTask"
            )
        snapshot = self._task(run)
        snapshot.ClearField("artifacts")  # they come again, whole, from the replay
        relay, replayed = self._replay_from_start(run)
        stream = RunStream(snapshot, announce=False)
        first = [StreamResponse(task=snapshot)]
        for event in replayed:
            first.extend(stream.feed(event))
        return TaskFollow(self, relay, stream, first)

    def _replay_from_start(self, run: pb.RunInfo) -> tuple[EventRelay, list[pb.Event]]:
        """Follow the run's session from the run's first event.

        The engine does not say at which seq a run began, so look back a window of events
        and widen it until the run's first event (RUN_STARTED) is inside.
        """
        last_seq = self._last_seq(run.session_id)
        window = _FIRST_WINDOW
        while True:
            after = max(0, last_seq - window)
            subscription = pb.SubscribeRequest(
                session_id=run.session_id, after_seq=after, until_idle=True
            )
            relay = EventRelay(
                self._engine.Subscribe(subscription),
                Resume.of_subscription(self._engine, subscription),
            )
            try:
                first = _first_of_run(relay, run.id)
            except BaseException:
                relay.cancel()
                raise
            if after == 0 or (first is not None and first.WhichOneof("kind") == "run_started"):
                return relay, [first] if first is not None else []
            relay.cancel()
            window *= 8


class TaskFollow:
    """A live task: its relayed engine events, folded into stream responses.

    ``first`` are the responses due before any event (a subscriber's snapshot of the
    task, and what its replay already gave).
    """

    def __init__(
        self,
        service: TaskService,
        relay: EventRelay,
        stream: RunStream,
        first: list[StreamResponse],
    ) -> None:
        self.relay = relay
        self.first = first
        self._service = service
        self._stream = stream

    @property
    def done(self) -> bool:
        """True once the task reached its final state."""
        return self._stream.done

    def feed(self, event: pb.Event) -> list[StreamResponse]:
        """The responses for one engine event; the last one only once the engine stored
        the run's end, so a GetTask right after it reads the final state."""
        out = self._stream.feed(event)
        if self._stream.done:
            task = self._stream.task
            self._service.settle(task.context_id, task.id, event.seq)
        return out


def _state_name(state: int) -> str:
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower()


def _state_of(run: pb.RunInfo) -> str:
    return _state_name(task_from_run(run, ()).status.state)


def _relayed(item: object) -> pb.Event | None:
    """The relayed event, or None when nothing came; raises for a failed or ended stream."""
    if item is None or isinstance(item, pb.Event):
        return item
    if isinstance(item, grpc.RpcError):
        raise from_rpc(item)
    raise InternalError("the engine ended the task's stream early; ask with GetTask")


def _first_of_run(relay: EventRelay, run_id: str) -> pb.Event | None:
    """The first relayed event of the run; None when the stream ended without one."""
    deadline = time.monotonic() + OPEN_WAIT
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise InternalError("the engine did not replay the task in time")
        item = relay.get(remaining)
        if item is None:
            continue
        if not isinstance(item, pb.Event) and not isinstance(item, grpc.RpcError):
            return None  # the session went idle
        event = _relayed(item)
        if event is not None and event.run_id == run_id:
            return event
