"""Run webhooks: a run started with a webhook URL has its outcome POSTed there when it ends.

The URL is checked when the run is asked for (``check``: the SSRF guard's registration
check, given by the adapter), so a URL refused outright refuses the run with
``InvalidInput`` naming why. When the run ends its outcome is put in the delivery outbox
(``core.deliveries``) under the id ``run_<run id>``: the same on every attempt, and adding
it twice adds it once.

The payload (docs/webhooks.md)::

    {"type": "run.finished", "id": "run_<run id>", "runId": ..., "sessionId": ...,
     "outcome": "success" | "interrupt" | "cancelled" | "error",
     "error": {"code": ..., "message": ...}        (outcome error only)
     "usage": {"inputTokens": ..., "outputTokens": ..., "totalTokens": ..., "cachedTokens": ...},
     "message": {"id": ..., "text": ...} | null,   (the run's last assistant message)
     "finishedAt": "2026-12-05T07:00:00.000000+00:00"}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from engine_service.core import events as ev
from engine_service.core.deliveries import Delivery, DeliveryWorker
from engine_service.core.models import JSON, Message, Role, message_text

__all__ = ["RunWebhooks", "run_payload"]


def _usage(usage: ev.Usage | None) -> dict[str, int]:
    usage = usage or ev.Usage()
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens or usage.input_tokens + usage.output_tokens,
        "cachedTokens": usage.cached_tokens,
    }


def run_payload(
    session_id: str,
    run_id: str,
    final: ev.RunFinished | ev.RunError | None,
    messages: Sequence[Message],
    now: datetime,
) -> dict[str, JSON]:
    """What a run webhook carries (see the module's docstring)."""
    payload: dict[str, JSON] = {
        "type": "run.finished",
        "id": f"run_{run_id}",
        "runId": run_id,
        "sessionId": session_id,
    }
    if isinstance(final, ev.RunFinished):
        payload["outcome"] = final.outcome.value
        payload["usage"] = _usage(final.usage)
    else:
        payload["outcome"] = "error"
        error = final or ev.RunError("the run ended without an outcome", "internal")
        payload["error"] = {"code": error.code, "message": error.message}
        payload["usage"] = _usage(error.usage)
    last = next(
        (m for m in reversed(messages) if m.role is Role.ASSISTANT and m.run_id == run_id), None
    )
    payload["message"] = {"id": last.id, "text": message_text(last)} if last else None
    payload["finishedAt"] = now.isoformat(timespec="microseconds")
    return payload


class RunWebhooks:
    """The run side of the outbox: check URLs as runs are asked for, enqueue their ends."""

    def __init__(self, worker: DeliveryWorker, check: Callable[[str], None]) -> None:
        """``check(url)`` raises ``InvalidInput`` naming why a URL is refused."""
        self.worker = worker
        self.check = check

    async def run_ended(
        self,
        url: str,
        session_id: str,
        run_id: str,
        final: ev.RunFinished | ev.RunError | None,
        messages: Sequence[Message],
    ) -> None:
        now = datetime.now(UTC)
        payload = run_payload(session_id, run_id, final, messages, now)
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        await self.worker.enqueue(Delivery(f"run_{run_id}", url, body, now, now, kind="run"))
