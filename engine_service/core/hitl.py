"""Human in the loop: which tool calls need a person, what the run asks, and what the
person's answers mean.

A run stops (outcome INTERRUPT) when the LLM calls a tool listed for approval, or the
``ask_user`` tool. Each such call becomes an :class:`Interrupt`, stored on the session
until a later run *resumes* it: the run's ``resume`` entries are checked here
(:func:`admit`, inside the store's transaction, so two resumes cannot both pass) and
turned into :class:`Decision` s the run carries out before the LLM goes on. Pure rules,
no I/O.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from engine_service.core.errors import InputRequired, InvalidInput
from engine_service.core.models import (
    JSON,
    Interrupt,
    InterruptKind,
    ResumeEntry,
    ResumeStatus,
    ToolCall,
)
from engine_service.core.tool import Tool, ToolContext, ToolError, ToolResult

__all__ = [
    "ASK_USER",
    "RESPONSE_SCHEMAS",
    "AskUserTool",
    "Decision",
    "admit",
    "decide",
    "delegated_interrupt",
    "delegation_of",
    "in_doubt_interrupt",
    "interrupt_for",
    "needs_approval",
    "needs_person",
]

ASK_USER = "ask_user"

RESPONSE_SCHEMAS: dict[InterruptKind, dict[str, JSON]] = {
    InterruptKind.APPROVAL: {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean", "description": "false declines the call"},
            "arguments": {"type": "object", "description": "edited arguments for the call"},
            "reason": {"type": "string", "description": "why it was declined, for the agent"},
        },
        "required": ["approved"],
    },
    InterruptKind.QUESTION: {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    },
}
"""JSON Schema of the payload a resume entry may carry, per kind."""


class AskUserTool(Tool):
    """The ``ask_user`` tool as the LLM sees it; a person answers it, never this code."""

    name = ASK_USER
    description = (
        "Ask the user a question and wait for the answer. Use it when you need information "
        "or a choice only the user can give; the answer comes back as this tool's result."
    )

    def __init__(self) -> None:
        self.parameters: dict[str, JSON] = {
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, in full."},
                "choices": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Answers to offer, if the question has a few obvious ones.",
                },
            },
            "required": ["question"],
        }

    async def call(self, arguments: dict[str, JSON], context: ToolContext) -> ToolResult:
        raise ToolError("ask_user is answered by a person, not run")


def needs_approval(name: str, patterns: Sequence[str]) -> bool:
    """Whether a tool named ``name`` is listed (names or globs) for approval."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def needs_person(tool: Tool | None, name: str, approval: Sequence[str]) -> bool:
    """Whether a call of ``tool`` (named ``name``; None: not there) waits for a person:
    ``ask_user``, or a tool listed for approval."""
    if tool is None:
        return False
    return isinstance(tool, AskUserTool) or (name != ASK_USER and needs_approval(name, approval))


def _arguments(call: ToolCall) -> JSON:
    """The call's arguments as JSON, or their text when they are not JSON."""
    try:
        return json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        return call.arguments


def interrupt_for(
    call: ToolCall, interrupt_id: str, run_id: str, now: datetime, expiry: float
) -> Interrupt | ToolResult:
    """The interrupt a gated call raises; a ``ToolResult`` (an error the LLM reads) for an
    ``ask_user`` call without a question."""
    expires = now + timedelta(seconds=expiry) if expiry > 0 else None
    arguments = _arguments(call)
    if call.name == ASK_USER:
        question = arguments.get("question") if isinstance(arguments, dict) else None
        if not isinstance(question, str) or not question.strip():
            return ToolResult(
                'error: ask_user needs {"question": "..."} with the question', is_error=True
            )
        payload: dict[str, JSON] = {"question": question}
        choices = arguments.get("choices") if isinstance(arguments, dict) else None
        if isinstance(choices, list) and all(isinstance(c, str) for c in choices) and choices:
            payload["choices"] = choices
        return Interrupt(
            interrupt_id, InterruptKind.QUESTION, run_id, call, question, payload, expires
        )
    shown = json.dumps(arguments, ensure_ascii=False) if not isinstance(arguments, str) else ""
    message = f"Approve calling {call.name}" + (f" with {shown}" if shown else "") + "?"
    payload = {"tool": call.name, "arguments": arguments}
    return Interrupt(interrupt_id, InterruptKind.APPROVAL, run_id, call, message, payload, expires)


def in_doubt_interrupt(
    call: ToolCall, interrupt_id: str, run_id: str, now: datetime, expiry: float
) -> Interrupt:
    """The approval a call *in doubt* raises: its engine died after it started and before
    its result was stored, so it may already have run (``core.resume``). Approved, it
    runs again with the same idempotency key; declined, the LLM reads why."""
    expires = now + timedelta(seconds=expiry) if expiry > 0 else None
    arguments = _arguments(call)
    shown = json.dumps(arguments, ensure_ascii=False) if not isinstance(arguments, str) else ""
    message = (
        f"This call of {call.name}"
        + (f" with {shown}" if shown else "")
        + " may already have run (the engine running it stopped before its result was "
        "stored). Run it again?"
    )
    payload: dict[str, JSON] = {"tool": call.name, "arguments": arguments, "inDoubt": True}
    return Interrupt(interrupt_id, InterruptKind.APPROVAL, run_id, call, message, payload, expires)


DELEGATION = "delegation"
"""The key of a delegated interrupt's payload that names where it was raised:
``{"agent", "conversationId", "interruptId"}`` (:func:`delegated_interrupt`)."""


def delegated_interrupt(
    call: ToolCall,
    asked: Interrupt,
    agent: str,
    conversation_id: str,
    interrupt_id: str,
    run_id: str,
    now: datetime,
    expiry: float,
) -> Interrupt:
    """The interrupt a run raises for one that a run it started raised (``asked``, pending
    in ``conversation_id``, agent ``agent``'s): the same question or approval for this
    run's person, on ``call`` (the call that started the other run), its payload naming
    where it goes (``DELEGATION``). The answer is checked as an answer to ``asked`` and
    carried down (:func:`decide`)."""
    expires = now + timedelta(seconds=expiry) if expiry > 0 else None
    payload: dict[str, JSON] = {
        key: value
        for key, value in (asked.payload if isinstance(asked.payload, dict) else {}).items()
        if key != DELEGATION
    }
    payload[DELEGATION] = {
        "agent": agent,
        "conversationId": conversation_id,
        "interruptId": asked.id,
    }
    message = f"Agent {agent!r} asks: {asked.message}"
    return Interrupt(interrupt_id, asked.kind, run_id, call, message, payload, expires)


def delegation_of(interrupt: Interrupt) -> tuple[str, str] | None:
    """(conversation id, interrupt id) a delegated interrupt is answered in; else None."""
    payload = interrupt.payload
    where = payload.get(DELEGATION) if isinstance(payload, dict) else None
    if not isinstance(where, dict):
        return None
    conversation_id, interrupt_id = where.get("conversationId"), where.get("interruptId")
    if isinstance(conversation_id, str) and isinstance(interrupt_id, str):
        return conversation_id, interrupt_id
    return None


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one interrupted call: run it (``run`` holds the call to run, with
    any edited arguments), or give the LLM ``result`` as its tool result; or, for a
    delegated interrupt, carry ``forward`` (the answer, as a resume entry of the
    interrupt it stands for) down to ``conversation_id`` by calling the tool again."""

    interrupt: Interrupt
    run: ToolCall | None = None
    result: str = ""
    forward: ResumeEntry | None = None
    conversation_id: str = ""


def _forward(
    interrupt: Interrupt, entry: ResumeEntry | None, where: str, conversation_id: str, asked: str
) -> Decision:
    """The decision on a delegated interrupt: the person's answer checked as an answer to
    the interrupt it stands for, and carried down as nothing but a yes, a no or an
    answer. No answer (expired) is a no; a malformed one is refused, as for any
    interrupt."""
    payload = interrupt.payload if isinstance(interrupt.payload, dict) else {}
    shown = {key: value for key, value in payload.items() if key != DELEGATION}
    call = interrupt.tool_call
    if interrupt.kind is InterruptKind.APPROVAL:  # checked against the call asked about
        tool = shown.get("tool")
        arguments = shown.get("arguments")
        text = json.dumps(arguments, ensure_ascii=False) if arguments is not None else ""
        call = ToolCall(call.id, tool if isinstance(tool, str) else "", text)
    mirror = Interrupt(
        interrupt.id, interrupt.kind, interrupt.run_id, call, interrupt.message, shown
    )
    decision = decide(mirror, entry, where)

    def down(status: ResumeStatus, answer: JSON) -> Decision:
        forward = ResumeEntry(asked, status, answer)
        return Decision(interrupt, forward=forward, conversation_id=conversation_id)

    if entry is None:
        return down(ResumeStatus.CANCELLED, {"reason": "the request expired"})
    if decision.run is not None:
        approved: dict[str, JSON] = {"approved": True}
        if decision.run.arguments != call.arguments:
            approved["arguments"] = json.loads(decision.run.arguments)
        return down(ResumeStatus.RESOLVED, approved)
    if interrupt.kind is InterruptKind.QUESTION and entry.status is ResumeStatus.RESOLVED:
        return down(ResumeStatus.RESOLVED, {"answer": decision.result})
    reason = _reason(entry.payload)
    return down(ResumeStatus.CANCELLED, {"reason": reason} if reason else None)


def _declined(interrupt: Interrupt, why: str) -> Decision:
    if interrupt.kind is InterruptKind.QUESTION:
        return Decision(interrupt, result=f"The user did not answer ({why}).")
    return Decision(
        interrupt,
        result=f"The user declined this call of {interrupt.tool_call.name} ({why}); "
        "it was not run.",
    )


def decide(interrupt: Interrupt, entry: ResumeEntry | None, where: str) -> Decision:
    """The decision a resume entry makes (None: the interrupt expired unanswered).

    ``InvalidInput`` naming ``where`` when the payload does not fit the interrupt.
    """
    delegation = delegation_of(interrupt)
    if delegation is not None:
        return _forward(interrupt, entry, where, *delegation)
    if entry is None:
        return _declined(interrupt, "the request expired")
    if entry.status is ResumeStatus.CANCELLED:
        reason = _reason(entry.payload)
        return _declined(interrupt, f"declined: {reason}" if reason else "cancelled")
    payload = entry.payload
    if interrupt.kind is InterruptKind.QUESTION:
        answer = payload.get("answer") if isinstance(payload, dict) else payload
        if not isinstance(answer, str):
            raise InvalidInput(
                f'{where}.payload: the answer to a question is {{"answer": "..."}} or a string'
            )
        return Decision(interrupt, result=answer)
    # Only an explicit yes approves: ``true`` or ``{"approved": true, ...}``. An absent
    # payload, ``{}``, ``{"reason": ...}`` or ``{"arguments": ...}`` alone is no decision.
    if payload is True:
        return Decision(interrupt, run=interrupt.tool_call)
    if payload is False:
        return _declined(interrupt, "declined")
    if payload is None:
        raise InvalidInput(
            f"{where}.payload is missing: an approval must say yes or no, {_APPROVAL_SHAPE} "
            "or a boolean"
        )
    if not isinstance(payload, dict):
        raise InvalidInput(f"{where}.payload: an approval is {_APPROVAL_SHAPE} or a boolean")
    # A key the rules do not know is refused, never ignored: {"aproved": false} or
    # {"answer": "no"} must not approve the call as the LLM wrote it.
    unknown = [key for key in payload if key not in _APPROVAL_KEYS]
    if unknown:
        raise InvalidInput(
            f"{where}.payload has an unknown key {unknown[0]!r}; an approval is {_APPROVAL_SHAPE}"
        )
    tool = payload.get("tool", interrupt.tool_call.name)
    if tool != interrupt.tool_call.name:
        raise InvalidInput(
            f"{where}.payload.tool {tool!r} is not the tool this interrupt asks about "
            f"({interrupt.tool_call.name!r}); an edit may change the arguments only"
        )
    if "approved" not in payload:
        raise InvalidInput(
            f"{where}.payload.approved is missing: an approval must say yes or no, "
            f"{_APPROVAL_SHAPE}"
        )
    approved = payload["approved"]
    if not isinstance(approved, bool):
        raise InvalidInput(f"{where}.payload.approved must be true or false")
    if not approved:
        reason = _reason(payload)
        return _declined(interrupt, f"declined: {reason}" if reason else "declined")
    call = interrupt.tool_call
    if "arguments" in payload:
        arguments = payload["arguments"]
        if not isinstance(arguments, dict):
            raise InvalidInput(f"{where}.payload.arguments must be a JSON object")
        call = ToolCall(call.id, call.name, json.dumps(arguments, ensure_ascii=False))
    return Decision(interrupt, run=call)


_APPROVAL_KEYS = frozenset({"approved", "arguments", "reason", "tool"})
"""What an approval's payload may hold (``tool``, echoed from the interrupt's payload, must
name the call's own tool)."""
_APPROVAL_SHAPE = '{"approved": true|false, "arguments"?: {...}, "reason"?: "..."}'


def _reason(payload: JSON) -> str:
    reason = payload.get("reason") if isinstance(payload, dict) else None
    return reason.strip() if isinstance(reason, str) else ""


def _describe(interrupt: Interrupt) -> str:
    if interrupt.kind is InterruptKind.QUESTION:
        return f"{interrupt.id!r} (a question)"
    return f"{interrupt.id!r} (approve {interrupt.tool_call.name})"


def admit(
    pending: Sequence[Interrupt], resume: Sequence[ResumeEntry], now: datetime
) -> list[Decision]:
    """Check a run's ``resume`` against the session's pending interrupts; the decisions.

    Every pending interrupt that has not expired must be answered, and every entry must
    answer a pending interrupt, once. Raises ``InputRequired`` for a run that brings no
    resume while a person is awaited, ``InvalidInput`` (naming the entry) otherwise.
    """
    by_id = {interrupt.id: interrupt for interrupt in pending}
    answered: dict[str, tuple[ResumeEntry, str]] = {}
    for index, entry in enumerate(resume):
        where = f"resume[{index}]"
        if entry.interrupt_id not in by_id:
            held = "" if pending else " (the conversation waits for no answer)"
            raise InvalidInput(
                f"{where}.interrupt_id {entry.interrupt_id!r} is not pending in this "
                f"conversation{held}"
            )
        if entry.interrupt_id in answered:
            raise InvalidInput(f"{where}.interrupt_id {entry.interrupt_id!r} is answered twice")
        answered[entry.interrupt_id] = (entry, where)
    open_ = [i for i in pending if i.id not in answered and not i.expired(now)]
    if open_:
        names = ", ".join(_describe(i) for i in open_)
        if not resume:
            raise InputRequired(
                f"this conversation waits for a person: answer interrupt {names} "
                "with resume entries before sending anything else"
            )
        raise InvalidInput(f"resume must answer every pending interrupt; missing {names}")
    decisions = []
    for interrupt in pending:
        decision = decide(interrupt, None, "")
        if interrupt.id in answered:
            entry, where = answered[interrupt.id]
            answer = decide(interrupt, entry, where)  # a malformed entry is refused either way
            if not interrupt.expired(now):
                decision = answer  # past its expiry it counts as declined, even if approved
        decisions.append(decision)
    return decisions
