"""The engine's side of run webhooks and A2A push (``core.run_webhooks``): a run's webhook
and push configs checked when it is asked for; the outbox rows of its start added off the
run's path (writes the engine's shutdown waits for), and those of its end (its webhook, its
A2A push updates) stored with the end, in ``finish_run``'s transaction (``Run.settle``, and
the close of a run whose engine died: ``core.takeover``).

A run's end is announced by the engine that stores it: a run this engine lost to another
replica (handed over, taken over, closed there) is announced there, by the run that
resumed it or the close; never here, where its end would be a guess (the delivery id
``run_<id>`` is the same, and the first one added wins)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from engine_service.core.clock import utc_now
from engine_service.core.deliveries import Delivery
from engine_service.core.errors import InvalidInput, StorageUnavailable
from engine_service.core.models import RunInput, RunRecord
from engine_service.core.recovery import RunClosed
from engine_service.core.run_webhooks import PushConfigs, RunNotice, RunWebhooks
from engine_service.core.turn import Run

__all__ = ["Notices"]

log = logging.getLogger(__name__)


class Notices:
    """``webhooks`` and ``push`` are set by the server (None on a bare engine: runs that
    ask for a webhook or push are refused)."""

    def __init__(self) -> None:
        self.webhooks: RunWebhooks | None = None
        self.push: PushConfigs | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._resumes: dict[str, str] = {}
        """The run each run in flight resumed, by run id (for pushers)."""

    def check_webhook(self, url: str) -> None:
        if self.webhooks is None:
            raise InvalidInput("webhooks are not available on this engine")
        self.webhooks.check(url)

    def check_run(self, run_input: RunInput) -> None:
        """``InvalidInput`` for a run's webhook or push configs that cannot be taken."""
        if run_input.webhook_url:
            self.check_webhook(run_input.webhook_url)
        if run_input.push_configs:
            if self.push is None:
                raise InvalidInput("push notifications are not available on this engine")
            if len(run_input.push_configs) > self.push.limit:
                raise InvalidInput(f"a run brings at most {self.push.limit} push configs")
            run_input.push_configs = [self.push.checked(c) for c in run_input.push_configs]

    async def keep_push_configs(self, run_input: RunInput) -> None:
        """The push configs a run brought, stored for its task (before its first update)."""
        if self.push is not None:
            for config in run_input.push_configs:
                await self.push.set_for_run(run_input.session_id, run_input.run_id, config)

    def started(self, run: Run, resumed: str) -> None:
        if self.webhooks is not None and self.webhooks.pushers:
            self._resumes[run.run_id] = resumed
            self._later(self.webhooks.notice(self._notice(run, started=True)), run.run_id)

    def ended(self, run: Run) -> None:
        """``run`` ended here: its end stored (or another replica's), or waiting to be
        stored with its outbox rows (``core.unsettled``; then :meth:`settled` once it is)."""
        if run.settled or run.lost_at:
            self.settled(run)

    def settled(self, run: Run) -> None:
        """``run``'s end is stored: the rows stored with it only need sending (none when
        another replica closed it: its end, and its webhooks, are that replica's)."""
        self._resumes.pop(run.run_id, None)
        if self.webhooks is not None and run.delivery_stored and not run.lost_at:
            self.webhooks.worker.wake()

    async def end_deliveries(self, run: Run) -> list[Delivery]:
        """The outbox rows of ``run``'s end (its webhook, its A2A push updates), stored
        with it (``Run.settle``), so a crash between the two cannot lose them."""
        webhooks = self.webhooks
        if webhooks is None or run.final is None:
            return []
        notice = self._notice(run, started=False)
        return await webhooks.end_deliveries(run.input.webhook_url, notice)

    async def closed_deliveries(
        self, webhook: str, session_key: str, record: RunRecord, closed: RunClosed
    ) -> list[Delivery]:
        """The outbox rows of the end of a run whose engine died, closed without running
        again (``core.takeover``), stored with its close: its end goes to ``webhook`` ("":
        none) and the pushers, as any run's (``session_key``: its conversation's, which
        with the run id names the delivery)."""
        webhooks = self.webhooks
        if webhooks is None:
            return []
        notice = RunNotice(
            record.session_id,
            record.id,
            "",
            False,
            closed.final,
            closed.messages,
            utc_now(),
            session_key,
        )
        return await webhooks.end_deliveries(webhook, notice)

    def wake(self) -> None:
        """Rows were just stored (with a close): send them now."""
        if self.webhooks is not None:
            self.webhooks.worker.wake()

    async def drain(self, seconds: float) -> None:
        """Wait (at most ``seconds``) for the outbox writes under way."""
        if self._writes:
            await asyncio.wait(self._writes, timeout=seconds)

    def _notice(self, run: Run, *, started: bool) -> RunNotice:
        resumes = self._resumes.get(run.run_id, "")
        final = None if started else run.final
        messages = [] if started else run.transcript.messages
        return RunNotice(
            run.session_id,
            run.run_id,
            resumes,
            started,
            final,
            messages,
            utc_now(),
            run.session_key,
        )

    def _later(self, write: Coroutine[Any, Any, None], run_id: str) -> None:
        """Run an outbox write off the run's path; the engine's shutdown waits for it."""

        async def guarded() -> None:
            try:
                await write
            except StorageUnavailable as exc:
                log.error("a webhook of run %s is lost: %s", run_id, exc.message)

        task = asyncio.get_running_loop().create_task(guarded())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
