"""Run webhooks: a run started with a webhook URL has its outcome POSTed there when it ends.

The URL is checked when the run is asked for (``check``: the SSRF guard's registration
check, given by the adapter), so a URL refused outright refuses the run with
``InvalidInput`` naming why. When the run ends its outcome is put in the delivery outbox
(``core.deliveries``) under the id ``run_<run id>.<incarnation>`` (:func:`run_delivery_id`):
the same on every attempt, and adding it twice adds it once. The incarnation tells this run
from a later one under the same id: deleting a conversation frees its run ids, and a run
that takes one again (anyone's) must not find its webhook already "added".

The payload (docs/webhooks.md)::

    {"type": "run.finished", "id": "run_<run id>.<incarnation>", "runId": ..., "sessionId": ...,
     "outcome": "success" | "interrupt" | "cancelled" | "error",
     "error": {"code": ..., "message": ...}        (outcome error only)
     "usage": {"inputTokens": ..., "outputTokens": ..., "totalTokens": ..., "cachedTokens": ...},
     "message": {"id": ..., "text": ...} | null,   (the run's last assistant message)
     "finishedAt": "2026-12-05T07:00:00.000000+00:00"}
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from engine_service.core import events as ev
from engine_service.core.caller import Caller
from engine_service.core.clock import utc_now
from engine_service.core.deliveries import Delivery, DeliveryWorker, PushConfig
from engine_service.core.errors import InvalidInput, PushConfigNotFound
from engine_service.core.history import new_id
from engine_service.core.ids import check_id
from engine_service.core.models import JSON, Message, Role, Session, message_text
from engine_service.core.store import SessionStore

__all__ = [
    "PushConfigs",
    "RunNotice",
    "RunWebhooks",
    "incarnation_of",
    "run_delivery_id",
    "run_payload",
    "webhook_for",
]

log = logging.getLogger(__name__)

MAX_HEADER_CHARS = 4096
"""A push config's token and credentials, at most."""


@dataclass(frozen=True, slots=True)
class RunNotice:
    """A run started (``final`` None) or ended: what pushers (A2A push) are told."""

    session_id: str
    run_id: str
    resumes: str
    """The run this one resumed (answering its interrupts); empty: none."""
    started: bool
    final: ev.RunFinished | ev.RunError | None
    messages: Sequence[Message]
    time: datetime
    session_key: str = ""
    """The run's conversation as made (``core.tool.session_key``): with the run id, which
    run this is (:func:`incarnation_of`)."""


Pusher = Callable[[RunNotice], Awaitable[Sequence[Delivery]]]
"""What a pusher (A2A push) makes of a run's start or end: the outbox rows that tell of it
(none when nobody asked to be told). The rows of a run's end are stored with the end."""


def webhook_for(named: str, session: Session) -> str:
    """Where a run's end is posted: the webhook URL the run named, else its conversation's
    default ("" for none). Decided here for a run as it starts and as another engine
    resumes or closes it (``core.takeover``)."""
    return named or session.webhook_url


def _usage(usage: ev.Usage | None) -> dict[str, int]:
    usage = usage or ev.Usage()
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens or usage.input_tokens + usage.output_tokens,
        "cachedTokens": usage.cached_tokens,
    }


def incarnation_of(session_key: str, run_id: str) -> str:
    """What tells run ``run_id`` of the conversation ``session_key`` (its id, owner and
    creation time) from a run under the same id in a conversation made after that one was
    deleted: 16 hex digits, the same for the run wherever it is resumed."""
    material = f"run\0{session_key}\0{run_id}".encode()
    return hashlib.sha256(material).hexdigest()[:16]


def run_delivery_id(session_key: str, run_id: str) -> str:
    """The delivery id (``webhook-id``) of the webhook of run ``run_id`` of the conversation
    ``session_key``."""
    return f"run_{run_id}.{incarnation_of(session_key, run_id)}"


def run_payload(
    session_id: str,
    run_id: str,
    final: ev.RunFinished | ev.RunError | None,
    messages: Sequence[Message],
    now: datetime,
    session_key: str = "",
) -> dict[str, JSON]:
    """What a run webhook carries (see the module's docstring)."""
    payload: dict[str, JSON] = {
        "type": "run.finished",
        "id": run_delivery_id(session_key, run_id),
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
    """The run side of the outbox: check URLs as runs are asked for, make the rows of their
    starts and ends."""

    def __init__(
        self,
        worker: DeliveryWorker,
        check: Callable[[str], None],
        pushers: Sequence[Pusher] = (),
    ) -> None:
        """``check(url)`` raises ``InvalidInput`` naming why a URL is refused; ``pushers``
        make the outbox rows of every run's start and end."""
        self.worker = worker
        self.check = check
        self.pushers = list(pushers)

    async def notice(self, notice: RunNotice) -> None:
        """Add what every pusher makes of ``notice`` (a run's start) to the outbox."""
        for row in await self._pushed(notice):
            await self.worker.enqueue(row)

    async def end_deliveries(self, url: str, notice: RunNotice) -> list[Delivery]:
        """The outbox rows of a run's end (``notice``), to be stored with it
        (``finish_run``): its webhook (to ``url``; "" for none) and what every pusher
        makes of it. A pusher that fails makes none (the log says why), and keeps neither
        the others' rows nor the run's end from being stored."""
        rows = [self.run_delivery(url, notice)] if url else []
        return rows + await self._pushed(notice)

    def run_delivery(self, url: str, notice: RunNotice) -> Delivery:
        """The outbox row of a run's webhook (``notice``: its end)."""
        now = notice.time
        payload = run_payload(
            notice.session_id,
            notice.run_id,
            notice.final,
            notice.messages,
            now,
            notice.session_key,
        )
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        delivery_id = run_delivery_id(notice.session_key, notice.run_id)
        return Delivery(delivery_id, url, body, now, now, kind="run", session_id=notice.session_id)

    async def _pushed(self, notice: RunNotice) -> list[Delivery]:
        rows: list[Delivery] = []
        for push in self.pushers:
            try:
                rows += await push(notice)
            except Exception:
                log.exception("the push updates of run %s could not be made", notice.run_id)
        return rows


class PushConfigs:
    """Push configs of tasks (A2A), kept by the store, scoped to the task's owner: a task
    the caller cannot see is not found."""

    def __init__(self, store: SessionStore, check: Callable[[str], None], limit: int) -> None:
        self.store = store
        self.check = check
        self.limit = limit

    async def _task_session(self, caller: Caller, task_id: str) -> str:
        check_id(task_id, "task_id")
        run = await self.store.find_run(task_id, owner=caller.owner_filter)
        return run.session_id

    async def set(self, caller: Caller, config: PushConfig) -> PushConfig:
        session_id = await self._task_session(caller, config.task_id)
        return await self.store.add_push_config(
            replace(self.checked(config), session_id=session_id), self.limit
        )

    async def set_for_run(self, session_id: str, run_id: str, config: PushConfig) -> None:
        """Store a config a run brought (``checked`` before the run began): its task is
        the run or a run of the same session."""
        if config.task_id != run_id:
            await self.store.get_run(session_id, config.task_id)  # RunNotFound otherwise
        await self.store.add_push_config(replace(config, session_id=session_id), self.limit)

    def checked(self, config: PushConfig) -> PushConfig:
        """``config`` with an id, checked; ``InvalidInput`` naming what is wrong."""
        check_id(config.task_id, "task_id")
        if config.id:
            check_id(config.id, "id")
        else:
            config = replace(config, id=new_id())
        if not config.url:
            raise InvalidInput("url is required")
        self.check(config.url)
        for name, value in (
            ("token", config.token),
            ("authentication.scheme", config.auth_scheme),
            ("authentication.credentials", config.auth_credentials),
        ):
            if len(value) > MAX_HEADER_CHARS:
                raise InvalidInput(f"{name} is longer than {MAX_HEADER_CHARS} characters")
            if any(ch in value for ch in "\r\n\0"):
                raise InvalidInput(f"{name} must not hold line breaks")
        if config.auth_scheme and not config.auth_scheme.isalnum():
            raise InvalidInput("authentication.scheme must be a word such as Bearer or Basic")
        if config.auth_credentials and not config.auth_scheme:
            raise InvalidInput("authentication.credentials need authentication.scheme")
        return replace(config, created_at=utc_now())

    async def get(self, caller: Caller, task_id: str, config_id: str) -> PushConfig:
        await self._task_session(caller, task_id)
        for config in await self.store.push_configs(task_id):
            if config.id == config_id:
                return config
        raise PushConfigNotFound(task_id, config_id)

    async def list(self, caller: Caller, task_id: str) -> list[PushConfig]:
        await self._task_session(caller, task_id)
        return await self.store.push_configs(task_id)

    async def delete(self, caller: Caller, task_id: str, config_id: str) -> None:
        await self._task_session(caller, task_id)
        if not await self.store.delete_push_config(task_id, config_id):
            raise PushConfigNotFound(task_id, config_id)
