"""The one table that maps the engine's events to ``/agentik`` SSE events.

Every frame's ``id`` is the engine's ``seq`` and its ``data`` is a JSON object with
``"type": <event name>`` and the ``run_id`` of the turn. Engine events without a row are
skipped: their ``seq`` is consumed, so a client resuming with ``Last-Event-ID`` neither
misses nor repeats anything.

================================  ====================  ====================================
engine ``Event`` (AG-UI)          SSE event             data (besides ``type``, ``run_id``)
================================  ====================  ====================================
message_stored                    ``message``           ``message``: the stored message
reasoning_start                   ``start_reasoning``   ``message_id``
text_message_start                ``start_response``    ``message_id``
reasoning_message_content         ``append_text``       ``message_id``, ``text``
text_message_content              ``append_text``       ``message_id``, ``text``
run_finished, outcome success     ``end``               ``outcome`` "success", ``usage``?,
                                                        ``pending_tool_call_ids``?, ``result``?
run_finished, outcome interrupt   ``input_required``    ``interrupts`` (see below), then
                                  ``end``               ``outcome`` "input_required", as above
run_finished, outcome cancelled   ``interrupted``       ``usage``?
run_error                         ``error``             ``code``, ``message``, ``usage``?
tool_call_start                   ``tool_call_start``   ``tool_call_id``, ``name``, ``message_id``
tool_call_args                    ``tool_call_args``    ``tool_call_id``, ``delta``
tool_call_end                     ``tool_call_end``     ``tool_call_id``
tool_call_result                  ``tool_call_result``  ``tool_call_id``, ``message_id``,
                                                        ``content``, ``is_error``, ``parts``?
state_snapshot                    ``state_snapshot``    ``snapshot``
state_delta                       ``state_delta``       ``delta`` (RFC 6902 operations)
custom ``compacted``               ``compacted``         ``mode``, ``covered``,
                                                        ``through_message_id``,
                                                        ``tokens_before``, ``tokens_after``,
                                                        ``summary_tokens``, ``summary``
custom ``superseded``             ``retry``             ``message_id`` of the cut answer,
                                                        ``reason``
custom                            ``custom``            ``name``, ``value`` (e.g. ``tool_progress``,
                                                        ``resumed``)
================================  ====================  ====================================

A run whose engine died mid-answer goes on elsewhere (``[engine] resume_runs``): its cut
answer is ended by ``retry`` (drop the text of ``message_id``: it is asked again, and the
new answer comes as a new ``start_response``), then ``custom`` ``resumed`` with the run's
resume count. The run keeps its ``run_id``, and its ids only grow.

A run that stops for a person (outcome INTERRUPT) gives two frames: ``input_required``
with the interrupts (:func:`~web_facade.agentik.shapes.interrupt_json`) and no ``id`` of
its own, then ``end`` with the engine event's seq. A client that drops between the two
resumes from the id before them and gets both again.

No row (skipped): run_started, step_started/_finished, text_message_end,
reasoning_message_start/_end, reasoning_end, messages_snapshot, raw.

``append_image`` (``message_id``, ``part``) is part of the contract, but the engine streams no
image deltas today: images reach a client whole, in ``message`` and ``tool_call_result``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from agentik.rpc.agentik.engine.v1 import engine_pb2 as pb
from web_facade.agentik.shapes import interrupt_json, message_json, part_json, usage_json
from web_facade.proto_json import json_value

__all__ = ["EVENT_TABLE", "event_frame", "frame", "input_required", "to_agentik"]

Mapper = Callable[[pb.Event], tuple[str, dict[str, Any]]]


def _message(event: pb.Event) -> tuple[str, dict[str, Any]]:
    return "message", {"message": message_json(event.message_stored.message)}


def _start_reasoning(event: pb.Event) -> tuple[str, dict[str, Any]]:
    return "start_reasoning", {"message_id": event.reasoning_start.message_id}


def _start_response(event: pb.Event) -> tuple[str, dict[str, Any]]:
    return "start_response", {"message_id": event.text_message_start.message_id}


def _append_response(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.text_message_content
    return "append_text", {"message_id": body.message_id, "text": body.delta}


def _append_reasoning(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.reasoning_message_content
    return "append_text", {"message_id": body.message_id, "text": body.delta}


def _usage(body: pb.RunFinished | pb.RunError) -> dict[str, Any]:
    if not body.HasField("usage"):
        return {}
    return {"usage": usage_json(body.usage)}


def _finished(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.run_finished
    if body.outcome == pb.OUTCOME_TYPE_CANCELLED:
        return "interrupted", _usage(body)
    outcome = "input_required" if body.outcome == pb.OUTCOME_TYPE_INTERRUPT else "success"
    data: dict[str, Any] = {"outcome": outcome, **_usage(body)}
    if body.pending_tool_call_ids:
        data["pending_tool_call_ids"] = list(body.pending_tool_call_ids)
    if body.HasField("result"):
        data["result"] = json_value(body.result)
    return "end", data


def _error(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.run_error
    return "error", {"code": body.code or "internal", "message": body.message, **_usage(body)}


def _tool_call_start(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.tool_call_start
    return "tool_call_start", {
        "tool_call_id": body.tool_call_id,
        "name": body.tool_call_name,
        "message_id": body.parent_message_id,
    }


def _tool_call_args(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.tool_call_args
    return "tool_call_args", {"tool_call_id": body.tool_call_id, "delta": body.delta}


def _tool_call_end(event: pb.Event) -> tuple[str, dict[str, Any]]:
    return "tool_call_end", {"tool_call_id": event.tool_call_end.tool_call_id}


def _tool_call_result(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.tool_call_result
    data: dict[str, Any] = {
        "tool_call_id": body.tool_call_id,
        "message_id": body.message_id,
        "content": body.content,
        "is_error": body.is_error,
    }
    if body.parts:
        data["parts"] = [part_json(p) for p in body.parts]
    return "tool_call_result", data


def _state_snapshot(event: pb.Event) -> tuple[str, dict[str, Any]]:
    return "state_snapshot", {"snapshot": json_value(event.state_snapshot.snapshot)}


def _state_delta(event: pb.Event) -> tuple[str, dict[str, Any]]:
    return "state_delta", {"delta": json_value(event.state_delta.delta)}


def _custom(event: pb.Event) -> tuple[str, dict[str, Any]]:
    body = event.custom
    value = json_value(body.value)
    if body.name == "compacted" and isinstance(value, dict):
        # The conversation's oldest part was summarised or trimmed for the LLM
        # (docs/conversations.md); the stored history keeps it.
        return "compacted", value
    if body.name == "superseded" and isinstance(value, dict):
        return "retry", {
            "message_id": value.get("messageId", ""),
            "reason": value.get("reason", ""),
        }
    return "custom", {"name": body.name, "value": value}


EVENT_TABLE: dict[str, Mapper] = {
    "message_stored": _message,
    "reasoning_start": _start_reasoning,
    "text_message_start": _start_response,
    "text_message_content": _append_response,
    "reasoning_message_content": _append_reasoning,
    "run_finished": _finished,
    "run_error": _error,
    "tool_call_start": _tool_call_start,
    "tool_call_args": _tool_call_args,
    "tool_call_end": _tool_call_end,
    "tool_call_result": _tool_call_result,
    "state_snapshot": _state_snapshot,
    "state_delta": _state_delta,
    "custom": _custom,
}
"""Engine ``Event.kind`` → mapper; see the module docstring for the table."""


def to_agentik(event: pb.Event) -> tuple[str, dict[str, Any]] | None:
    """``(name, data)`` for an engine event, or None when it has no ``/agentik`` form."""
    kind = event.WhichOneof("kind")
    mapper = EVENT_TABLE.get(kind) if kind else None
    if mapper is None:
        return None
    name, fields = mapper(event)
    return name, {"type": name, "run_id": event.run_id, **fields}


def input_required(event: pb.Event) -> dict[str, Any] | None:
    """The ``input_required`` data that precedes ``end`` when a run stops for a person."""
    if event.WhichOneof("kind") != "run_finished":
        return None
    body = event.run_finished
    if body.outcome != pb.OUTCOME_TYPE_INTERRUPT:
        return None
    return {
        "type": "input_required",
        "run_id": event.run_id,
        "interrupts": [interrupt_json(i) for i in body.interrupts],
    }


def frame(seq: int | None, name: str, data: Mapping[str, Any]) -> bytes:
    """One SSE frame, LF line ends only. ``json.dumps`` escapes newlines, so ``data`` is a
    single line; ``id`` (the engine's seq) is left out for frames that are no event."""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"id: {seq}\n" if seq is not None else ""
    return f"{head}event: {name}\ndata: {body}\n\n".encode()


def event_frame(event: pb.Event) -> bytes | None:
    """The SSE frame of an engine event (``id`` = its seq), or None to skip it; for a run
    that stops for a person, the ``input_required`` frame (no id) and then ``end``."""
    mapped = to_agentik(event)
    if mapped is None:
        return None
    encoded = frame(event.seq, *mapped)
    asked = input_required(event)
    if asked is not None:
        encoded = frame(None, "input_required", asked) + encoded
    return encoded
