"""One run (turn): the chat loop that turns LLM deltas and tool calls into events.

A ``Turn`` is owned by the engine, not by any RPC: it runs as its own task until it
finishes, fails or is interrupted, and publishes every event into the session's hub.

Order of a run: RUN_STARTED; MESSAGE_STORED for the new client messages; for each LLM
round the reasoning/text/tool-call events, MESSAGE_STORED for the assistant message, then
TOOL_CALL_RESULT + MESSAGE_STORED per engine tool; finally RUN_FINISHED or RUN_ERROR.
Everything opened is closed before the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.bounds import (
    MESSAGE_ROOM,
    body_size,
    bound_body,
    bound_message,
    bound_result,
    bounded_snapshot,
    split_text,
)
from engine_service.core.chat import (
    ChatModel,
    ChatRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
    UsageDelta,
)
from engine_service.core.context import (
    SMALLEST_MESSAGE,
    Anchors,
    ContextLimits,
    RunContext,
    is_overflow,
)
from engine_service.core.errors import (
    AlreadyExists,
    InvalidInput,
    LLMError,
    StorageUnavailable,
)
from engine_service.core.history import new_id
from engine_service.core.hitl import ASK_USER, AskUserTool, Decision, interrupt_for, needs_approval
from engine_service.core.hub import SessionHub
from engine_service.core.ids import is_valid_id
from engine_service.core.models import (
    JSON,
    UNSET,
    Interrupt,
    Message,
    MessageStatus,
    ReconcileMode,
    Role,
    RunInput,
    RunStatus,
    TextPart,
    ToolCall,
)
from engine_service.core.observe import RunLog, RunObserver, RunReport, ToolOutcome
from engine_service.core.registry import ToolRegistry
from engine_service.core.state import DEFAULT_MAX_STATE_BYTES
from engine_service.core.store import Checkpoint, SessionStore
from engine_service.core.tool import ToolContext, ToolError, ToolResult
from engine_service.core.trace import NO_TRACER, Span, Tracer

__all__ = ["Turn", "TurnLimits"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnLimits:
    system_prompt: str = ""
    max_tool_rounds: int = 8
    tool_timeout: float = 30.0
    flush_interval: float = 0.0
    """Seconds a flush waits, after an event is published, to gather more events into
    one write; 0: the next turn of the loop. Events published while a write is in flight
    go in the next write (group commit). Followers see an event once it is stored, so
    this is added to every token's latency."""
    seq_block: int = 512
    """Seqs reserved in the store ahead of publishing: a crash skips them, never reuses
    them. The run tops the reservation up at every flush when half of it is used."""
    approval: tuple[str, ...] = ()
    """Engine tools (names or globs) whose calls wait for a person's approval."""
    interrupt_expiry: float = 0.0
    """Seconds after which an unanswered interrupt counts as declined; 0: never."""
    max_state_bytes: int = DEFAULT_MAX_STATE_BYTES
    """The session's shared state as JSON, at most; a patch is bounded by it as it applies."""
    max_event_bytes: int = 1024 * 1024
    """The largest event the run makes (``core.bounds``): longer deltas are split, tool
    results and messages clipped with a note, the messages snapshot bounded."""
    buffer_bytes: int = 8 * 1024 * 1024
    """Stored events the session's hub keeps for readers that are behind; past this it
    forgets them, and those readers read them from the store."""
    context: ContextLimits = field(default_factory=ContextLimits)
    """The model's context budget and how the conversation is compacted (``core.context``)."""


_DELTAS = (ev.TextMessageContent, ev.ReasoningMessageContent, ev.ToolCallArgs)
"""Bodies that are pieces of a longer text: split, never clipped, when too long."""


@dataclass(slots=True)
class _OpenCall:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)
    started: bool = False


def _now() -> datetime:
    return datetime.now(UTC)


class Turn:
    """The run loop of one turn. ``task`` is the asyncio task running ``main``."""

    def __init__(
        self,
        *,
        store: SessionStore,
        model: ChatModel,
        tools: ToolRegistry,
        limits: TurnLimits,
        hub: SessionHub,
        run_input: RunInput,
        incoming: list[Message],
        history: list[Message],
        state: JSON,
        on_done: Callable[[Turn], None],
        on_storage_error: Callable[[StorageUnavailable], None] = lambda exc: None,
        decisions: Sequence[Decision] = (),
        tracer: Tracer = NO_TRACER,
        observer: RunObserver | None = None,
        principal: str = "",
        session_key: str = "",
        title: str = "",
        checkpoint: Checkpoint | None = None,
        anchors: Anchors | None = None,
    ) -> None:
        self.store = store
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
        self.session_id = run_input.thread_id
        self.run_id = run_input.run_id
        self.incoming = incoming
        self.state = state
        self.decisions = list(decisions)
        """A person's answers to the session's pending interrupts, carried out first."""
        self._resolving = False
        self._input_taken = False
        self._on_done = on_done
        self._on_storage_error = on_storage_error
        self._storage_failure: StorageUnavailable | None = None
        self._unflushed = asyncio.Event()
        """Set when an event is published: the flusher stores it (``_flush_continually``)."""
        self.settled = True
        """False while the run's end could not be stored (the engine retries it)."""
        self.final: ev.RunFinished | ev.RunError | None = None
        self.status = RunStatus.RUNNING
        self.task: asyncio.Task[None] | None = None
        self._work: asyncio.Task[ev.RunFinished] | None = None
        self._interrupt_requested = False
        self.lost_at = 0
        """Non-zero once another replica closed this run (the store's last seq then): the
        run stops without writing anything more."""
        self._followers_woken = False
        self._history = history
        self._usage = ev.Usage()
        # What is open right now, so an interrupt can close it and keep the partial answer.
        self._message_id = ""
        self._text_open = False
        self._text: list[str] = []
        self._reasoning_id = ""
        self._calls: dict[int, _OpenCall] = {}
        self._pending_results: dict[str, ToolCall] = {}
        self._split_at = (limits.max_event_bytes - MESSAGE_ROOM) // 4
        """A delta of more characters than this may need splitting."""
        self._buffered = 0
        """Bytes published into the hub since it last forgot its stored events."""
        self.report = RunReport(self.session_id, self.run_id, principal)
        """What the log and the metrics get at the run's start and end."""
        self._observer: RunObserver = observer or RunLog()
        # Context budget (core/context.py): builds each request within the model's window,
        # from the session's checkpoint and ``history`` (the messages after it).
        session_id = self.session_id
        self.context = RunContext(
            limits.context,
            session_id,
            model,
            anchors or Anchors(),
            lambda checkpoint: store.save_checkpoint(session_id, checkpoint),
            self.emit,
            checkpoint,
            tracer=tracer,
        )

    # -- control ------------------------------------------------------------------

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(
            self._traced_main(), name=f"run {self.run_id}"
        )

    def interrupt(self) -> None:
        """Stop the work in flight; ``main`` closes the run as cancelled."""
        self._interrupt_requested = True
        if self._work is not None:
            self._work.cancel()

    def lose(self, last_seq: int) -> None:
        """Another replica closed this run (our lease lapsed): stop, and write nothing more."""
        self.lost_at = max(last_seq, 1)
        self.interrupt()

    def emit(self, body: ev.EventBody) -> ev.Event:
        """Publish ``body`` bounded to ``max_event_bytes`` (``core.bounds``): a longer
        delta goes out as several deltas (the last one is returned), anything else is
        clipped."""
        if isinstance(body, _DELTAS):
            delta = body.delta
            self._buffered += len(delta)
            if len(delta) > self._split_at:
                pieces = split_text(delta, self.limits.max_event_bytes - MESSAGE_ROOM)
                for piece in pieces[:-1]:
                    self._publish(dataclasses.replace(body, delta=piece))
                body = dataclasses.replace(body, delta=pieces[-1])
        else:
            body = bound_body(body, self.limits.max_event_bytes)
            self._buffered += body_size(body)
        return self._publish(body)

    def _publish(self, body: ev.EventBody) -> ev.Event:
        if self.hub.waiting:
            self._followers_woken = True
        event = self.hub.publish(self.run_id, body)
        self._unflushed.set()
        return event

    def fail(self, exc: StorageUnavailable) -> None:
        """Stop the run because the store failed; ``main`` ends it with RUN_ERROR."""
        self._note_storage_failure(exc)
        if self._work is not None:
            self._work.cancel()

    def _note_storage_failure(self, exc: StorageUnavailable) -> None:
        if self._storage_failure is None:
            self._storage_failure = exc
            self._on_storage_error(exc)

    async def _let_followers_send(self) -> None:
        """Give the flusher and woken followers their turn on the loop now.

        The LLM's chunks arrive in bursts that the loop could parse without pausing; a
        follower that is waiting would then see the first token only after the burst.
        """
        if self._followers_woken:
            self._followers_woken = False
            await asyncio.sleep(0)

    async def flush(self) -> None:
        """Store the events published so far, topping up the reserved seqs when half of
        the block is used; then followers may see them."""
        hub = self.hub
        async with hub.flush_lock:
            pending = hub.unflushed()
            block = self.limits.seq_block
            reserve = hub.last_seq + block if hub.last_seq + block // 2 > hub.reserved_seq else 0
            if not pending and not reserve:
                return
            write = asyncio.ensure_future(
                self.store.append_events(self.session_id, pending, reserve_through=reserve)
            )
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The periodic flusher is cancelled when the run ends, perhaps mid-write:
                # the write goes on (it may already be committed). Wait for it and record
                # what it stored before the lock goes, or the final store would write the
                # same events again.
                await asyncio.wait([write])
                if not write.cancelled() and write.exception() is None:
                    self._flushed(pending, reserve)
                raise
            self._flushed(pending, reserve)

    def _flushed(self, pending: list[ev.Event], reserve: int) -> None:
        hub = self.hub
        hub.reserved_seq = max(hub.reserved_seq, reserve)
        if pending:
            hub.stored(pending[-1].seq)
        self._forget_if_over()

    async def _flush_continually(self) -> None:
        """Store events as soon as they are published: one write at a time, each taking
        everything published meanwhile (group commit), so a token waits for about one
        write before followers see it, and a burst costs one write."""
        unflushed = self._unflushed
        while True:
            await unflushed.wait()
            if self.limits.flush_interval:
                await asyncio.sleep(self.limits.flush_interval)
            unflushed.clear()
            try:
                await self.flush()
            except StorageUnavailable as exc:
                self.fail(exc)
                return
            except InvalidInput as exc:
                await self._refused(exc)
                return

    async def _refused(self, exc: InvalidInput) -> None:
        """The store refused the run's events: their seqs no longer follow its last one,
        because another replica closed the run (this engine stalled past its lease) and
        stored its closing events there. Stop without writing anything more: followers
        read that replica's end from the store, and never see the refused events."""
        closed_at = await self.closed_elsewhere()
        if closed_at is None:
            log.error("run %s: the store refused its events: %s", self.run_id, exc.message)
            self.fail(StorageUnavailable("storage unavailable: the store refused the events"))
            return
        log.warning(
            "run %s of session %s was closed by another replica; stopping it here",
            self.run_id,
            self.session_id,
        )
        self.lose(closed_at)

    async def closed_elsewhere(self) -> int | None:
        """The store's last seq if another replica has closed this run, else None."""
        try:
            run = await self.store.get_run(self.session_id, self.run_id)
            if run.status is RunStatus.RUNNING:
                return None
            return (await self.store.get_session(self.session_id)).last_seq
        except StorageUnavailable as exc:
            self._note_storage_failure(exc)
            return None

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
        flusher = asyncio.get_running_loop().create_task(self._flush_continually())
        final: ev.RunFinished | ev.RunError
        self.report.started = time.monotonic()
        self._observer.run_started(self.report)
        try:
            self.emit(ev.RunStarted(parent_run_id=self.input.parent_run_id))
            await self._let_followers_send()
            if self.input.state is UNSET and self.state is not None:
                # The client sent no state: give it the thread's, so this run's deltas apply.
                self.emit(ev.StateSnapshot(self.state))
            # The client's messages are stored even if an interrupt comes right away (after
            # the person's answers, when there are some: a tool result follows its call).
            if not self.decisions:
                await self._take_input()
            if self._storage_failure is not None:
                raise self._storage_failure
            if not self._interrupt_requested:
                self._work = asyncio.get_running_loop().create_task(self._turn())
                final = await self._work
                self.status = (
                    RunStatus.INPUT_REQUIRED
                    if final.outcome is ev.Outcome.INTERRUPT
                    else RunStatus.SUCCEEDED
                )
            else:
                raise asyncio.CancelledError
        except asyncio.CancelledError:
            if self.lost_at:
                final = ev.RunFinished(outcome=ev.Outcome.CANCELLED)
            elif self._storage_failure is not None:
                await self._close_open(interrupted=False)
                final = _storage_error(self._storage_failure)
                self.status = RunStatus.FAILED
            elif not self._interrupt_requested:
                self._report_end(ev.RunFinished(outcome=ev.Outcome.CANCELLED), "task cancelled")
                raise
            else:
                try:
                    await self._close_open(interrupted=True)
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
                except (AlreadyExists, InvalidInput):
                    # Stopped because our leases lapsed: another replica may have closed
                    # the run and kept the partial answer already.
                    closed_at = await self.closed_elsewhere()
                    if closed_at is None:
                        raise
                    self.lost_at = max(closed_at, 1)
                    final = ev.RunFinished(outcome=ev.Outcome.CANCELLED)
        except StorageUnavailable as exc:
            self._note_storage_failure(exc)
            await self._close_open(interrupted=False)
            final = _storage_error(exc)
            self.status = RunStatus.FAILED
        except LLMError as exc:
            # The client is told what failed; where (endpoint, cause) goes to the log.
            log.warning("run %s failed: %s: %s", self.run_id, exc.code, exc.detail)
            self.report.error_cause, self.report.failed_in = exc.detail, "llm"
            await self._close_open(interrupted=False)
            final = ev.RunError(message=exc.message, code=exc.code)
            self.status = RunStatus.FAILED
        except Exception as exc:
            log.exception("run %s failed", self.run_id)
            self.report.error_cause = f"{type(exc).__name__}: {exc}"
            self.report.failed_in = "internal"
            await self._close_open(interrupted=False)
            final = ev.RunError(
                message=f"internal error (see the engine log for run {self.run_id})",
                code="internal",
            )
            self.status = RunStatus.FAILED
        finally:
            flusher.cancel()
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
            history = await self._snapshot_history(room)  # context budget (core/context.py)
            self.emit(ev.MessagesSnapshot(messages=bounded_snapshot(history, room)))
        final = bound_body(final, self.limits.max_event_bytes)  # type: ignore[assignment]
        self.hub.publish(self.run_id, final, hold=True)
        self.final = final
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
            closed_at = await self.closed_elsewhere()
            if closed_at is None:
                raise
            # Closed by another replica while this one stalled: its end is the stored one.
            log.warning("run %s was closed by another replica: %s", self.run_id, exc.message)
            self.lost_at = max(closed_at, 1)
            self.status = RunStatus.INTERRUPTED
        finally:
            self._on_done(self)

    def _report_end(self, final: ev.RunFinished | ev.RunError, cause: str = "") -> None:
        report = self.report
        report.ended = time.monotonic()
        report.input_tokens = self._usage.input_tokens
        report.output_tokens = self._usage.output_tokens
        if isinstance(final, ev.RunError):
            report.outcome = "error"
            report.error_code = final.code
            report.failed_in = report.failed_in or "storage"
            if not report.error_cause:
                report.error_cause = (
                    self._storage_failure.message if self._storage_failure else final.message
                )
        else:
            report.outcome = final.outcome.value
            if cause:
                report.error_cause = cause
        self._observer.run_finished(report)

    async def settle(self) -> None:
        """Store the run's last events and its end in one transaction."""
        final = self.final
        assert final is not None
        error = final if isinstance(final, ev.RunError) else None
        async with self.hub.flush_lock:
            pending = self.hub.unflushed()
            await self.store.finish_run(
                self.session_id,
                self.run_id,
                self.status,
                _now(),
                error.code if error else "",
                error.message if error else "",
                final.pending_tool_call_ids if isinstance(final, ev.RunFinished) else (),
                events=pending,
                interrupts=final.interrupts if isinstance(final, ev.RunFinished) else (),
            )
            if pending:
                self.hub.stored(pending[-1].seq)
            self._forget_if_over()
        self.settled = True

    def _forget_if_over(self) -> None:
        """Past ``buffer_bytes`` in the hub, drop its stored events: readers that are
        behind read them from the store, so one that does not read pins no more."""
        if self._buffered > self.limits.buffer_bytes:
            self.hub.forget_stored()
            # What is left was published during the write, and is not stored yet.
            self._buffered = sum(body_size(e.body) for e in self.hub.unflushed())

    async def _turn(self) -> ev.RunFinished:
        client_tools = {t.name: t for t in self.input.tools}
        specs = self.tools.specs() + [
            ToolSpec(t.name, t.description, t.parameters) for t in self.input.tools
        ]
        if self.decisions:
            await self._carry_out(self.decisions)
            await self._take_input()
        rounds = 0
        while True:
            offer = specs if rounds < self.limits.max_tool_rounds else []
            # Context budget (core/context.py): the messages compacted to fit the window.
            request = ChatRequest(messages=await self._llm_messages(offer), tools=offer)
            assistant = await self._round_within_window(request)
            if assistant.content or assistant.tool_calls:
                await self._store(assistant)
            if not assistant.tool_calls or not offer:
                return ev.RunFinished(usage=self._usage_or_none())
            pending = [c.id for c in assistant.tool_calls if c.name in client_tools]
            ours = [c for c in assistant.tool_calls if c.name not in client_tools]
            gated = [c for c in ours if self._needs_person(c)]
            await self._run_tools([c for c in ours if c not in gated])
            interrupts = await self._ask(gated)
            if interrupts:
                return ev.RunFinished(
                    outcome=ev.Outcome.INTERRUPT,
                    pending_tool_call_ids=pending,
                    usage=self._usage_or_none(),
                    interrupts=interrupts,
                )
            if pending:
                return ev.RunFinished(pending_tool_call_ids=pending, usage=self._usage_or_none())
            rounds += 1

    # -- the context budget (core/context.py) ----------------------------------------

    async def _llm_messages(self, tools: list[ToolSpec], *, force: bool = False) -> list[Message]:
        return await self.context.messages(
            self.limits.system_prompt, self.input.context, self._history, tools, force=force
        )

    async def _round_within_window(self, request: ChatRequest) -> Message:
        """One LLM round; when the LLM answers that its context is exceeded, one compaction
        and one retry, then ``context_too_long``. The LLM's count of the request is kept
        for counting the next one."""
        before = self._usage.input_tokens
        try:
            assistant = await self._stream_round(request)
        except LLMError as exc:
            if not is_overflow(exc):
                raise
            if self._text or self._calls or self._reasoning_id:  # said mid-answer: no retry
                raise self.context.too_long(self.context.count(request), said=True) from exc
            log.info("run %s: the LLM's context is exceeded; compacting", self.run_id)
            request.messages = await self._llm_messages(request.tools, force=True)
            before = self._usage.input_tokens
            try:
                assistant = await self._stream_round(request)
            except LLMError as again:
                if is_overflow(again):
                    raise self.context.too_long(self.context.count(request), said=True) from again
                raise
        finally:
            # What the summariser used counts as the run's too.
            spent = list(self.context.usage)
            self.context.usage[:] = [0, 0]
            self._usage.input_tokens += spent[0]
            self._usage.output_tokens += spent[1]
            self._usage.total_tokens = self._usage.input_tokens + self._usage.output_tokens
        self.context.observed(request, self._usage.input_tokens - before - spent[0])
        return assistant

    async def _snapshot_history(self, room: int) -> list[Message]:
        """The history a messages snapshot is cut from: what the run holds, or, when a
        checkpoint keeps the older messages out of it, the latest messages from the store
        (as many as could fit in ``room``: bounded, whatever the conversation's length)."""
        if self.context.checkpoint is None:
            return self._history
        try:
            return await self.store.recent_messages(self.session_id, room // SMALLEST_MESSAGE)
        except StorageUnavailable:
            return self._history

    async def _take_input(self) -> None:
        self._input_taken = True
        if self.input.state is not UNSET:
            self.state = self.input.state
            await self.store.set_state(self.session_id, self.state)
        now = _now()
        for message in self.incoming:
            message.created_at = now
            message.run_id = self.run_id
        if self.input.reconcile is ReconcileMode.REPLACE:
            await self.store.replace_messages(self.session_id, self.incoming)
            self._history = list(self.incoming)
        else:
            if self.incoming:
                await self.store.append_messages(self.session_id, self.incoming)
            self._history.extend(self.incoming)
        if self.title:
            await self.store.rename_session(self.session_id, self.title, now)
        for message in self.incoming:
            self.emit(ev.MessageStored(message))

    async def _store(self, message: Message) -> None:
        message = bound_message(message, self.limits.max_event_bytes - MESSAGE_ROOM)
        message.created_at = _now()
        message.run_id = self.run_id
        await self.store.append_messages(self.session_id, [message])
        self._history.append(message)
        self.emit(ev.MessageStored(message))

    # -- one LLM round ------------------------------------------------------------

    async def _stream_round(self, request: ChatRequest) -> Message:
        """One LLM round in its span: model, endpoint, first token, tokens, error code."""
        model = self.model
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model.name}
        if model.endpoint_host:
            attributes["server.address"] = model.endpoint_host
        usage = self._usage
        input_before, output_before = usage.input_tokens, usage.output_tokens
        with self.tracer.span(f"chat {model.name}", attributes) as span:
            try:
                return await self._read_round(request, span)
            except LLMError as exc:
                span.fail(exc.code, exc.message)
                raise
            finally:
                span.set("gen_ai.usage.input_tokens", usage.input_tokens - input_before)
                span.set("gen_ai.usage.output_tokens", usage.output_tokens - output_before)

    async def _read_round(self, request: ChatRequest, span: Span) -> Message:
        self._message_id = new_id()
        self._text = []
        self._calls = {}
        message_id = self._message_id
        emit = self.emit
        waiting = True  # for the first token
        async for delta in self.model.stream(request):
            kind = type(delta)
            if waiting and kind is not UsageDelta:
                span.event("first_token")
                waiting = False
            if kind is TextDelta:
                text = delta.text  # type: ignore[union-attr]
                if not text:
                    continue
                if self._reasoning_id:
                    self._end_reasoning()
                if not self._text_open:
                    if not self.report.first_token:
                        self.report.first_token = time.monotonic()
                    emit(ev.TextMessageStart(message_id))
                    self._text_open = True
                self._text.append(text)
                emit(ev.TextMessageContent(message_id, text))
            elif kind is ToolCallDelta:
                self._tool_call_delta(delta)  # type: ignore[arg-type]
            elif kind is ReasoningDelta:
                self._reasoning_delta(delta.text)  # type: ignore[union-attr]
            elif kind is UsageDelta:
                self._usage.input_tokens += delta.input_tokens  # type: ignore[union-attr]
                self._usage.output_tokens += delta.output_tokens  # type: ignore[union-attr]
                self._usage.total_tokens = self._usage.input_tokens + self._usage.output_tokens
            # Yield to the loop after each delta: the LLM's chunks come in bursts that would
            # otherwise be parsed in one go while the followers' sends (and their completions)
            # wait, and the first token would leave only after the whole burst.
            await asyncio.sleep(0)
        self._end_reasoning()
        self._end_text()
        calls = []
        for call in self._calls.values():  # in the order the calls began
            if not call.started:
                continue
            emit(ev.ToolCallEnd(call.id))
            calls.append(ToolCall(call.id, call.name, "".join(call.arguments)))
        self._calls = {}
        content = [TextPart("".join(self._text))] if self._text else []
        self._text = []
        return Message(id=message_id, role=Role.ASSISTANT, content=list(content), tool_calls=calls)

    def _tool_call_delta(self, delta: ToolCallDelta) -> None:
        call = self._calls.get(delta.index)
        if call is None:
            # The client sends this id back with the result: it must keep the id rule.
            call_id = delta.id if is_valid_id(delta.id) else new_id()
            call = self._calls[delta.index] = _OpenCall(id=call_id, name=delta.name)
        elif delta.name and not call.name:
            call.name = delta.name
        if not call.started and call.name:
            if not self.report.first_token:
                self.report.first_token = time.monotonic()
            self._end_text()
            self.emit(ev.ToolCallStart(call.id, call.name, self._message_id))
            call.started = True
            if call.arguments:
                self.emit(ev.ToolCallArgs(call.id, "".join(call.arguments)))
        if delta.arguments:
            call.arguments.append(delta.arguments)
            if call.started:
                self.emit(ev.ToolCallArgs(call.id, delta.arguments))

    def _reasoning_delta(self, text: str) -> None:
        if not text:
            return
        if not self._reasoning_id:
            if not self.report.first_token:
                self.report.first_token = time.monotonic()
            self._end_text()
            self._reasoning_id = new_id()
            self.emit(ev.ReasoningStart(self._reasoning_id))
            self.emit(ev.ReasoningMessageStart(self._reasoning_id))
        self.emit(ev.ReasoningMessageContent(self._reasoning_id, text))

    def _end_reasoning(self) -> None:
        if self._reasoning_id:
            self.emit(ev.ReasoningMessageEnd(self._reasoning_id))
            self.emit(ev.ReasoningEnd(self._reasoning_id))
            self._reasoning_id = ""

    def _end_text(self) -> None:
        if self._text_open:
            self.emit(ev.TextMessageEnd(self._message_id))
            self._text_open = False

    # -- a person in the loop -------------------------------------------------------

    def _needs_person(self, call: ToolCall) -> bool:
        tool = self.tools.get(call.name)
        if tool is None:
            return False
        if isinstance(tool, AskUserTool):
            return True
        return call.name != ASK_USER and needs_approval(call.name, self.limits.approval)

    async def _ask(self, calls: Sequence[ToolCall]) -> list[Interrupt]:
        """The interrupts the gated calls raise (a malformed question is answered with an
        error instead, and the LLM goes on)."""
        interrupts = []
        now = _now()
        for call in calls:
            asked = interrupt_for(call, new_id(), self.run_id, now, self.limits.interrupt_expiry)
            if isinstance(asked, Interrupt):
                interrupts.append(asked)
            else:
                await self._store_result(call, asked)
        return interrupts

    async def _carry_out(self, decisions: Sequence[Decision]) -> None:
        """Carry out a person's answers: approved calls run (with edited arguments where
        given), the rest become tool results; then the interrupts are no longer pending.

        A call that already has a result (a resume cut short by a crash, and resumed
        again) is not run twice.
        """
        answered = {m.tool_call_id for m in self._history if m.role is Role.TOOL}
        self._resolving = True
        to_run = []
        for decision in decisions:
            call = decision.interrupt.tool_call
            if call.id in answered:
                continue
            if decision.run is not None:
                to_run.append(decision.run)
            else:
                await self._store_result(call, ToolResult(decision.result))
        await self._run_tools(to_run)
        await self.store.resolve_interrupts(self.session_id, self.run_id)
        self._resolving = False

    # -- tools --------------------------------------------------------------------

    async def _run_tools(self, calls: Sequence[ToolCall]) -> None:
        """Run the engine's tools concurrently; each result is published as it lands."""
        self._pending_results = {c.id: c for c in calls}
        async with asyncio.TaskGroup() as group:
            for call in calls:
                group.create_task(self._run_tool(call))

    async def _run_tool(self, call: ToolCall) -> None:
        result = await self._call_tool(call)
        await self._store_result(call, result)

    async def _store_result(self, call: ToolCall, result: ToolResult) -> None:
        self._pending_results.pop(call.id, None)
        message_id = new_id()
        event = bound_result(
            ev.ToolCallResult(message_id, call.id, result.content, result.is_error, result.parts),
            self.limits.max_event_bytes - MESSAGE_ROOM,
        )
        message = Message(
            id=message_id,
            role=Role.TOOL,
            content=[TextPart(event.content), *event.parts],
            tool_call_id=call.id,
            status=MessageStatus.ERROR if result.is_error else MessageStatus.COMPLETE,
        )
        self.emit(event)
        await self._store(message)

    async def _call_tool(self, call: ToolCall) -> ToolResult:
        """The tool's result, in a span: tool name, outcome (its duration is the span's)."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
        }
        with self.tracer.span(f"execute_tool {call.name}", attributes) as span:
            outcome = ToolOutcome.ERROR  # also if the call is cut short (an interrupt)
            try:
                result, outcome = await self._invoke_tool(call)
            finally:
                self.report.tool_calls.append((call.name, outcome))
            span.set("agentik.tool.outcome", "error" if result.is_error else "ok")
            if result.is_error:
                span.fail("tool_error", result.content[:200])
            return result

    async def _invoke_tool(self, call: ToolCall) -> tuple[ToolResult, str]:
        """The tool's result and its ``ToolOutcome``."""
        tool = self.tools.get(call.name)
        if tool is None:
            message = f"error: unknown tool {call.name!r}"
            return ToolResult(message, is_error=True), ToolOutcome.UNKNOWN
        try:
            arguments = json.loads(call.arguments) if call.arguments.strip() else {}
        except json.JSONDecodeError as exc:
            message = f"error: arguments are not valid JSON ({exc})"
            return ToolResult(message, is_error=True), ToolOutcome.ERROR
        if not isinstance(arguments, dict):
            message = "error: arguments must be a JSON object"
            return ToolResult(message, is_error=True), ToolOutcome.ERROR
        context = ToolContext(
            session_id=self.session_id,
            run_id=self.run_id,
            tool_call_id=call.id,
            emit=self.emit,
            get_state=lambda: self.state,
            set_state=self._set_state,
            session_key=self.session_key,
            max_state_bytes=self.limits.max_state_bytes,
        )
        limit = tool.timeout if tool.timeout is not None else self.limits.tool_timeout
        try:
            async with asyncio.timeout(limit):
                result = await tool.call(arguments, context)
        except ToolError as exc:
            return ToolResult(f"error: {exc}", is_error=True), ToolOutcome.ERROR
        except TimeoutError:
            message = f"error: tool {call.name!r} timed out after {limit:g} s"
            return ToolResult(message, is_error=True), ToolOutcome.TIMEOUT
        except Exception as exc:
            log.warning("tool %s raised", call.name, exc_info=True)
            message = f"error: tool {call.name!r} failed: {exc}"
            return ToolResult(message, is_error=True), ToolOutcome.ERROR
        return result, ToolOutcome.ERROR if result.is_error else ToolOutcome.OK

    def _set_state(self, state: JSON) -> None:
        self.state = state
        # Stored right away: the next run must see it even if this one is interrupted.
        task = asyncio.get_running_loop().create_task(self.store.set_state(self.session_id, state))
        task.add_done_callback(self._state_stored)

    def _state_stored(self, task: asyncio.Task[None]) -> None:
        exc = None if task.cancelled() else task.exception()
        if isinstance(exc, StorageUnavailable):
            self.fail(exc)

    # -- ending -------------------------------------------------------------------

    async def _close_open(self, *, interrupted: bool) -> None:
        """Close what is open; on interrupt keep the partial answer, marked interrupted."""
        self._end_reasoning()
        self._end_text()
        for open_call in self._calls.values():
            if open_call.started:
                self.emit(ev.ToolCallEnd(open_call.id))
        self._calls = {}
        if not interrupted:
            return  # a failed round leaves no half-written message behind
        if self._text:
            partial = Message(
                id=self._message_id,
                role=Role.ASSISTANT,
                content=[TextPart("".join(self._text))],
                status=MessageStatus.INTERRUPTED,
            )
            self._text = []
            await self._store(partial)
        for call in list(self._pending_results.values()):
            await self._store_result(
                call, ToolResult("error: interrupted before the tool finished", is_error=True)
            )
        if self._resolving:
            # Every answered call has its result now: the person is not asked again.
            await self.store.resolve_interrupts(self.session_id, self.run_id)
            self._resolving = False

    def _usage_or_none(self) -> ev.Usage | None:
        return self._usage if self._usage.total_tokens else None


def _storage_error(exc: StorageUnavailable) -> ev.RunError:
    return ev.RunError(message=exc.message, code=exc.code)
