"""Multi-turn A2A tasks over the engine's human in the loop.

A run that stops for a person (outcome INTERRUPT) leaves its task ``TASK_STATE_INPUT_REQUIRED``
with an agent status message (:func:`input_required_message`): one line of text per
interrupt, and a data part ``{"interrupts": [...]}`` with the structured requests. The
peer's next message on that task is the answer; :func:`resume_entries` reads it into the
engine's resume entries — a data part (``{"approved": ...}``, ``{"answer": ...}`` or
``{"decisions": [...]}``) or plain text (yes/no for approvals, the answer to a question).
Nothing here calls the engine, and nothing here decides: a reply is translated into entries
(which interrupt, which kind, yes or no), and the engine alone checks them
(engine_service/core/hitl.py: every pending one answered, an explicit yes); its refusal
reaches the peer through this facade's error table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from a2a.types import Message, Part, Role, Task
from google.protobuf import json_format, struct_pb2

from agentik.a2a.errors import invalid_params
from agentik.proto_json import json_value
from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb

__all__ = ["NO", "YES", "data_value", "input_required_message", "interrupt_json", "resume_entries"]

YES: Final = frozenset(
    {"yes", "y", "yeah", "yep", "ok", "okay", "sure", "approve", "approved", "allow", "accept"}
    | {"confirm", "confirmed", "go ahead", "do it", "proceed", "yes please", "true"}
)
"""Plain-text replies that approve every pending approval."""
NO: Final = frozenset(
    {"no", "n", "nope", "deny", "denied", "reject", "rejected", "decline", "declined"}
    | {"refuse", "cancel", "stop", "dont", "don't", "do not", "no thanks", "false"}
)
"""Plain-text replies that decline every pending approval."""

_APPROVAL_SHAPE = '{"approved": true|false, "arguments"?: {...}, "reason"?: "..."}'
_ANSWER_SHAPE = '{"answer": "..."}'
_PUNCTUATION = re.compile(r"[^\w\s']+")
_SPACES = re.compile(r"\s+")


def data_value(part: Part, where: str) -> Any:
    """A peer's ``data`` part as JSON; InvalidParams naming ``where`` when it holds a number
    JSON cannot carry (NaN, ±Infinity: a protobuf ``Value`` can, JSON-RPC's JSON cannot)."""
    try:
        return json_value(part.data)
    except ValueError:  # json_format refuses infinite and NaN numbers
        raise invalid_params(
            where, "holds an infinite or NaN number, which JSON cannot carry"
        ) from None


def _kind(interrupt: pb.Interrupt) -> str:
    return "question" if interrupt.kind == pb.INTERRUPT_KIND_QUESTION else "approval"


def interrupt_json(interrupt: pb.Interrupt) -> dict[str, Any]:
    """One interrupt as the status message's data shows it (see docs/a2a.md)."""
    payload = json_value(interrupt.payload) if interrupt.HasField("payload") else None
    payload = payload if isinstance(payload, dict) else {}
    out: dict[str, Any] = {
        "id": interrupt.id,
        "kind": _kind(interrupt),
        "message": interrupt.message,
    }
    if out["kind"] == "approval":
        out["tool"] = payload.get("tool") or interrupt.tool_call.name
        arguments = payload.get("arguments")
        if arguments is None:
            try:
                arguments = json.loads(interrupt.tool_call.arguments or "{}")
            except ValueError:
                arguments = interrupt.tool_call.arguments
        out["arguments"] = arguments
    else:
        out["question"] = payload.get("question") or interrupt.message
        if "choices" in payload:
            out["choices"] = payload["choices"]
    if interrupt.HasField("expire_time"):
        out["expiresAt"] = interrupt.expire_time.ToJsonString()
    return out


def input_required_message(task: Task, run_id: str, interrupts: Sequence[pb.Interrupt]) -> Message:
    """The agent's status message of a task waiting for input: what is needed, in text
    (one line per interrupt) and as data. Its id derives from the run that asked."""
    lines = [i.message or f"The agent needs your input ({_kind(i)})." for i in interrupts]
    data = struct_pb2.Value()
    json_format.ParseDict({"interrupts": [interrupt_json(i) for i in interrupts]}, data)
    return Message(
        message_id=f"{run_id}-input-required",
        context_id=task.context_id,
        task_id=task.id,
        role=Role.ROLE_AGENT,
        parts=[Part(text="\n".join(lines) or "The agent needs your input."), Part(data=data)],
    )


# -- the peer's reply ------------------------------------------------------------------


def _pending(interrupts: Sequence[pb.Interrupt]) -> str:
    return ", ".join(f"{i.id!r} ({_kind(i)})" for i in interrupts)


_DECISION_KEYS: Final = {
    pb.INTERRUPT_KIND_APPROVAL: frozenset({"interruptId", "approved", "arguments", "reason"}),
    pb.INTERRUPT_KIND_QUESTION: frozenset({"interruptId", "answer", "approved", "reason"}),
}
"""What a decision on each kind may hold: any other key is refused, never ignored (a
misspelled ``arguments``, or an ``answer`` beside ``approved``, must not approve the call
as the LLM wrote it)."""


def _entry(where: str, interrupt: pb.Interrupt, decision: dict[str, Any]) -> pb.ResumeEntry:
    """The resume entry one decision object makes for ``interrupt``."""
    question = interrupt.kind == pb.INTERRUPT_KIND_QUESTION
    if question or "approved" in decision:  # else: refused below, as not an approval
        allowed = _DECISION_KEYS[
            pb.INTERRUPT_KIND_QUESTION if question else pb.INTERRUPT_KIND_APPROVAL
        ]
        unknown = [key for key in decision if key not in allowed]
        if unknown:
            shape = _ANSWER_SHAPE if question else _APPROVAL_SHAPE
            raise invalid_params(
                f"{where}.{unknown[0]}", f"is not part of a decision: send {shape}"
            )
    reason = decision.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise invalid_params(f"{where}.reason", "must be a string")
    approved = decision.get("approved")
    if approved is not None and not isinstance(approved, bool):
        raise invalid_params(f"{where}.approved", "must be true or false")
    payload: dict[str, Any]
    if interrupt.kind == pb.INTERRUPT_KIND_QUESTION:
        if "answer" in decision:
            answer = decision["answer"]
            if not isinstance(answer, str):
                raise invalid_params(f"{where}.answer", "must be a string")
            payload = {"answer": answer}
        elif approved is False:  # the person declines to answer
            entry = pb.ResumeEntry(interrupt_id=interrupt.id, status=pb.RESUME_STATUS_CANCELLED)
            if reason:
                json_format.ParseDict({"reason": reason}, entry.payload)
            return entry
        else:
            raise invalid_params(
                where, f"interrupt {interrupt.id!r} is a question: send {_ANSWER_SHAPE}"
            )
    else:
        if approved is None:
            raise invalid_params(
                where, f"interrupt {interrupt.id!r} asks for approval: send {_APPROVAL_SHAPE}"
            )
        payload = {"approved": approved}
        if "arguments" in decision:
            if not isinstance(decision["arguments"], dict):
                raise invalid_params(f"{where}.arguments", "must be a JSON object")
            if approved:
                payload["arguments"] = decision["arguments"]
        if reason and not approved:
            payload["reason"] = reason
    entry = pb.ResumeEntry(interrupt_id=interrupt.id, status=pb.RESUME_STATUS_RESOLVED)
    json_format.ParseDict(payload, entry.payload)
    return entry


def _from_data(
    where: str, value: object, interrupts: Sequence[pb.Interrupt]
) -> list[pb.ResumeEntry]:
    shapes = f"{_APPROVAL_SHAPE}, {_ANSWER_SHAPE} or {{'decisions': [...]}}".replace("'", '"')
    if not isinstance(value, dict):
        raise invalid_params(where, f"must be an object: {shapes}")
    if "decisions" in value:
        listed = value["decisions"]
        if not isinstance(listed, list) or not listed:
            raise invalid_params(f"{where}.decisions", "must be a non-empty list of decisions")
        items = [(f"{where}.decisions[{j}]", d) for j, d in enumerate(listed)]
    else:
        items = [(where, value)]
    by_id = {i.id: i for i in interrupts}
    entries: dict[str, pb.ResumeEntry] = {}
    for at, decision in items:
        if not isinstance(decision, dict):
            raise invalid_params(at, f"must be an object: {_APPROVAL_SHAPE} or {_ANSWER_SHAPE}")
        interrupt_id = decision.get("interruptId")
        if interrupt_id is None:
            if len(interrupts) != 1:
                raise invalid_params(
                    f"{at}.interruptId",
                    f"is required: {len(interrupts)} interrupts are pending "
                    f"({_pending(interrupts)})",
                )
            interrupt_id = interrupts[0].id
        if not isinstance(interrupt_id, str) or interrupt_id not in by_id:
            raise invalid_params(
                f"{at}.interruptId",
                f"{interrupt_id!r} is not pending on this task; pending: {_pending(interrupts)}",
            )
        if interrupt_id in entries:
            raise invalid_params(f"{at}.interruptId", f"{interrupt_id!r} is answered twice")
        entries[interrupt_id] = _entry(at, by_id[interrupt_id], decision)
    return list(entries.values())  # the engine checks that every pending one is answered


def _words(text: str) -> str:
    return _SPACES.sub(" ", _PUNCTUATION.sub(" ", text.lower())).strip()


def _from_text(text: str, interrupts: Sequence[pb.Interrupt]) -> list[pb.ResumeEntry]:
    if all(i.kind != pb.INTERRUPT_KIND_QUESTION for i in interrupts):
        words = _words(text)
        if words in YES or words in NO:
            decision = {"approved": words in YES}
            return [_entry("message.parts", i, decision) for i in interrupts]
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise invalid_params(
            "message.parts",
            f'{shown!r} is neither yes nor no: reply "yes" or "no" to approve or decline '
            f"{_pending(interrupts)}, or send a data part {_APPROVAL_SHAPE}",
        )
    if len(interrupts) == 1:
        return [_entry("message.parts", interrupts[0], {"answer": text})]
    raise invalid_params(
        "message.parts",
        f"{len(interrupts)} interrupts are pending ({_pending(interrupts)}): send a data part "
        '{"decisions": [{"interruptId": "...", ...}, ...]} with one decision each',
    )


def resume_entries(message: Message, interrupts: Sequence[pb.Interrupt]) -> list[pb.ResumeEntry]:
    """The engine resume entries the peer's reply makes for the pending ``interrupts``.

    One data part holds the decisions; without one, the text parts are the reply.
    InvalidParams (naming the part) for anything unclear: nothing is sent to the engine.
    """
    data: list[tuple[int, Part]] = []
    texts: list[str] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "data":
            data.append((index, part))
        elif kind == "text":
            texts.append(part.text)
        else:
            raise invalid_params(
                f"message.parts[{index}]",
                "a reply to a task that waits for input takes text or one data part",
            )
    if len(data) > 1:
        raise invalid_params(f"message.parts[{data[1][0]}]", "send the decisions in one data part")
    if data:
        index, part = data[0]
        where = f"message.parts[{index}].data"
        return _from_data(where, data_value(part, where), interrupts)
    text = " ".join(texts).strip()
    if not text:
        raise invalid_params(
            "message.parts",
            f"the reply is empty: answer {_pending(interrupts)} in text or with a data part",
        )
    return _from_text(text, interrupts)
