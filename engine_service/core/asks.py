"""A person in the loop of one run: the interrupts its gated calls raise, and carrying out
the person's answers (the rules themselves are ``core.hitl``'s)."""

from __future__ import annotations

from collections.abc import Sequence

from engine_service.core.clock import utc_now
from engine_service.core.history import new_id
from engine_service.core.hitl import Decision, in_doubt_interrupt, interrupt_for
from engine_service.core.models import Interrupt, Role, ToolCall
from engine_service.core.store import SessionStore
from engine_service.core.tool import ToolResult
from engine_service.core.tool_calls import ToolRunner

__all__ = ["PersonInTheLoop"]


class PersonInTheLoop:
    """Raises a run's interrupts and carries out the answers to them; ``close`` marks them
    resolved when a stop cut the carrying out short (every answered call has its result)."""

    def __init__(
        self, store: SessionStore, session_id: str, run_id: str, tools: ToolRunner, expiry: float
    ) -> None:
        self.store = store
        self.session_id = session_id
        self.run_id = run_id
        self.tools = tools
        self.expiry = expiry
        self._resolving = False

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
        for decision in decisions:
            call = decision.interrupt.tool_call
            if call.id in answered:
                continue
            if decision.run is not None:
                to_run.append(decision.run)
            else:
                await self.tools.store(call, ToolResult(decision.result))
        await self.tools.run(to_run)
        await self.store.resolve_interrupts(self.session_id, self.run_id)
        self._resolving = False

    async def close(self) -> None:
        """A stop cut the carrying out short: every answered call has its result now, so
        the person is not asked again."""
        if self._resolving:
            await self.store.resolve_interrupts(self.session_id, self.run_id)
            self._resolving = False
