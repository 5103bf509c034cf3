"""The delivery outbox: webhooks kept in the store until they are made, with retries.

A :class:`Delivery` is one HTTP POST owed to a receiver (a run webhook, an A2A push
notification). It is written to the store first (``SessionStore.add_delivery``), so it
survives a restart; the :class:`DeliveryWorker` of each engine claims due deliveries under
a lease (with several replicas each delivery is claimed by one of them), hands each to a
``send`` callback (the HTTP adapter, ``engine_service.webhooks``) and stores the outcome:
delivered, due again after an exponential backoff with jitter, or failed after
``max_attempts`` — failed ones are kept and listed for admins.

Delivery is at least once: a replica that dies after the receiver answered but before the
outcome is stored leaves the delivery to be made again when its lease expires. The
delivery id is the same on every attempt, so receivers drop duplicates by it. An attempt
counts once claimed, so a crash-looping engine (or restarts during a slow receiver's
attempts) still stops after ``max_attempts``; and an outcome is stored only by the
replica that still holds the delivery.

Nothing here speaks HTTP: ``send`` says what happened.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine_service.core.clock import utc_now
from engine_service.core.errors import StorageUnavailable
from engine_service.core.store import SessionStore

__all__ = [
    "PushConfig",
    "Delivery",
    "DeliveryStatus",
    "DeliveryWorker",
    "RetryPolicy",
    "SendResult",
]

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 500
"""A delivery's ``last_error`` is clipped to this."""


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"
    """Not made yet: due at ``next_attempt_at``."""
    DELIVERED = "delivered"
    FAILED = "failed"
    """Every attempt failed (or one failed for good): kept for admins to see."""


@dataclass(slots=True)
class Delivery:
    """One POST owed to a receiver."""

    id: str
    """Stable across attempts (the ``webhook-id`` header): receivers drop duplicates by it."""
    url: str
    payload: str
    """The JSON body, as sent."""
    created_at: datetime
    next_attempt_at: datetime
    headers: dict[str, str] = field(default_factory=dict)
    """Headers of the receiver's own (an A2A config's token and authentication)."""
    kind: str = "run"
    """What it announces: ``run`` (a run webhook) or ``a2a`` (a push notification)."""
    attempts: int = 0
    status: DeliveryStatus = DeliveryStatus.PENDING
    last_error: str = ""
    updated_at: datetime | None = None
    """When the last attempt's outcome was stored."""
    session_id: str = ""
    """The conversation whose run it announces: deleting the conversation deletes it
    (its content must go with the conversation), and it is not added once the conversation
    is gone. Empty: it belongs to none."""


@dataclass(frozen=True, slots=True)
class PushConfig:
    """Where a task's updates are pushed (an A2A ``TaskPushNotificationConfig``), owned
    like the task's session."""

    id: str
    task_id: str
    session_id: str
    url: str
    created_at: datetime
    token: str = ""
    """Sent as ``X-A2A-Notification-Token``."""
    auth_scheme: str = ""
    """``Bearer``, ``Basic``, ...: the receiver's ``Authorization`` scheme; empty: none."""
    auth_credentials: str = ""


@dataclass(frozen=True, slots=True)
class SendResult:
    """What one attempt came to."""

    ok: bool
    error: str = ""
    """Why it failed, in words an operator can act on (never the receiver's body)."""
    final: bool = False
    """Failed for good: a retry cannot help (the URL is refused by the SSRF guard)."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failed delivery is tried again.

    Attempt ``n`` (1-based) that fails waits ``base_delay * 2 ** (n - 1)`` seconds, times a
    random factor in [0.75, 1.25] (jitter, so receivers that come back are not hit by every
    replica at once), capped at ``max_delay``. With the defaults (8 attempts, 30 s) the
    seven waits add up to about an hour.
    """

    max_attempts: int = 8
    base_delay: float = 30.0
    max_delay: float = 3600.0

    def delay(self, attempts: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt."""
        plain = self.base_delay * 2.0 ** min(attempts - 1, 30)
        return min(self.max_delay, plain * (0.75 + 0.5 * rand()))


Send = Callable[[Delivery], Awaitable[SendResult]]


class DeliveryWorker:
    """Makes this engine's share of the due deliveries, until stopped."""

    def __init__(
        self,
        store: SessionStore,
        send: Send,
        *,
        replica: str,
        policy: RetryPolicy | None = None,
        poll_interval: float = 1.0,
        lease_seconds: float = 60.0,
        batch: int = 16,
        on_failed: Callable[[Delivery], None] | None = None,
        on_attempt: Callable[[Delivery, SendResult], None] | None = None,
    ) -> None:
        """``lease_seconds``: how long a claimed delivery is this replica's; it must be
        longer than one attempt (``send`` is bounded by its own timeout). ``on_failed``
        hears of each delivery that failed for good, ``on_attempt`` of every attempt."""
        self.store = store
        self.send = send
        self.replica = replica
        self.policy = policy or RetryPolicy()
        self.poll_interval = poll_interval
        self.lease_seconds = lease_seconds
        self.batch = batch
        self._on_failed = on_failed
        self._on_attempt = on_attempt
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._waiting_for_store = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._serve())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def wake(self) -> None:
        """Look for due deliveries now (one was just added)."""
        self._wake.set()

    async def enqueue(self, delivery: Delivery) -> None:
        """Store ``delivery`` and look for due ones at once."""
        await self.store.add_delivery(delivery)
        self.wake()

    async def _serve(self) -> None:
        while True:
            # Cleared before the look, not after: a delivery added while this one runs
            # leaves the event set, and the next look comes at once.
            self._wake.clear()
            try:
                made = await self.tick()
                if self._waiting_for_store:
                    self._waiting_for_store = False
                    log.info("webhook deliveries go on: the store answers again")
            except StorageUnavailable as exc:
                if not self._waiting_for_store:  # once per outage, not once per poll
                    self._waiting_for_store = True
                    log.warning("webhook deliveries wait for the store: %s", exc.message)
                made = 0
            if made < self.batch:  # a full batch: more may be due at once
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_interval)

    async def tick(self) -> int:
        """Claim the due deliveries (a batch at most) and make them; how many."""
        now = utc_now()
        claimed = await self.store.claim_deliveries(
            self.replica, now, now + timedelta(seconds=self.lease_seconds), self.batch
        )
        if claimed:
            await asyncio.gather(*(self._attempt(delivery) for delivery in claimed))
        return len(claimed)

    async def _attempt(self, delivery: Delivery) -> None:
        """Make the attempt ``delivery`` was claimed for (counted by the claim already),
        unless the attempts it was allowed were all made: the last ones were cut short (the
        engine stopped during them), and it fails now without another."""
        if delivery.attempts > self.policy.max_attempts:
            result = SendResult(
                False,
                f"{self.policy.max_attempts} attempts made, the last cut short (the engine"
                " making it stopped)",
                final=True,
            )
            delivery.attempts = self.policy.max_attempts
        else:
            try:
                result = await self.send(delivery)
            except Exception as exc:  # the adapter's bug must not stop the worker
                log.exception("webhook %s: the sender failed", delivery.id)
                result = SendResult(False, f"the sender failed ({type(exc).__name__})")
        now = utc_now()
        if result.ok:
            delivery.status, delivery.last_error = DeliveryStatus.DELIVERED, ""
        else:
            delivery.last_error = result.error[:MAX_ERROR_CHARS]
            if result.final or delivery.attempts >= self.policy.max_attempts:
                delivery.status = DeliveryStatus.FAILED
            else:
                delay = self.policy.delay(delivery.attempts)
                delivery.next_attempt_at = now + timedelta(seconds=delay)
        if not await self.store.settle_delivery(self.replica, delivery, now):
            # Our lease lapsed and another replica claimed it meanwhile (its outcome is the
            # one to keep: the receiver may have had this attempt too, at least once), or
            # its conversation was deleted during the attempt, and the delivery with it.
            log.info(
                "webhook %s: taken over by another replica, or deleted with its conversation,"
                " during the attempt",
                delivery.id,
            )
            return
        if self._on_attempt is not None:
            self._on_attempt(delivery, result)
        if delivery.status is DeliveryStatus.FAILED:
            log.warning(
                "webhook %s to %s failed for good after %d attempts: %s",
                delivery.id,
                delivery.url,
                delivery.attempts,
                delivery.last_error,
            )
            if self._on_failed is not None:
                self._on_failed(delivery)
        elif not result.ok:
            log.info(
                "webhook %s attempt %d failed (%s); next at %s",
                delivery.id,
                delivery.attempts,
                delivery.last_error,
                delivery.next_attempt_at.isoformat(timespec="seconds"),
            )
