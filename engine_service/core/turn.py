"""One run: the chat loop that turns LLM rounds and tool calls into events.

A ``Run`` is owned by the engine, not by any RPC: it runs as its own task until it
finishes, fails or is stopped, and publishes every event into the session's hub. Its
parts have one job each: ``core.flush`` stores the events behind it (write-behind and
the run's end), ``core.rounds`` reads each LLM round, ``core.llm_rounds`` asks it within
the window and the budget, ``core.tool_calls`` calls a tool, ``core.state`` keeps the
shared state; this file keeps the loop, the error and stop states, and the report.

Order of a run: RUN_STARTED; MESSAGE_STORED for the new client messages; for each LLM
round the reasoning/text/tool-call events, MESSAGE_STORED for the assistant message, then
TOOL_CALL_RESULT + MESSAGE_STORED per engine tool; finally RUN_FINISHED or RUN_ERROR.
Everything opened is closed before the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from agentik.collector import release
from engine_service.core import events as ev
from engine_service.core.asks import PersonInTheLoop
from engine_service.core.bounds import MESSAGE_ROOM, bounded_snapshot
from engine_service.core.budget import TokenBudget
from engine_service.core.chat import ChatModel, ToolSpec
from engine_service.core.context import Anchors, RunContext
from engine_service.core.errors import (
    AlreadyExists,
    BudgetExceeded,
    InvalidInput,
    LLMError,
    StorageUnavailable,
)
from engine_service.core.flush import Elsewhere, Outbox
from engine_service.core.hitl import Decision
from engine_service.core.hub import SessionHub
from engine_service.core.limits import RunLimits
from engine_service.core.llm_rounds import LlmRounds
from engine_service.core.models import JSON, UNSET, Message, RunInput, RunStatus, ToolCall
from engine_service.core.observe import RunLog, RunObserver, RunReport
from engine_service.core.registry import ToolRegistry
from engine_service.core.resume import ResumePoint
from engine_service.core.rounds import RoundReader
from engine_service.core.state import SharedState
from engine_service.core.store import Checkpoint, SessionStore
from engine_service.core.tool import ToolContext, ToolResult
from engine_service.core.tool_calls import ToolRunner
from engine_service.core.trace import NO_TRACER, Tracer
from engine_service.core.transcript import Transcript

if TYPE_CHECKING:
    from engine_service.core.deliveries import Delivery

__all__ = ["Run"]

log = logging.getLogger(__name__)


class Run:
    """The loop of one run. ``task`` is the asyncio task running ``main``."""

    def __init__(
        self,
        *,
        store: SessionStore,
        model: ChatModel,
        tools: ToolRegistry,
        limits: RunLimits,
        hub: SessionHub,
        run_input: RunInput,
        incoming: list[Message],
        history: list[Message],
        state: JSON,
        on_done: Callable[[Run], None],
        on_storage_error: Callable[[StorageUnavailable], None] = lambda exc: None,
        decisions: Sequence[Decision] = (),
        tracer: Tracer = NO_TRACER,
        observer: RunObserver | None = None,
        principal: str = "",
        session_key: str = "",
        title: str = "",
        budget: TokenBudget | None = None,
        checkpoint: Checkpoint | None = None,
        anchors: Anchors | None = None,
        replica: str = "",
        resume_point: ResumePoint | None = None,
        opened: Sequence[ev.Event] = (),
    ) -> None:
        """``resume_point``: where a run resumed after its engine died goes on
        (``core.resume``); None: a new run. ``opened``: ``begin_run`` stored the run's
        RUN_STARTED and ``incoming`` (its opening, in ``hub``), stamped already."""
        self.store = store
        self.opened = opened
        self.point = resume_point or ResumePoint(0)
        self.resumed = self.point.resumes
        """How many times the run was resumed after its engine died (0: never)."""
        self.title = title
        """The title this run gives its untitled conversation, from its first message."""
        self.session_key = session_key
        """``ToolContext.session_key`` of this run's session."""
        self.tracer = tracer
        self.model = model
        self.tools = tools
        self.limits = limits
        self.hub = hub
        self.input = run_input
        self.session_id = run_input.session_id
        self.run_id = run_input.run_id
        self.incoming = incoming
        self.decisions = list(decisions)
        """A person's answers to the session's pending interrupts, carried out first."""
        self._input_taken = False
        self._on_done = on_done
        self._on_storage_error = on_storage_error
        self._storage_failure: StorageUnavailable | None = None
        self.out = Outbox(
            store,
            hub,
            self.run_id,
            limits,
            on_failure=self.fail,
            on_lost=self.lose,
            replica=replica,
        )
        """Publishes the run's events and stores them behind it."""
        hold = self.out.hold
        self.state = SharedState(
            lambda value: self.out.fenced(store.set_state(self.session_id, value, hold=hold)),
            state,
            on_failure=self.fail,
        )
        """The session's shared state, as tools read and set it."""
        self.out.count_opened(opened)
        self.emit = self.out.emit
        self.settled = True
        """False while the run's end could not be stored (the engine retries it)."""
        self.end_deliveries: Callable[[Run], Awaitable[Sequence[Delivery]]] | None = None
        """The outbox rows of the run's end (its webhook, its A2A push updates), stored
        with the end (``Notices``)."""
        self.delivery_stored = False
        """Whether such rows were stored with the run's end (they only need sending)."""
        self.final: ev.RunFinished | ev.RunError | None = None
        self.status = RunStatus.RUNNING
        self.task: asyncio.Task[None] | None = None
        self._work: asyncio.Task[ev.RunFinished] | None = None
        self._stop_requested = False
        self.handing_over = False
        """Set by ``hand_over``: the run stops at its next step boundary, left RUNNING
        for another replica to resume."""
        self.lost_at = 0
        """Non-zero once another replica closed this run (the store's last seq then): the
        run stops without writing anything more."""
        self.lost_to = ""
        """Once lost: the run holding the session on the other replica then (this run's id
        while the replica that resumed it answers), which the followers here go on
        following from the store."""
        room = limits.max_event_bytes - MESSAGE_ROOM
        self.transcript = Transcript(
            store,
            self.session_id,
            self.run_id,
            history,
            room=room,
            emit=self.emit,
            store_input=lambda messages, title, now: self.out.store_messages(
                messages, title=title, now=now
            ),
            replace_input=lambda messages: self.out.fenced(
                store.replace_messages(self.session_id, messages, hold=self.out.hold)
            ),
        )
        """The session's messages, and what the run adds to them."""
        self.report = RunReport(self.session_id, self.run_id, principal)
        """What the log and the metrics get at the run's start and end."""
        self.rounds = RoundReader(
            model,
            tracer,
            emit=self.emit,
            on_first_token=self.report.first_token_now,
            send_now=self.out.send_now,
            max_answer_bytes=limits.max_answer_bytes,
            max_tool_calls=limits.max_tool_calls_per_round,
            round_timeout=limits.round_timeout,
        )
        """Reads each LLM round; what is open stays there, so a stop can close it."""
        self._usage = self.rounds.usage
        if self.point.usage_before is not None:  # what its first engines used counts
            self._usage.add(self.point.usage_before)
        self._observer: RunObserver = observer or RunLog()
        self.tool_runner = ToolRunner(
            tools,
            self.transcript,
            lambda call_id: ToolContext(
                session_id=self.session_id,
                run_id=self.run_id,
                tool_call_id=call_id,
                emit=self.emit,
                get_state=lambda: self.state.value,
                set_state=self.state.set,
                session_key=self.session_key,
                max_state_bytes=limits.max_state_bytes,
                call_run_id=self.transcript.made_by(call_id),
            ),
            default_limit=limits.tool_timeout,
            tracer=tracer,
            outcomes=self.report.tool_calls,
            stopping=lambda: self.handing_over,
            store_now=self.out.store_now,
            idempotent=limits.idempotent,
        )
        """Runs the engine's tools, each result stored as it lands."""
        self.person = PersonInTheLoop(
            store,
            self.session_id,
            self.run_id,
            self.tool_runner,
            limits.interrupt_expiry,
            limits.approval,
            resolve=lambda: self.out.fenced(
                store.resolve_interrupts(self.session_id, self.run_id, replica=hold.replica)
            ),
        )
        """Asks a person about gated calls, and carries out their answers."""
        # Context budget (core/context.py): builds each request within the model's window,
        # from the session's checkpoint and ``history`` (the messages after it).
        self.llm = LlmRounds(
            RunContext(
                limits.context,
                self.session_id,
                model,
                anchors or Anchors(),
                lambda kept: self.out.fenced(
                    store.save_checkpoint(run_input.session_id, kept, hold=hold)
                ),
                self.emit,
                checkpoint,
                tracer=tracer,
            ),
            self.rounds,
            system_prompt=limits.system_prompt,
            client_context=run_input.context,
            messages=lambda: self.transcript.messages,
            budget=budget,
            principal=principal,
        )
        """Asks each LLM round within the window and the token budget."""

    # -- control ------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._traced_main(), name=f"run {self.run_id}"
        )

    def stop(self) -> None:
        """Stop the work in flight; ``main`` closes the run as cancelled."""
        self._stop_requested = True
        if self._work is not None:
            self._work.cancel()

    def hand_over(self) -> None:
        """Stop here and leave the run to another replica (a stopping engine, a shared
        store): what was published is stored, nothing is closed, and the run stays
        RUNNING; the engine releases its lease and another resumes it (``core.resume``).
        An LLM round in flight is cut now (it is asked again there); running tools may
        finish first (their results stored), and the run stops before its next round."""
        self.handing_over = True
        if not self.tool_runner.running and self._work is not None:
            self._work.cancel()

    def lose(self, elsewhere: Elsewhere) -> None:
        """Another replica closed this run or took it over (our lease lapsed): stop, and
        write nothing more."""
        self.note_lost(elsewhere)
        self.stop()

    def note_lost(self, elsewhere: Elsewhere) -> None:
        """Another replica closed this run or took it over: nothing more is written here."""
        self.lost_at = max(elsewhere.last_seq, 1)
        self.lost_to = elsewhere.active_run_id

    def fail(self, exc: StorageUnavailable) -> None:
        """Stop the run because the store failed; ``main`` ends it with RUN_ERROR."""
        self._note_storage_failure(exc)
        if self._work is not None:
            self._work.cancel()

    def _note_storage_failure(self, exc: StorageUnavailable) -> None:
        if self._storage_failure is None:
            self._storage_failure = exc
            self._on_storage_error(exc)

    async def closed_elsewhere(self) -> Elsewhere | None:
        """The store's state if another replica has closed this run or taken it over,
        else None."""
        return await self.out.closed_elsewhere()

    # -- the run ------------------------------------------------------------------

    async def _traced_main(self) -> None:
        """``main`` inside the run's span (a child of the RPC that started the run)."""
        attributes = {"agentik.session.id": self.session_id, "agentik.run.id": self.run_id}
        with self.tracer.span("agentik.run", attributes) as span:
            await self.main()
            span.set("agentik.run.outcome", self.status.value)
            span.set("gen_ai.usage.input_tokens", self._usage.input_tokens)
            span.set("gen_ai.usage.output_tokens", self._usage.output_tokens)
            if isinstance(self.final, ev.RunError):
                span.fail(self.final.code, self.final.message)

    async def main(self) -> None:
        flusher = asyncio.get_running_loop().create_task(self.out.flush_continually())
        final: ev.RunFinished | ev.RunError
        self.report.started = time.monotonic()
        self._observer.run_started(self.report)
        try:
            asks_early = not self.decisions and not self.resumed
            if self.opened:  # RUN_STARTED and the input were stored as the run began
                self.transcript.stage(self.incoming, self.input.reconcile, stored=True)
                asks_early = False  # nothing is written before the answer is read
            elif asks_early:
                # The first LLM request goes first, before anything is written: the LLM
                # answers while RUN_STARTED and the input are stored, and its answer is
                # read (and published) only once they are.
                self.transcript.stage(self.incoming, self.input.reconcile)
                await self.llm.ask_early(self._specs() if self.limits.max_tool_rounds else [])
            if self.resumed or self.opened:
                self._input_taken = True  # stored as it began, or before its engine died
            else:
                self.emit(ev.RunStarted(parent_run_id=self.input.parent_run_id))
                if not asks_early:
                    await self.out.let_followers_send()
                # else RUN_STARTED is stored with the input, in one write (``_take_input``):
                # the flusher, given a turn now, would store it alone, a write before it.
            if self.input.state is UNSET and self.state.value is not None and not self.resumed:
                # The client sent no state: give it the session's, so this run's deltas apply.
                self.emit(ev.StateSnapshot(self.state.value))
            # The client's messages are stored even if a stop comes right away (after
            # the person's answers, when there are some: a tool result follows its call).
            if asks_early:
                await self._take_input()
            if self._storage_failure is not None:
                raise self._storage_failure
            if not self._stop_requested:
                self._work = asyncio.get_running_loop().create_task(self._loop())
                final = await self._work
                self.status = (
                    RunStatus.INPUT_REQUIRED
                    if final.outcome is ev.Outcome.INTERRUPT
                    else RunStatus.SUCCEEDED
                )
            else:
                raise asyncio.CancelledError
        except asyncio.CancelledError:
            if self.lost_at or self.handing_over:
                final = ev.RunFinished(outcome=ev.Outcome.CANCELLED)
            elif self._storage_failure is not None:
                final = await self._failed(_storage_error(self._storage_failure))
            elif not self._stop_requested:
                self._report_end(ev.RunFinished(outcome=ev.Outcome.CANCELLED), "task cancelled")
                raise
            else:
                try:
                    await self._close_open(stopped=True)
                    if not self._input_taken:
                        await self._take_input()
                    final = ev.RunFinished(
                        outcome=ev.Outcome.CANCELLED, usage=self._usage_or_none()
                    )
                    self.status = RunStatus.INTERRUPTED
                except StorageUnavailable as exc:  # the partial answer could not be kept
                    self._note_storage_failure(exc)
                    final = _storage_error(exc)
                    self.status = RunStatus.FAILED
                except (AlreadyExists, InvalidInput) as exc:
                    # Stopped because our leases lapsed: another replica may have closed
                    # the run and kept the partial answer already.
                    elsewhere = await self.closed_elsewhere()
                    if elsewhere is None:  # refused for another reason: the run fails
                        final = self._not_kept(exc.message)
                    else:
                        self.note_lost(elsewhere)
                        final = ev.RunFinished(outcome=ev.Outcome.CANCELLED)
                except asyncio.CancelledError:
                    if self.lost_at:
                        # Stopped because our leases lapsed, and another replica took the
                        # run over or closed it: the store refused what closing it here
                        # would have kept (``Outbox.fenced``); nothing more is written here.
                        final = ev.RunFinished(outcome=ev.Outcome.CANCELLED)
                    elif self._storage_failure is not None:  # the store refused it
                        final = _storage_error(self._storage_failure)
                        self.status = RunStatus.FAILED
                    else:
                        raise
        except StorageUnavailable as exc:
            self._note_storage_failure(exc)
            release(exc)  # answered: see the end of this method's ``finally``
            final = await self._failed(_storage_error(exc))
        except BudgetExceeded as exc:
            self.report.error_cause, self.report.failed_in = exc.message, "budget"
            release(exc)
            final = await self._failed(ev.RunError(message=exc.message, code=exc.code))
        except LLMError as exc:
            # The client is told what failed; where (endpoint, cause) goes to the log.
            log.warning("run %s failed: %s: %s", self.run_id, exc.code, exc.detail)
            self.report.error_cause, self.report.failed_in = exc.detail, "llm"
            release(exc)
            final = await self._failed(ev.RunError(message=exc.message, code=exc.code))
        except Exception as exc:
            log.exception("run %s failed", self.run_id)
            self.report.error_cause = f"{type(exc).__name__}: {exc}"
            self.report.failed_in = "internal"
            release(exc)
            message = f"internal error (see the engine log for run {self.run_id})"
            final = await self._failed(ev.RunError(message=message, code="internal"))
        finally:
            flusher.cancel()
            self.rounds.cancel_early()
            # A failed run's error is held where it was raised (the work's task, the early
            # request's future, a parser) and its traceback holds the run's frames, the
            # request to the LLM among them: a cycle the collector would free only on its next
            # pass. The error is released once answered (``collector.release``) and the
            # task let go here.
            self._work = None
        await self.rounds.drop_early()
        if self.handing_over and not self.lost_at:
            await self._handed_over(final)
            return
        if self.lost_at:
            # The store holds the run's end as the other replica wrote it; ours would
            # contradict it (and its seqs are taken).
            self.status = RunStatus.INTERRUPTED
            self._report_end(final, "another replica closed the run")
            self._on_done(self)
            return
        if self.input.messages_snapshot and isinstance(final, ev.RunFinished):
            # The most recent messages that fit in one event: the whole history is the
            # messages list's to page through.
            room = self.limits.max_event_bytes - MESSAGE_ROOM
            # The latest messages, from the store once a checkpoint keeps older ones out.
            history = await self.llm.context.snapshot_history(
                self.store, self.transcript.messages, room
            )
            self.emit(ev.MessagesSnapshot(messages=bounded_snapshot(history, room)))
        if isinstance(final, ev.RunError) and final.usage is None:
            final.usage = self._usage_or_none()
        self.final = final = self.out.publish_end(final)
        self._report_end(final)
        try:
            await self.settle()
        except StorageUnavailable as exc:
            # The end could not be stored; the engine stores it once the store writes again.
            self.settled = False
            if not self.store.shared:
                # One engine: nobody else can close the run, so clients get its end from
                # memory now (the one case they see events not stored yet).
                self.hub.show_unstored()
            self._note_storage_failure(exc)
            log.warning("run %s ended but could not be stored: %s", self.run_id, exc.message)
        except InvalidInput as exc:
            elsewhere = await self.closed_elsewhere()
            if elsewhere is None:
                raise
            # Closed by another replica while this one stalled: its end is the stored one.
            log.warning("run %s was closed by another replica: %s", self.run_id, exc.message)
            self.note_lost(elsewhere)
            self.status = RunStatus.INTERRUPTED
        finally:
            self._on_done(self)

    async def _handed_over(self, final: ev.RunFinished | ev.RunError) -> None:
        """Store what was published, and let go of the run: it stays RUNNING."""
        self.rounds.close()
        try:
            await self.out.flush()
        except (StorageUnavailable, InvalidInput) as exc:
            log.warning("run %s: its last events could not be stored: %s", self.run_id, exc)
        self.lost_at = max(self.hub.last_seq, 1)  # nothing more is written here
        self._report_end(final, "handed over to another replica")
        self._on_done(self)

    def _report_end(self, final: ev.RunFinished | ev.RunError, cause: str = "") -> None:
        failure = self._storage_failure.message if self._storage_failure else ""
        self.report.close(final, self._usage, self.model.name, cause, failure)
        self._observer.run_finished(self.report)

    def _not_kept(self, why: str) -> ev.RunError:
        """The end of a stopped run whose partial answer the store refused (not because
        another replica has the run): a failed run, the conversation free again."""
        failure = StorageUnavailable(
            f"storage unavailable: the stopped run's partial answer was not kept: {why}"
        )
        self._note_storage_failure(failure)
        self.status = RunStatus.FAILED
        return _storage_error(failure)

    async def settle(self) -> None:
        """Store the run's last events and its end in one transaction."""
        assert self.final is not None
        deliveries: Sequence[Delivery] = ()
        try:
            if self.end_deliveries is not None:
                deliveries = await self.end_deliveries(self)
        except Exception:  # the webhook is lost, not the run's end (logged)
            log.exception("run %s: its webhook could not be made", self.run_id)
        await self.out.settle(self.status, self.final, self._usage_or_none(), deliveries)
        self.delivery_stored = bool(deliveries)
        self.settled = True

    async def _loop(self) -> ev.RunFinished:
        client_tools = {t.name: t for t in self.input.tools}
        specs = self._specs()
        if self.decisions:
            await self.person.carry_out(self.decisions)
            await self._take_input()
        # A resumed run goes on with the calls its cut round left unfinished as that round
        # would have (``core.resume``): those that wait for a person are asked again, the
        # others run; the calls in doubt are asked about (never silently twice). A sub-agent
        # a call started (again) may have stopped to ask: this run's person.
        point = self.point
        end = await self._calls(point.rerun, point.pending, in_doubt=point.ask_again)
        if end is not None:
            return end
        rounds = point.rounds_done
        while True:
            if self.handing_over:
                raise asyncio.CancelledError  # at a step boundary: another replica goes on
            offer = specs if rounds < self.limits.max_tool_rounds else []
            request = await self.llm.request(offer)
            assistant = await self.llm.ask(request)
            if assistant.content or assistant.tool_calls:
                await self.transcript.add(assistant)
            if not assistant.tool_calls or not offer:
                return ev.RunFinished(usage=self._usage_or_none())
            if self._usage.total_tokens:
                # A checkpoint: an engine that resumes the run counts these tokens too.
                await self.out.fenced(
                    self.store.note_usage(
                        self.session_id, self.run_id, self._usage, replica=self.out.replica
                    )
                )
            pending = [c.id for c in assistant.tool_calls if c.name in client_tools]
            ours = [c for c in assistant.tool_calls if c.name not in client_tools]
            end = await self._calls(ours, pending)
            if end is not None:
                return end
            rounds += 1

    async def _calls(
        self, calls: list[ToolCall], pending: list[str], *, in_doubt: Sequence[ToolCall] = ()
    ) -> ev.RunFinished | None:
        """Run a round's engine ``calls`` but those that wait for a person
        (``PersonInTheLoop.gated``), whose interrupts are raised, as are those of the calls
        ``in_doubt`` (a resumed run's) and of the runs a call started that stopped to ask
        (``core.hitl.delegated_interrupt``). The run's end when it waits for a person or
        for the client's tools (``pending``: their call ids), else None: the LLM goes on."""
        gated = self.person.gated(calls)
        if len(gated) < len(calls):
            await self.tool_runner.run([c for c in calls if c not in gated])
        interrupts = await self.person.ask(gated)
        interrupts += await self.person.ask(in_doubt, in_doubt=True)
        interrupts += self.person.ask_for(self.tool_runner.take_delegated())
        if interrupts:
            return ev.RunFinished(
                outcome=ev.Outcome.INTERRUPT,
                pending_tool_call_ids=pending,
                usage=self._usage_or_none(),
                interrupts=interrupts,
            )
        if pending:
            return ev.RunFinished(pending_tool_call_ids=pending, usage=self._usage_or_none())
        return None

    def _specs(self) -> list[ToolSpec]:
        """The tools offered to the LLM: the engine's, then the client's."""
        client = [ToolSpec(t.name, t.description, t.parameters) for t in self.input.tools]
        return self.tools.specs() + client

    async def _take_input(self) -> None:
        self._input_taken = True
        if self.input.state is not UNSET:
            await self.state.take(self.input.state)
        await self.transcript.take(self.incoming, self.input.reconcile, self.title)

    # -- ending -------------------------------------------------------------------

    async def _failed(self, final: ev.RunError) -> ev.RunError:
        """The run failed: close what is open (no half-written message is kept)."""
        await self._close_open(stopped=False)
        self.status = RunStatus.FAILED
        return final

    async def _close_open(self, *, stopped: bool) -> None:
        """Close what is open; when stopped keep the partial answer, marked interrupted."""
        partial = self.rounds.close()
        if not stopped:
            return  # a failed round leaves no half-written message behind
        if partial is not None:
            await self.transcript.add(partial)
        await self.tool_runner.close_pending(
            ToolResult("error: interrupted before the tool finished", is_error=True)
        )
        await self.person.close()

    def _usage_or_none(self) -> ev.Usage | None:
        return self._usage if self._usage.total_tokens else None


def _storage_error(exc: StorageUnavailable) -> ev.RunError:
    return ev.RunError(message=exc.message, code=exc.code)
