"""A run's messages: the session's history as the LLM sees it, and what the run adds.

Every message the run adds (the client's input, the assistant's answers, the tool
results) is bounded to one event, stored, put at the end of the history, and then
announced with MESSAGE_STORED.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from engine_service.core import events as ev
from engine_service.core.bounds import bound_message, bound_result
from engine_service.core.clock import utc_now
from engine_service.core.history import new_id
from engine_service.core.models import (
    Message,
    MessageStatus,
    ReconcileMode,
    Role,
    TextPart,
    ToolCall,
)
from engine_service.core.store import SessionStore
from engine_service.core.tool import ToolResult

__all__ = ["Transcript"]


class Transcript:
    """The history of one run's session; ``messages`` is what the next LLM round sees."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        run_id: str,
        messages: list[Message],
        *,
        room: int,
        emit: Callable[[ev.EventBody], object],
        store_input: Callable[[list[Message], str, datetime], Awaitable[None]] | None = None,
        replace_input: Callable[[list[Message]], Awaitable[None]] | None = None,
    ) -> None:
        """``store_input(messages, title, now)``: stores messages the run adds (the
        client's, each answer, each tool result) with the events published before them,
        in one write (``Outbox.store_messages``); without it they are written alone.
        ``replace_input(messages)``: makes the client's messages the whole history, only
        while the run is this replica's (``REPLACE``); without it, unconditionally."""
        self.store = store
        self.session_id = session_id
        self.run_id = run_id
        self.messages = messages
        self._room = room
        """The most bytes one message may hold (``core.bounds``)."""
        self._emit = emit
        self._store_input = store_input
        self._replace_input = replace_input
        self._staged: datetime | None = None
        """When the client's messages were staged (``stage``)."""

    def emit(self, body: ev.EventBody) -> None:
        """Publish an event of the run (bounded, stored behind it)."""
        self._emit(body)

    def stage(
        self, incoming: list[Message], reconcile: ReconcileMode, *, stored: bool = False
    ) -> None:
        """The client's messages in ``messages``, as the next request sees them, before
        they are stored (``take`` stores them; once per run). ``stored``: they are, as
        stamped (a run's opening, ``SessionStore.begin_run``)."""
        if self._staged is not None:
            return
        self._staged = now = utc_now()
        for message in incoming:
            if not stored:
                message.created_at = now
                message.run_id = self.run_id
        if reconcile is ReconcileMode.REPLACE:
            self.messages = list(incoming)
        else:
            self.messages.extend(incoming)

    async def take(self, incoming: list[Message], reconcile: ReconcileMode, title: str) -> None:
        """Store the client's messages (replacing the history with ``REPLACE``); ``title``,
        when given, names the untitled conversation."""
        self.stage(incoming, reconcile)
        now = self._staged or utc_now()
        if reconcile is ReconcileMode.REPLACE:
            if self._replace_input is not None:
                await self._replace_input(incoming)
            else:
                await self.store.replace_messages(self.session_id, incoming)
            if title:
                await self.store.rename_session(self.session_id, title, now)
        elif self._store_input is not None:  # with RUN_STARTED: a run's start waits once
            await self._store_input(incoming, title, now)
        elif incoming or title:  # one write for both
            await self.store.append_messages(self.session_id, incoming, title=title, now=now)
        for message in incoming:
            self._emit(ev.MessageStored(message))

    async def add(self, message: Message) -> None:
        message = bound_message(message, self._room)
        message.created_at = utc_now()
        message.run_id = self.run_id
        if self._store_input is not None:  # with the events published before it
            await self._store_input([message], "", message.created_at)
        else:
            await self.store.append_messages(self.session_id, [message])
        self.messages.append(message)
        self._emit(ev.MessageStored(message))

    def made_by(self, call_id: str) -> str:
        """The run whose stored assistant message made the call ("" when not found)."""
        for message in reversed(self.messages):
            if message.role is Role.ASSISTANT and any(c.id == call_id for c in message.tool_calls):
                return message.run_id
        return ""

    async def add_result(self, call: ToolCall, result: ToolResult) -> None:
        """Publish a tool's result (TOOL_CALL_RESULT) and store it as a tool message."""
        message_id = new_id()
        event = bound_result(
            ev.ToolCallResult(message_id, call.id, result.content, result.is_error, result.parts),
            self._room,
        )
        message = Message(
            id=message_id,
            role=Role.TOOL,
            content=[TextPart(event.content), *event.parts],
            tool_call_id=call.id,
            status=MessageStatus.ERROR if result.is_error else MessageStatus.COMPLETE,
        )
        self._emit(event)
        await self.add(message)
