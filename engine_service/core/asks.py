"""A person in the loop of one run: the interrupts its gated calls raise, and carrying out
the person's answers (the rules themselves are ``core.hitl``'s)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from engine_service.core.clock import utc_now
from engine_service.core.history import new_id
from engine_service.core.hitl import (
    Decision,
    delegated_interrupt,
    in_doubt_interrupt,
    interrupt_for,
    needs_person,
)
from engine_service.core.models import Interrupt, ResumeEntry, Role, ToolCall
from engine_service.core.store import SessionStore
from engine_service.core.tool import Answers, Delegated, ToolResult
from engine_service.core.tool_calls import ToolRunner

__all__ = ["PersonInTheLoop"]


class PersonInTheLoop:
    """Raises a run's interrupts and carries out the answers to them; ``close`` marks them
    resolved when a stop cut the carrying out short (every answered call has its result)."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        run_id: str,
        tools: ToolRunner,
        expiry: float,
        approval: Sequence[str] = (),
        *,
        resolve: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``approval``: the tools (names or globs) whose calls wait for a person's yes;
        ``resolve``: marks the session's pending interrupts carried out by this run
        (default: ``SessionStore.resolve_interrupts``, the run held by no replica)."""
        self.store = store
        self.session_id = session_id
        self.run_id = run_id
        self.tools = tools
        self.expiry = expiry
        self.approval = tuple(approval)
        self._resolve = resolve or (lambda: store.resolve_interrupts(session_id, run_id))
        self._resolving = False

    def gated(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The calls that wait for a person (``hitl.needs_person``: ``ask_user``, or a tool
        listed for approval). The one place a run decides it, for an LLM round's calls and
        for those of a round its dead engine left unfinished (``core.resume``) alike: such a
        call is never run, nor answered, without the person."""
        registry = self.tools.tools
        return [c for c in calls if needs_person(registry.get(c.name), c.name, self.approval)]

    async def ask(self, calls: Sequence[ToolCall], *, in_doubt: bool = False) -> list[Interrupt]:
        """The interrupts the gated calls raise (a malformed question is answered with an
        error instead, and the LLM goes on); ``in_doubt``: whether to run calls again that
        may already have run (``core.resume``)."""
        interrupts = []
        now = utc_now()
        for call in calls:
            if in_doubt:
                interrupts.append(in_doubt_interrupt(call, new_id(), self.run_id, now, self.expiry))
                continue
            asked = interrupt_for(call, new_id(), self.run_id, now, self.expiry)
            if isinstance(asked, Interrupt):
                interrupts.append(asked)
            else:
                await self.tools.store(call, asked)
        return interrupts

    def ask_for(self, delegated: Sequence[tuple[ToolCall, Delegated]]) -> list[Interrupt]:
        """The interrupts this run raises for those of the runs its calls started (a
        local agent's): the same questions, for this run's person (``hitl``)."""
        now = utc_now()
        return [
            delegated_interrupt(
                call,
                asked,
                given.agent,
                given.conversation_id,
                new_id(),
                self.run_id,
                now,
                self.expiry,
            )
            for call, given in delegated
            for asked in given.interrupts
        ]

    async def carry_out(self, decisions: Sequence[Decision]) -> None:
        """Carry out a person's answers: approved calls run (with edited arguments where
        given), the rest become tool results; then the interrupts are no longer pending.

        A call that already has a result (a resume cut short by a crash, and resumed
        again) is not run twice.
        """
        messages = self.tools.transcript.messages
        answered = {m.tool_call_id for m in messages if m.role is Role.TOOL}
        self._resolving = True
        to_run = []
        forwards: dict[str, tuple[ToolCall, str, list[ResumeEntry]]] = {}
        for decision in decisions:
            call = decision.interrupt.tool_call
            if call.id in answered:
                continue
            if decision.forward is not None:  # the call goes on with the answers
                _, _, entries = forwards.setdefault(call.id, (call, decision.conversation_id, []))
                entries.append(decision.forward)
            elif decision.run is not None:
                to_run.append(decision.run)
            else:
                await self.tools.store(call, ToolResult(decision.result))
        answers = {
            call_id: Answers(conversation_id, entries)
            for call_id, (_, conversation_id, entries) in forwards.items()
        }
        await self.tools.run(to_run + [call for call, _, _ in forwards.values()], answers)
        await self._resolve()
        self._resolving = False

    async def close(self) -> None:
        """A stop cut the carrying out short: every answered call has its result now, so
        the person is not asked again."""
        if self._resolving:
            await self._resolve()
            self._resolving = False
