"""A2A task operations on the engine in this process, for the gRPC binding.

The same tasks as the facade's JSON-RPC binding (``web_facade/a2a/tasks.py``): a task is a
chain of runs, its first run's id the task's, its context their session; a task that waits
for a person is answered by a run that resumes its latest run. The two differ only in how
they reach the engine: the facade calls it over gRPC, this calls the ``Engine`` directly,
as the caller the request's credentials name (so owner isolation is the engine's own). The
A2A side of both is ``agentik.a2a``: the conversions, the reading of a person's reply, the
rules and the errors.

Each method answers with the SDK's types or raises an ``A2AError``; a refusal of the
engine with no A2A meaning (credentials, rate, budget, health) is raised as the core's
``AgentikError`` for the servicer to answer in the engine's own words.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

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
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length

from agentik.a2a import tasks as steps
from agentik.a2a.convert import RunStream, check_message, engine_content, task_from_runs
from agentik.a2a.errors import invalid_params
from agentik.a2a.rules import CANCEL_WAIT, FIRST_WINDOW, MAX_TURNS, check_task_id
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from engine_service.a2a.errors import a2a_error
from engine_service.convert import event_to_pb, message_to_pb, run_input_from_pb, run_to_pb
from engine_service.core import events as ev
from engine_service.core.caller import Caller
from engine_service.core.engine import Engine, RunHandle
from engine_service.core.errors import AgentikError, InvalidInput, RunNotFound, SessionNotFound

__all__ = ["EngineTasks"]


async def _closed(events: AsyncIterator[pb.Event]) -> None:
    """Close an event stream the task no longer follows."""
    close = getattr(events, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


class EngineTasks:
    """A2A's task methods for one caller, each a few calls of the engine."""

    def __init__(self, engine: Engine, caller: Caller, agent: str = "") -> None:
        """``agent``: the request's ``tenant``: a new message starts a context of it, and
        only its tasks and contexts are reached. "": no tenant, which reaches every agent's
        and starts the default agent's."""
        self._engine = engine
        self._caller = caller
        self._agent = agent

    @property
    def caller(self) -> Caller:
        """Who the calls act as."""
        return self._caller

    # -- reading ------------------------------------------------------------------

    async def _get_run(self, run_id: str) -> pb.RunInfo:
        try:
            return run_to_pb(await self._engine.get_run(self._caller, run_id))
        except AgentikError as exc:
            raise a2a_error(exc) from None

    async def _run(self, task_id: str) -> pb.RunInfo:
        """The first run of task ``task_id``; TaskNotFound when the caller cannot see it or,
        with a ``tenant``, when it is another agent's task."""
        check_task_id(task_id)
        try:
            run = run_to_pb(await self._engine.get_run(self._caller, task_id))
        except (RunNotFound, SessionNotFound):
            raise TaskNotFoundError(f"task {task_id!r} not found") from None
        except AgentikError as exc:
            raise a2a_error(exc) from None
        if self._agent and await self._agent_of(run.session_id) != self._agent:
            raise TaskNotFoundError(f"task {task_id!r} is no task of agent {self._agent!r}")
        return run

    async def _agent_of(self, context_id: str) -> str:
        """The agent context ``context_id`` belongs to; "" when the caller has no such
        context (yet)."""
        try:
            session = await self._engine.get_session(self._caller, context_id)
        except (SessionNotFound, InvalidInput):  # a bad id is refused where it is used
            return ""
        except AgentikError as exc:
            raise a2a_error(exc) from None
        return self._engine.agents.name_of(session.agent)

    async def check_task(self, task_id: str) -> None:
        """TaskNotFound unless the caller may reach task ``task_id`` with this tenant (the
        push config methods: another agent's task is not reached through this agent)."""
        if self._agent:
            await self._run(task_id)

    async def _check_context(self, context_id: str) -> None:
        """With a tenant, a context of another agent is refused: a conversation keeps the
        agent it was started with (no tenant continues any of the caller's contexts)."""
        if not self._agent:
            return
        owner = await self._agent_of(context_id)
        if owner and owner != self._agent:
            raise invalid_params(
                "message.contextId",
                f"context {context_id!r} belongs to agent {owner!r}, not {self._agent!r}: "
                f"continue it with tenant {owner!r}, or send no contextId to start a new one "
                "here",
            )

    async def _chain_from(self, run: pb.RunInfo) -> list[pb.RunInfo]:
        """``run`` and each run that resumed the one before it: the latest is last."""
        runs = [run]
        while runs[-1].resumed_by_run_id and len(runs) < MAX_TURNS:
            runs.append(await self._get_run(runs[-1].resumed_by_run_id))
        return runs

    async def _chain(self, task_id: str) -> list[pb.RunInfo]:
        """The runs of task ``task_id``, its first run first; TaskNotFound if none."""
        return await self._chain_from(await self._run(task_id))

    async def _resumes(self, run: pb.RunInfo) -> bool:
        """Whether ``run`` continues another run's task (it resumed its parent)."""
        if not run.parent_run_id:
            return False
        try:
            parent = run_to_pb(await self._engine.get_run(self._caller, run.parent_run_id))
        except AgentikError:
            return False
        return parent.resumed_by_run_id == run.id

    async def _task_of(self, run: pb.RunInfo) -> str:
        """The task a run belongs to: the first run of its chain."""
        for _ in range(MAX_TURNS):
            if not await self._resumes(run):
                break
            run = await self._get_run(run.parent_run_id)
        return run.id

    async def _messages(self, run: pb.RunInfo) -> list[pb.Message]:
        out: list[pb.Message] = []
        after = ""
        while True:
            try:
                page, more = await self._engine.list_messages(
                    self._caller, run.session_id, after, 1000, run.id
                )
            except AgentikError as exc:
                raise a2a_error(exc) from None
            out.extend(message_to_pb(m) for m in page)
            if not more or not page:
                return out
            after = page[-1].id

    async def _task(self, runs: list[pb.RunInfo]) -> Task:
        return task_from_runs(runs, [await self._messages(run) for run in runs])

    async def get_task(self, task_id: str, history_length: int | None = None) -> Task:
        """GetTask: the stored runs as a task; its last ``history_length`` messages."""
        steps.check_history_length(history_length)
        return steps.trim_history(await self._task(await self._chain(task_id)), history_length)

    async def list_tasks(self, request: ListTasksRequest) -> ListTasksResponse:
        """ListTasks: the tasks of one context (or of all), newest first; one engine
        call per page (see the facade's ``TaskService.list_tasks``)."""
        page = steps.list_page(request)
        try:
            # A tenant (an agent) lists its own tasks, as /a2a/{agent}/ does; none, all.
            chains, total, runs_read = await self._engine.list_run_chains(
                self._caller,
                request.context_id,
                page.offset,
                page.size,
                page.last_messages,
                agent=self._agent,
            )
        except SessionNotFound:  # an unknown context has no tasks
            return ListTasksResponse(page_size=page.size, total_size=0)
        except AgentikError as exc:
            raise a2a_error(exc) from None
        found = (
            pb.RunChain(
                runs=[run_to_pb(r) for r in chain.runs],
                messages=[message_to_pb(m) for m in chain.messages],
            )
            for chain in chains
        )
        return steps.list_response(request, page, found, total, runs_read)

    # -- sending ------------------------------------------------------------------

    async def _check_fresh(self, context_id: str, message_id: str) -> None:
        """A messageId already stored in the context would be dropped silently by the
        engine's reconciliation (known ids are ignored): refuse it instead."""
        try:
            await self._engine.list_messages(self._caller, context_id, message_id, 1)
        except (SessionNotFound, InvalidInput):
            return  # a new context, or a message id it does not hold: a new message
        except AgentikError as exc:
            raise a2a_error(exc) from None
        raise invalid_params(
            "message.messageId", f"{message_id!r} was already sent in context {context_id!r}"
        )

    async def _prepare(self, request: SendMessageRequest) -> tuple[pb.RunRequest, Task]:
        """Check the request, resolve its ids; the run to start and the task it makes."""
        steps.check_send(request)
        message = request.message
        if message.task_id:
            run_request, task = await self._reply(message)
        else:
            run_request, task = await self._new_task(message)
        steps.push_config(request, run_request, task)
        return run_request, task

    async def _new_task(self, message: Message) -> tuple[pb.RunRequest, Task]:
        """A message that starts a task: a new run, in its context or a new one."""
        content = engine_content(message)
        context_id = message.context_id
        if context_id:
            await self._check_context(context_id)
            await self._check_fresh(context_id, message.message_id)
        return steps.new_task(message, content, context_id, self._agent)

    async def _reply(self, message: Message) -> tuple[pb.RunRequest, Task]:
        """A message on an existing task: the answer to what it waits for (a run that
        resumes its latest run), refused when the task does not wait for input."""
        check_message(message)
        runs = await self._chain(message.task_id)
        run_request = steps.reply_task(message, runs)
        return run_request, steps.answered(await self._task(runs))

    async def _waiting_task(self, context_id: str) -> str:
        """The task the context waits for a person's answer on; "" when it waits for none."""
        try:
            session = await self._engine.get_session(self._caller, context_id)
            if not session.interrupts:
                return ""
            return await self._task_of(await self._get_run(session.interrupts[0].run_id))
        except (AgentikError, A2AError):
            return ""

    async def _refused(self, run_request: pb.RunRequest, exc: AgentikError) -> Exception:
        """The error for the engine's refusal to start a run."""
        error = a2a_error(exc)
        if isinstance(error, UnsupportedOperationError) and not run_request.resume:
            waiting = await self._waiting_task(run_request.session_id)
            if waiting:
                return steps.waiting_refusal(run_request.session_id, waiting)
        return error

    async def start(self, request: SendMessageRequest) -> tuple[RunHandle, RunStream]:
        """Start the run the message makes; the engine's refusal is raised here."""
        run_request, task = await self._prepare(request)
        try:
            run_input = run_input_from_pb(run_request)
            handle = await self._engine.start_run(self._caller, run_input)
        except AgentikError as exc:
            raise await self._refused(run_request, exc) from None
        return handle, RunStream(task, run_request.run_id, announce=True)

    def events(self, handle: RunHandle) -> AsyncIterator[pb.Event]:
        """The started run's events, as the contract's messages."""
        return _as_pb(self._engine.run_events(handle))

    async def send_message(self, request: SendMessageRequest) -> Task:
        """SendMessage: run the task to its end (or, with ``returnImmediately``, until it
        started) and answer with it."""
        handle, stream = await self.start(request)
        events = self.events(handle)
        try:
            async for event in events:
                stream.feed(event)
                if stream.done or request.configuration.return_immediately:
                    break
        finally:
            await _closed(events)
        return apply_history_length(stream.task, request.configuration)

    # -- cancel and subscribe -----------------------------------------------------

    async def _last_seq(self, context_id: str) -> int:
        try:
            return (await self._engine.get_session(self._caller, context_id)).last_seq
        except AgentikError as exc:
            raise a2a_error(exc) from None

    async def _wait_for_end(self, context_id: str, task_id: str, after_seq: int) -> None:
        """Wait until the run interrupted by a cancel has ended (stopping answers once
        the run is told to stop, not once it stopped): a follow ``until_idle`` ends once
        the run's end is stored, and an event of a later run also means it is."""
        events = self._engine.subscribe(self._caller, context_id, after_seq, until_idle=True)

        async def follow() -> None:
            async for event in events:
                if event.run_id != task_id:
                    return

        try:
            await asyncio.wait_for(follow(), CANCEL_WAIT)
        except (TimeoutError, AgentikError):
            pass  # best effort: the answer stands either way
        finally:
            with contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]

    async def cancel_task(self, task_id: str) -> Task:
        """CancelTask: interrupt the task's run in flight (its partial answer is kept), or
        stop waiting for a person's answer → CANCELED."""
        runs = await self._chain(task_id)
        latest = runs[-1]
        waiting = steps.check_cancelable(task_id, latest)
        last_seq = 0 if waiting else await self._last_seq(latest.session_id)
        try:
            await self._engine.stop_run(self._caller, latest.session_id, latest.id)
        except AgentikError as exc:
            raise a2a_error(exc) from None
        if not waiting:  # a waiting run is stored stopped when the stop answers
            await self._wait_for_end(latest.session_id, latest.id, last_seq)
        return steps.check_canceled(task_id, await self._task(await self._chain(task_id)))

    async def subscribe(
        self, task_id: str
    ) -> tuple[list[StreamResponse], RunStream | None, AsyncIterator[pb.Event] | None]:
        """SubscribeToTask: the responses due first (the task now, and what its replay
        gave), then the stream of its latest run's events to fold, from its first on. A
        task that waits for input is only the task: nothing happens until the peer answers,
        and the stream of that answer follows the task on."""
        runs = await self._chain(task_id)
        latest = runs[-1]
        if steps.check_subscribable(task_id, latest):
            return [StreamResponse(task=await self._task(runs))], None, None
        snapshot = steps.subscribe_snapshot(runs, [await self._messages(run) for run in runs])
        events, first = await self._replay_from_start(latest)
        stream = RunStream(snapshot, latest.id, announce=False)
        responses = [StreamResponse(task=snapshot)]
        if first is not None:
            responses.extend(stream.feed(first))
        return responses, stream, events

    async def _replay_from_start(
        self, run: pb.RunInfo
    ) -> tuple[AsyncIterator[pb.Event], pb.Event | None]:
        """Follow the run's session from the run's first event: look back a window of
        events and widen it until the run's first event (RUN_STARTED) is inside."""
        last_seq = await self._last_seq(run.session_id)
        window = FIRST_WINDOW
        while True:
            after = max(0, last_seq - window)
            try:
                events = _as_pb(
                    self._engine.subscribe(self._caller, run.session_id, after, until_idle=True)
                )
            except AgentikError as exc:
                raise a2a_error(exc) from None
            first: pb.Event | None = None
            try:
                async for event in events:
                    if event.run_id == run.id:
                        first = event
                        break
            except AgentikError as exc:
                await _closed(events)
                raise a2a_error(exc) from None
            if after == 0 or (first is not None and first.WhichOneof("kind") == "run_started"):
                return events, first
            await _closed(events)
            window *= 8


async def _as_pb(events: AsyncIterator[ev.Event]) -> AsyncIterator[pb.Event]:
    """Core events as the contract's messages (what the shared conversions read)."""
    try:
        async for event in events:
            yield event_to_pb(event)
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
