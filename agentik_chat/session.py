"""A chat session: turns streamed through a :class:`Renderer`, Ctrl-C, approvals and questions.

Ctrl-C during a turn closes the stream, asks the server to interrupt the turn, and shows the
rest of it (the ``interrupted`` end) from ``/events``: the stream's state after a
KeyboardInterrupt in the middle of a read is not to be trusted, and the conversation's event
log carries everything anyway. A second Ctrl-C propagates: the caller quits.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from agentik_chat.api import AgentikClient, Event, Unreachable
from agentik_chat.render import Renderer, arguments_text

__all__ = ["Ask", "ChatSession", "TurnResult", "decide", "describe"]

Ask = Callable[[str], str]
"""Reads one answer from the person (``input``); raises EOFError or KeyboardInterrupt to stop."""

_TERMINAL = frozenset({"end", "interrupted", "error"})
_PICK_UP_WITHIN = 30.0
"""Seconds to keep trying to pick up a turn whose stream ended before its last event (the
facade was restarted or redeployed mid-turn: the turn goes on in the engine)."""


@dataclass(slots=True)
class TurnResult:
    """How a turn ended: ``outcome`` is ``success``, ``input_required``, ``interrupted`` or
    ``error``; ``interrupts`` what it waits for when ``input_required``."""

    outcome: str
    interrupts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class _Progress:
    last_id: int | None = None
    run_id: str | None = None
    result: TurnResult | None = None
    interrupts: list[dict[str, Any]] = field(default_factory=list)


class ChatSession:
    """One client, one current conversation (created on the first message)."""

    def __init__(
        self,
        client: AgentikClient,
        renderer: Renderer,
        conversation_id: str | None = None,
        agent: str = "",
    ) -> None:
        self.client = client
        self.renderer = renderer
        self.conversation_id = conversation_id
        self.agent = agent
        """The agent of the conversations this session starts ("": the default)."""

    def ensure_conversation(self) -> str:
        if self.conversation_id is None:
            self.conversation_id = str(self.client.create(self.agent)["id"])
        return self.conversation_id

    def pending(self) -> list[dict[str, Any]]:
        """What the current conversation waits for from a person (none for a new one)."""
        if self.conversation_id is None:
            return []
        interrupts: list[dict[str, Any]] = self.client.conversation(self.conversation_id).get(
            "pending_interrupts", []
        )
        return interrupts

    def send(self, text: str) -> TurnResult:
        conversation_id = self.ensure_conversation()
        return self._turn(self.client.send(conversation_id, text))

    def resume(self, decisions: list[dict[str, Any]]) -> TurnResult:
        assert self.conversation_id is not None
        return self._turn(self.client.resume(self.conversation_id, decisions))

    def answer(self, interrupts: list[dict[str, Any]], ask: Ask) -> TurnResult:
        """Ask the person about each interrupt, resume, and go on while the agent asks again."""
        while True:
            decisions = [decide(interrupt, ask) for interrupt in interrupts]
            result = self.resume(decisions)
            if result.outcome != "input_required":
                return result
            interrupts = result.interrupts

    def _turn(self, events: Iterator[Event]) -> TurnResult:
        progress = _Progress()
        try:
            try:
                try:
                    self._show(events, progress)
                except Unreachable:
                    if progress.last_id is None:  # the turn never started, or cannot be found
                        raise
                if progress.result is None:
                    self._pick_up(progress)
            except KeyboardInterrupt:
                # The stream is closed by now (the generator's finally). The interrupt goes
                # out even if Ctrl-C comes again meanwhile: quitting must not leave the turn
                # running.
                assert self.conversation_id is not None
                self.renderer.notice("^C interrupting the turn (Ctrl-C again quits)")
                with _deferred_sigint() as again:
                    self.client.interrupt(self.conversation_id, progress.run_id)
                if again:
                    raise
                self._show(self.client.follow(self.conversation_id, progress.last_id), progress)
                if progress.result is None:  # it ended before the follow began
                    self.renderer.notice("[interrupted]")
        finally:
            # Also when the turn fails: the error the caller prints starts on a line of its own.
            self.renderer.finish()
        return progress.result or TurnResult("interrupted")

    def _pick_up(self, progress: _Progress) -> None:
        """Follow ``/events`` after the last event seen until the turn ends, retrying with a
        backoff while the facade is away; the error once ``_PICK_UP_WITHIN`` has passed."""
        assert self.conversation_id is not None
        self.renderer.notice("the stream broke; picking the turn up again")
        deadline = time.monotonic() + _PICK_UP_WITHIN
        pause = 0.25
        while progress.result is None:
            try:
                self._show(self.client.follow(self.conversation_id, progress.last_id), progress)
                # Ended without the turn's end: the facade went away again, or the turn was
                # over before the follow began (then the conversation is idle: stop there).
                if progress.result is None and self.client.is_idle(self.conversation_id):
                    progress.result = TurnResult("ended")
            except Unreachable:
                if time.monotonic() + pause > deadline:
                    raise
            if progress.result is None:
                time.sleep(pause)
                pause = min(pause * 2, 2.0)

    def _show(self, events: Iterator[Event], progress: _Progress) -> None:
        for event in events:
            if event.id is not None:
                progress.last_id = event.id
            if event.data.get("run_id"):
                progress.run_id = str(event.data["run_id"])
            self.renderer.event(event)
            if event.type == "input_required":
                progress.interrupts = list(event.data.get("interrupts", []))
            elif event.type in _TERMINAL:
                progress.result = _result(event, progress.interrupts)
                return


@contextmanager
def _deferred_sigint() -> Iterator[list[bool]]:
    """Hold Ctrl-C back for the block; the list yielded says whether it came."""
    came: list[bool] = []

    def note(signum: int, frame: FrameType | None) -> None:
        came.append(True)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield came
    finally:
        signal.signal(signal.SIGINT, previous)


def _result(event: Event, interrupts: list[dict[str, Any]]) -> TurnResult:
    if event.type == "end":
        return TurnResult(str(event.data.get("outcome", "success")), interrupts)
    return TurnResult(event.type)


def describe(interrupt: dict[str, Any]) -> str:
    """What an interrupt asks, as one line for a person."""
    if interrupt.get("kind") == "question":
        question = str(interrupt.get("question") or interrupt.get("message") or "")
        choices = interrupt.get("choices") or []
        return question + (f" ({' / '.join(map(str, choices))})" if choices else "")
    message = interrupt.get("message")
    if message:
        return str(message)
    call = interrupt.get("tool_call") or {}
    return f"Approve calling {call.get('name')} with {arguments_text(call.get('arguments'))}?"


def decide(interrupt: dict[str, Any], ask: Ask) -> dict[str, Any]:
    """One decision for ``/resume``, read from the person."""
    decision: dict[str, Any] = {"interrupt_id": interrupt["id"]}
    if interrupt.get("kind") == "question":
        decision["answer"] = ask(f"{describe(interrupt)}\nanswer> ")
        return decision
    while True:
        reply = ask(f"{describe(interrupt)} [y/N/e(dit)] ").strip().lower()
        if reply in ("y", "yes"):
            decision["approve"] = True
            return decision
        if reply in ("", "n", "no"):
            reason = ask("reason (optional)> ").strip()
            decision["approve"] = False
            if reason:
                decision["reason"] = reason
            return decision
        if reply in ("e", "edit"):
            edited = _edit_arguments(interrupt, ask)
            if edited is not None:
                decision.update(approve=True, arguments=edited)
                return decision


def _edit_arguments(interrupt: dict[str, Any], ask: Ask) -> dict[str, Any] | None:
    current = arguments_text((interrupt.get("tool_call") or {}).get("arguments", {}))
    text = ask(f"arguments as JSON (now {current})> ").strip()
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        print(f"not JSON: {exc}")
        return None
    if not isinstance(arguments, dict):
        print("the arguments must be a JSON object")
        return None
    return arguments
