"""Each LLM round of a run, within the model's window and the principal's token budget.

The request's messages are built within the window (``core.context``: the session's
checkpoint and the messages after it, compacted when they would not fit); a round the LLM
refuses as too long is compacted and asked once more; the principal's budget
(``core.budget``) is checked before the round and charged what it and any summary used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from engine_service.core.budget import TokenBudget
from engine_service.core.chat import ChatRequest, ToolSpec
from engine_service.core.context import RunContext
from engine_service.core.models import ContextItem, Message
from engine_service.core.rounds import RoundReader

__all__ = ["LlmRounds"]


class LlmRounds:
    """Asks the LLM each round of one run."""

    def __init__(
        self,
        context: RunContext,
        reader: RoundReader,
        *,
        system_prompt: str,
        client_context: Sequence[ContextItem],
        messages: Callable[[], list[Message]],
        budget: TokenBudget | None,
        principal: str,
    ) -> None:
        """``messages``: the run's history as it stands (``Transcript.messages``)."""
        self.context = context
        self.reader = reader
        self._system_prompt = system_prompt
        self._client_context = list(client_context)
        self._messages = messages
        self._budget = budget
        self._principal = principal
        self._early: ChatRequest | None = None

    async def messages(self, tools: list[ToolSpec], *, force: bool = False) -> list[Message]:
        """The messages of the next request, within the window (``force``: compacted)."""
        return await self.context.messages(
            self._system_prompt, self._client_context, self._messages(), tools, force=force
        )

    async def ask_early(self, tools: list[ToolSpec]) -> None:
        """Send the run's first request now, while its input is being stored, when nothing
        has to happen first: no compaction (the messages fit as they are) and no token
        budget to check. The next :meth:`request` is this one; the reader reads its answer
        once :meth:`ask` is asked it (``RoundReader.send_early``)."""
        if self._budget is not None and self._budget.enabled:
            return  # checked before each round is asked
        try:
            messages = self.context.fitting(
                self._system_prompt, self._client_context, self._messages(), tools
            )
        except Exception:
            # Asked before RUN_STARTED: the first round builds it again and fails in
            # its place, after the run has started.
            return
        if messages is not None:
            self._early = ChatRequest(messages=messages, tools=tools)
            self.reader.send_early(self._early)
            await asyncio.sleep(0)  # the request goes out before anything is written

    async def request(self, tools: list[ToolSpec]) -> ChatRequest:
        """The next round's request: the early one if it was sent, else its messages built
        within the window (``core.context``: compacted when they would not fit)."""
        early, self._early = self._early, None
        if early is not None:
            return early
        return ChatRequest(messages=await self.messages(tools), tools=tools)

    async def ask(self, request: ChatRequest) -> Message:
        """One LLM round within the window (``RunContext.round``: a compaction and a retry
        when the LLM says its context is exceeded) and within the principal's token budget
        (``core.budget``), which is charged what the round and any summary used."""
        usage = self.reader.usage

        def within() -> Awaitable[Message]:
            return self.context.round(
                request,
                self.reader.read,
                usage,
                said=lambda: self.reader.said_anything,
                rebuild=lambda: self.messages(request.tools, force=True),
            )

        if self._budget is None:
            return await within()
        return await self._budget.spending(self._principal, usage, within)
