"""Per-principal token budgets: ``[auth] tokens_per_day`` tokens a UTC day per principal.

The count lives in the store (``SessionStore.add_tokens``), so every engine replica sharing
it counts into the same total. It is checked before each LLM call and charged with what
the LLM reported after it: a call that starts under the budget finishes, so a principal
may end a day over it by at most one call's tokens. The day resets at UTC midnight.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import TypeVar

from engine_service.core.clock import utc_now
from engine_service.core.errors import BudgetExceeded, StorageUnavailable
from engine_service.core.events import Usage
from engine_service.core.store import SessionStore

__all__ = ["TokenBudget"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class TokenBudget:
    """The daily token budget of every principal; ``per_day`` 0 means none."""

    def __init__(
        self, store: SessionStore, per_day: int, clock: Callable[[], datetime] = utc_now
    ) -> None:
        self.store = store
        self.per_day = per_day
        self._clock = clock

    @property
    def enabled(self) -> bool:
        return self.per_day > 0

    def _today(self) -> tuple[date, datetime]:
        """Today (UTC) and the midnight that ends it."""
        now = self._clock().astimezone(UTC)
        today = now.date()
        return today, datetime.combine(today + timedelta(days=1), time(), UTC)

    async def check(self, principal: str) -> None:
        """``BudgetExceeded`` when ``principal`` used its tokens of today."""
        if not self.enabled:
            return
        today, resets_at = self._today()
        used = await self.store.tokens_used(principal, today)
        if used >= self.per_day:
            wait = math.ceil((resets_at - self._clock().astimezone(UTC)).total_seconds())
            who = f"principal {principal!r}" if principal else "this server's callers"
            raise BudgetExceeded(
                f"token budget exceeded: {who} used {used} of {self.per_day} tokens today"
                f" ([auth] tokens_per_day); it resets at the start of"
                f" {resets_at.date().isoformat()} UTC (midnight, in {wait} s)",
                resets_at,
                wait,
            )

    async def spending(self, principal: str, usage: Usage, call: Callable[[], Awaitable[T]]) -> T:
        """``call()`` (an LLM call adding to ``usage``) once the budget allows it; what it
        used is charged, also when it fails."""
        before = usage.input_tokens + usage.output_tokens
        await self.check(principal)
        try:
            return await call()
        finally:
            await self.charge(principal, usage.input_tokens + usage.output_tokens - before)

    async def charge(self, principal: str, tokens: int) -> None:
        """Count ``tokens`` the LLM reported against ``principal``'s today. A store that
        cannot write loses this count (logged): the call it counts has happened, and the
        run's own error, if any, is the one to report."""
        if self.enabled and tokens > 0:
            today, _ = self._today()
            try:
                await self.store.add_tokens(principal, today, tokens)
            except StorageUnavailable as exc:
                log.warning("%d tokens of %r not counted: %s", tokens, principal, exc.message)
