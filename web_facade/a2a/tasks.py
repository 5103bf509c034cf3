"""A2A task operations over the engine: a task is a chain of runs, its context their session.

A task starts as one run, whose id is the task's. When that run stops for a person
(INPUT_REQUIRED), the peer's next message on the task resumes it with a new run, linked
from the one it answered by ``RunInfo.resumed_by_run_id``; the task is the whole chain, in
the state of its latest run.

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

import grpc
from a2a.types import (
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    StreamResponse,
    Task,
)
from a2a.utils.errors import (
    A2AError,
    InternalError,
    TaskNotFoundError,
)
from a2a.utils.task import apply_history_length

from agentik.a2a import tasks as steps
from agentik.a2a.convert import RunStream, check_message, engine_content, task_from_runs
from agentik.a2a.errors import invalid_params
from agentik.a2a.rules import (
    CANCEL_WAIT,
    DEFAULT_PAGE_SIZE,
    FIRST_WINDOW,
    MAX_PAGE_SIZE,
    MAX_TURNS,
    TEXT_MODES,
    check_task_id,
)
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from agentik.rpc.agentik.engine.v1 import engine_pb2_grpc as pb_grpc
from web_facade.a2a.errors import from_rpc
from web_facade.engine_client import UNARY_TIMEOUT
from web_facade.stream import OPEN_WAIT, POLL, Relay, follow, open_run

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "TEXT_MODES",
    "TaskFollow",
    "TaskService",
    "check_task_id",
]


class TaskService:
    """A2A's task methods, each a few engine calls."""

    def __init__(self, engine: pb_grpc.AgentEngineStub, agent: str = "") -> None:
        """``agent``: the agent whose endpoint this is (``/a2a/{agent}/``): a new message
        starts a context of it, and only its tasks and contexts are reached. "": the root
        endpoint, which reaches every agent's and starts the default agent's."""
        self._engine = engine
        self._agent = agent

    # -- reading ------------------------------------------------------------------

    def _run(self, task_id: str) -> pb.RunInfo:
        """The first run of task ``task_id``; TaskNotFound when the caller cannot see it or,
        at ``/a2a/{agent}/``, when it is another agent's task."""
        check_task_id(task_id)
        try:
            run = self._engine.GetRun(pb.GetRunRequest(run_id=task_id), timeout=UNARY_TIMEOUT)
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                raise TaskNotFoundError(f"task {task_id!r} not found") from None
            raise from_rpc(exc) from None
        if self._agent and self._agent_of(run.session_id) != self._agent:
            raise TaskNotFoundError(f"task {task_id!r} is no task of agent {self._agent!r}")
        return run

    def _agent_of(self, context_id: str) -> str:
        """The agent context ``context_id`` belongs to; "" when the caller has no such
        context (yet)."""
        try:
            session = self._engine.GetSession(
                pb.GetSessionRequest(session_id=context_id), timeout=UNARY_TIMEOUT
            )
        except grpc.RpcError as exc:
            # A bad id (INVALID_ARGUMENT) is refused where it is used.
            if exc.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT):
                return ""
            raise from_rpc(exc) from None
        return session.agent

    def check_task(self, task_id: str) -> None:
        """TaskNotFound unless the caller may reach task ``task_id`` here (the push config
        methods: a task of another agent is not reached through this agent's endpoint)."""
        if self._agent:
            self._run(task_id)

    def _check_context(self, context_id: str) -> None:
        """At ``/a2a/{agent}/``, a context of another agent is refused: a conversation keeps
        the agent it was started with (the root endpoint continues any of the caller's)."""
        if not self._agent:
            return
        owner = self._agent_of(context_id)
        if owner and owner != self._agent:
            raise invalid_params(
                "message.contextId",
                f"context {context_id!r} belongs to agent {owner!r}, not {self._agent!r}: "
                f"continue it at agent {owner!r}'s endpoint, or send no contextId to start "
                "a new one here",
            )

    def _get_run(self, run_id: str) -> pb.RunInfo:
        try:
            return self._engine.GetRun(pb.GetRunRequest(run_id=run_id), timeout=UNARY_TIMEOUT)
        except grpc.RpcError as exc:
            raise from_rpc(exc) from None

    def _chain_from(self, run: pb.RunInfo) -> list[pb.RunInfo]:
        """``run`` and each run that resumed the one before it: the latest is last."""
        runs = [run]
        while runs[-1].resumed_by_run_id and len(runs) < MAX_TURNS:
            runs.append(self._get_run(runs[-1].resumed_by_run_id))
        return runs

    def _chain(self, task_id: str) -> list[pb.RunInfo]:
        """The runs of task ``task_id``, its first run first; TaskNotFound if none."""
        return self._chain_from(self._run(task_id))

    def _resumes(self, run: pb.RunInfo) -> bool:
        """Whether ``run`` continues another run's task (it resumed its parent)."""
        if not run.parent_run_id:
            return False
        try:
            parent = self._engine.GetRun(
                pb.GetRunRequest(run_id=run.parent_run_id), timeout=UNARY_TIMEOUT
            )
        except grpc.RpcError:
            return False
        return parent.resumed_by_run_id == run.id

    def _task_of(self, run: pb.RunInfo) -> str:
        """The task a run belongs to: the first run of its chain."""
        for _ in range(MAX_TURNS):
            if not self._resumes(run):
                break
            run = self._get_run(run.parent_run_id)
        return run.id

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

    def _task(self, runs: list[pb.RunInfo], *, with_messages: bool = True) -> Task:
        messages = [self._messages(run) if with_messages else [] for run in runs]
        return task_from_runs(runs, messages)

    def get_task(self, task_id: str, history_length: int | None = None) -> Task:
        """GetTask: the stored runs as a task; its last ``history_length`` messages."""
        steps.check_history_length(history_length)
        return steps.trim_history(self._task(self._chain(task_id)), history_length)

    def list_tasks(self, request: ListTasksRequest) -> ListTasksResponse:
        """ListTasks: the tasks of one context (or of all), newest first; at
        ``/a2a/{agent}/`` only that agent's.

        Pages are pages of runs: a run that resumed another is part of that run's task,
        not a task of its own, so a page may hold fewer tasks than ``pageSize``. One
        engine call (``ListRunChains``) answers the whole page, with at most
        :data:`LISTED_MESSAGES` of each task's latest messages: one request of the
        caller's rate and bounded work, however long the conversations are.
        """
        page = steps.list_page(request)
        query = pb.ListRunChainsRequest(
            session_id=request.context_id,
            offset=page.offset,
            limit=page.size,
            last_messages=page.last_messages,
            agent=self._agent,  # /a2a/{agent}/ lists that agent's tasks only
        )
        try:
            found = self._engine.ListRunChains(query, timeout=UNARY_TIMEOUT)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # an unknown context has no tasks
                return ListTasksResponse(page_size=page.size, total_size=0)
            raise from_rpc(exc) from None
        return steps.list_response(request, page, found.chains, found.total, found.runs_read)

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
        steps.check_send(request)
        message = request.message
        if message.task_id:
            run_request, task = self._reply(message)
        else:
            run_request, task = self._new_task(message)
        steps.push_config(request, run_request, task)
        return run_request, task

    def _new_task(self, message: Message) -> tuple[pb.RunRequest, Task]:
        """A message that starts a task: a new run, in its context or a new one."""
        content = engine_content(message)
        context_id = message.context_id
        if context_id:
            self._check_context(context_id)
            self._check_fresh(context_id, message.message_id)
        return steps.new_task(message, content, context_id, self._agent)

    def _reply(self, message: Message) -> tuple[pb.RunRequest, Task]:
        """A message on an existing task: the answer to what it waits for (a run that
        resumes its latest run), refused when the task does not wait for input."""
        check_message(message)
        runs = self._chain(message.task_id)
        run_request = steps.reply_task(message, runs)
        return run_request, steps.answered(self._task(runs))

    def _waiting_task(self, context_id: str) -> str:
        """The task the context waits for a person's answer on; "" when it waits for none."""
        try:
            session = self._engine.GetSession(
                pb.GetSessionRequest(session_id=context_id), timeout=UNARY_TIMEOUT
            )
            if not session.pending_interrupts:
                return ""
            return self._task_of(self._get_run(session.pending_interrupts[0].run_id))
        except (grpc.RpcError, A2AError):
            return ""

    def _refused(self, run_request: pb.RunRequest, exc: grpc.RpcError) -> A2AError:
        """The A2A error for the engine's refusal to start a run."""
        if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and not run_request.resume:
            waiting = self._waiting_task(run_request.session_id)
            if waiting:
                return steps.waiting_refusal(run_request.session_id, waiting)
        return from_rpc(exc)

    def _start(self, request: SendMessageRequest) -> tuple[Relay, RunStream]:
        run_request, task = self._prepare(request)
        run_request.batch_events = True  # the relay unpacks them: fewer messages under load
        try:
            relay = open_run(self._engine, run_request)
        except grpc.RpcError as exc:  # the engine's refusal (busy, overloaded, ...)
            raise self._refused(run_request, exc) from None
        first = relay.peek(0)
        if not isinstance(first, pb.Event):
            relay.cancel()
            if first is None:
                raise InternalError("the engine did not start the task in time")
            if isinstance(first, grpc.RpcError):
                raise self._refused(run_request, first)
            _relayed(first)  # the stream ended before the run started
        return relay, RunStream(task, run_request.run_id, announce=True)

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
                if not stream.done and request.configuration.return_immediately:
                    break
        finally:
            relay.cancel()
        return apply_history_length(stream.task, request.configuration)

    def send_streaming_message(self, request: SendMessageRequest) -> TaskFollow:
        """SendStreamingMessage; errors before the run starts are raised here, at once."""
        relay, stream = self._start(request)
        return TaskFollow(self, relay, stream, [])

    def _wait_for_end(self, context_id: str, task_id: str, after_seq: int) -> None:
        """Wait until the run interrupted by a cancel has ended (``Interrupt`` answers once
        the run is told to stop, not once it stopped).

        A subscription with ``until_idle`` ends only once the run's end is stored, and an
        event of a later run also means it is. (A run's terminal event itself is shown only
        once its end is stored, so a client that saw it needs no such wait.)
        """
        call = self._engine.Subscribe(
            pb.SubscribeRequest(session_id=context_id, after_seq=after_seq, until_idle=True),
            timeout=CANCEL_WAIT,
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
        """CancelTask: interrupt the task's run in flight (its partial answer is kept), or
        stop waiting for a person's answer → CANCELED."""
        runs = self._chain(task_id)
        latest = runs[-1]
        waiting = steps.check_cancelable(task_id, latest)
        last_seq = 0 if waiting else self._last_seq(latest.session_id)
        try:
            self._engine.Interrupt(
                pb.InterruptRequest(session_id=latest.session_id, run_id=latest.id),
                timeout=UNARY_TIMEOUT,
            )
        except grpc.RpcError as exc:
            raise from_rpc(exc) from None
        if not waiting:  # a waiting run is stored stopped when Interrupt answers
            self._wait_for_end(latest.session_id, latest.id, last_seq)
        return steps.check_canceled(task_id, self._task(self._chain(task_id)))

    def subscribe_to_task(self, task_id: str) -> TaskFollow | Task:
        """SubscribeToTask: the task now, then its updates from its latest run's first
        event on. A task that waits for input is only the task: nothing happens until the
        peer answers, and the stream of that answer follows the task on."""
        runs = self._chain(task_id)
        latest = runs[-1]
        if steps.check_subscribable(task_id, latest):
            return self._task(runs)
        snapshot = steps.subscribe_snapshot(runs, [self._messages(run) for run in runs])
        relay, replayed = self._replay_from_start(latest)
        stream = RunStream(snapshot, latest.id, announce=False)
        first = [StreamResponse(task=snapshot)]
        for event in replayed:
            first.extend(stream.feed(event))
        return TaskFollow(self, relay, stream, first)

    def _replay_from_start(self, run: pb.RunInfo) -> tuple[Relay, list[pb.Event]]:
        """Follow the run's session from the run's first event.

        The engine does not say at which seq a run began, so look back a window of events
        and widen it until the run's first event (RUN_STARTED) is inside.
        """
        last_seq = self._last_seq(run.session_id)
        window = FIRST_WINDOW
        while True:
            after = max(0, last_seq - window)
            subscription = pb.SubscribeRequest(
                session_id=run.session_id, after_seq=after, until_idle=True, batch_events=True
            )
            relay = follow(self._engine, subscription)
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
        relay: Relay,
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
        """The responses for one engine event (the engine shows a run's terminal event
        only once it stored the run's end: a GetTask right after it reads the final state)."""
        return self._stream.feed(event)


def _relayed(item: object) -> pb.Event | None:
    """The relayed event, or None when nothing came; raises for a failed or ended stream."""
    if item is None or isinstance(item, pb.Event):
        return item
    if isinstance(item, grpc.RpcError):
        raise from_rpc(item)
    raise InternalError("the engine ended the task's stream early; ask with GetTask")


def _first_of_run(relay: Relay, run_id: str) -> pb.Event | None:
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
