"""What a run keeps of its request, so an engine that resumes it has it (``core.resume``).

A run's messages are stored as it goes, but four parts of its request are not messages:
the client's tools (AG-UI ``tools``), its ``context``, a person's answers to the
interrupts it carries out (``resume``), and its own webhook URL. They are stored with the
run as it begins, in the same transaction (``SessionStore.begin_run``), as one JSON text
bounded to ``[engine] max_event_bytes``; the engine that resumes the run offers the LLM
the same tools and context, carries out the answers that were not carried out yet, and
posts the run's end to the same webhook (a run that named none: its conversation's
default, ``core.notices``).

The text also says that the engine stores each tool call's start before the tool runs
(``starts``, ``core.tool_calls``): only then does a call without a stored start count as
never started. A run begun by an engine from before (nothing kept) has none of them, and
its unfinished calls all count as in doubt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from engine_service.core.errors import InvalidInput
from engine_service.core.models import (
    ClientTool,
    ContextItem,
    ResumeEntry,
    ResumeStatus,
    RunInput,
)

__all__ = ["KeptInput", "keep", "restore"]

_STARTS_ONLY = '{"starts":true}'
"""What a run with no tools, context or answers keeps."""


@dataclass(slots=True)
class KeptInput:
    """The parts of a run's request a resume needs."""

    tools: list[ClientTool] = field(default_factory=list)
    context: list[ContextItem] = field(default_factory=list)
    resume: list[ResumeEntry] = field(default_factory=list)
    starts: bool = False
    """Whether the run's engine stored each tool call's start before it ran."""
    webhook: str = ""
    """The webhook URL the run named ("": none, its conversation's default applies)."""


def keep(run_input: RunInput, limit: int) -> str:
    """The JSON text to store with the run; ``InvalidInput`` when it would take more
    than ``limit`` bytes."""
    if not (run_input.tools or run_input.context or run_input.resume or run_input.webhook_url):
        return _STARTS_ONLY
    kept: dict[str, object] = {
        "starts": True,
        "tools": [
            {"name": t.name, "description": t.description, "parameters": t.parameters}
            for t in run_input.tools
        ],
        "context": [{"description": c.description, "value": c.value} for c in run_input.context],
        "resume": [
            {"interrupt_id": e.interrupt_id, "status": e.status.value, "payload": e.payload}
            for e in run_input.resume
        ],
    }
    if run_input.webhook_url:
        kept["webhook"] = run_input.webhook_url
    text = json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode())
    if size > limit:
        raise InvalidInput(
            f"the run's client tools, context, resume entries and webhook URL take {size:,} "
            f"bytes; a run keeps at most {limit:,} of them, to go on after its engine stops "
            "([engine] max_event_bytes)"
        )
    return text


def restore(text: str) -> KeptInput:
    """What ``keep`` stored (nothing for "" or a text that is not what it writes)."""
    if text == _STARTS_ONLY:
        return KeptInput(starts=True)
    if not text:
        return KeptInput()
    try:
        kept: Any = json.loads(text)
        return KeptInput(
            tools=[
                ClientTool(t["name"], t["description"], dict(t["parameters"]))
                for t in kept["tools"]
            ],
            context=[ContextItem(c["description"], c["value"]) for c in kept["context"]],
            resume=[
                ResumeEntry(e["interrupt_id"], ResumeStatus(e["status"]), e["payload"])
                for e in kept["resume"]
            ],
            starts=kept.get("starts") is True,
            webhook=kept["webhook"] if isinstance(kept.get("webhook"), str) else "",
        )
    except (ValueError, KeyError, TypeError):
        return KeptInput()
