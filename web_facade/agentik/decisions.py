"""The body of ``POST /agentik/conversations/{id}/resume``: a person's decisions on the
interrupts a conversation waits for, as the engine's resume entries.

A decision is ``{"interrupt_id", "approve": bool, "arguments"?: {...}, "reason"?: "..."}``
(an approval; ``approve: false`` also declines to answer a question) or
``{"interrupt_id", "answer": "..."}`` (a question). They become ``pb.ResumeEntry`` s:

===============================  ============  ================================
decision                         status        payload
===============================  ============  ================================
approve true                     RESOLVED      none
approve true, arguments          RESOLVED      ``{"arguments": {...}}``
approve false (reason?)          CANCELLED     ``{"reason": "..."}`` when given
answer                           RESOLVED      ``{"answer": "..."}``
===============================  ============  ================================

Unknown keys in a decision are refused, unlike elsewhere in the API: a misspelled
``arguments`` must not approve the call as the LLM wrote it. This is translation only: the
engine alone checks the entries against what the conversation waits for (engine_service/
core/hitl.py: pending, answered once, every one answered, the right kind, an explicit yes),
and its refusal is a 400 through the facade's error table, said in this API's words
(``web_facade.errors.AGENTIK_WORDS``): the engine names ``resume[i]``, the entry made from
``decisions[i]``, and the client reads ``decisions[i]``.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.errors import invalid

__all__ = ["MAX_DECISIONS", "resume_entries"]

MAX_DECISIONS = 100
_KEYS = ("interrupt_id", "approve", "arguments", "reason", "answer")
_SHOWN = 40


def _shown(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


def _kind(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number")


def _value(value: Any) -> struct_pb2.Value:
    out = struct_pb2.Value()
    json_format.ParseDict(value, out)
    return out


def _entry(raw: object, where: str) -> pb.ResumeEntry:
    """The resume entry of one decision, or a 400 naming it."""
    if not isinstance(raw, dict):
        invalid(f"{where} must be an object, got {_kind(raw)}")
    unknown = [key for key in raw if key not in _KEYS]
    if unknown:
        invalid(
            f"{where} has an unknown key {_shown(unknown[0])}; a decision has "
            "interrupt_id with approve (and arguments or reason), or with answer"
        )
    interrupt_id = raw.get("interrupt_id")
    if not isinstance(interrupt_id, str) or not interrupt_id:
        got = "missing" if interrupt_id is None else _kind(interrupt_id)
        invalid(f"{where}.interrupt_id must be a non-empty string, got {got}")
    if ("approve" in raw) == ("answer" in raw):
        invalid(f"{where} must have exactly one of approve and answer")
    if "answer" in raw:
        for key in ("arguments", "reason"):
            if key in raw:
                invalid(f"{where}.{key} goes with approve, not with answer")
        answer = raw["answer"]
        if not isinstance(answer, str):
            invalid(f"{where}.answer must be a string, got {_kind(answer)}")
        entry = pb.ResumeEntry(
            interrupt_id=interrupt_id,
            status=pb.RESUME_STATUS_RESOLVED,
            payload=_value({"answer": answer}),
        )
        return entry
    approve = raw["approve"]
    if not isinstance(approve, bool):
        invalid(f"{where}.approve must be true or false")
    if approve:
        if "reason" in raw:
            invalid(f"{where}.reason goes with approve: false")
        payload: dict[str, Any] = {"approved": True}
        if "arguments" in raw:
            arguments = raw["arguments"]
            if not isinstance(arguments, dict):
                invalid(f"{where}.arguments must be a JSON object, got {_kind(arguments)}")
            payload["arguments"] = arguments
        entry = pb.ResumeEntry(
            interrupt_id=interrupt_id,
            status=pb.RESUME_STATUS_RESOLVED,
            payload=_value(payload),
        )
        return entry
    if "arguments" in raw:
        invalid(f"{where}.arguments goes with approve: true")
    entry = pb.ResumeEntry(interrupt_id=interrupt_id, status=pb.RESUME_STATUS_CANCELLED)
    reason = raw.get("reason")
    if reason is not None:
        if not isinstance(reason, str):
            invalid(f"{where}.reason must be a string, got {_kind(reason)}")
        if reason.strip():
            entry.payload.CopyFrom(_value({"reason": reason}))
    return entry


def resume_entries(body: dict[str, Any]) -> list[pb.ResumeEntry]:
    """The resume entries of a ``resume`` body, in the order of its ``decisions``; a 400
    naming the field when a decision is malformed."""
    decisions = body.get("decisions")
    if not isinstance(decisions, list):
        got = "missing" if decisions is None else _kind(decisions)
        invalid(f"decisions is required and must be an array, got {got}")
    if not decisions:
        invalid("decisions must have at least one decision")
    if len(decisions) > MAX_DECISIONS:
        invalid(f"decisions has more than {MAX_DECISIONS} items")
    return [_entry(raw, f"decisions[{i}]") for i, raw in enumerate(decisions)]
