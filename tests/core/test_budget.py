"""``core.budget.TokenBudget``: a principal's tokens of a UTC day, reset at UTC midnight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from engine_service.core.budget import TokenBudget
from engine_service.core.errors import BudgetExceeded
from engine_service.stores import MemorySessionStore


async def test_the_budget_resets_at_utc_midnight_and_says_when() -> None:
    now = [datetime(2026, 3, 2, 23, 59, 0, tzinfo=UTC)]
    budget = TokenBudget(MemorySessionStore(), 100, clock=lambda: now[0])
    await budget.check("ann")
    await budget.charge("ann", 100)
    with pytest.raises(BudgetExceeded) as refused:
        await budget.check("ann")
    assert refused.value.resets_at == datetime(2026, 3, 3, tzinfo=UTC)
    assert refused.value.retry_after == 60
    assert "resets at the start of 2026-03-03 UTC (midnight, in 60 s)" in refused.value.message
    await budget.check("bob")  # everyone has their own
    now[0] += timedelta(minutes=1)
    await budget.check("ann")  # a new day


async def test_a_local_clock_counts_the_utc_day() -> None:
    # 01:00 on the 3rd at UTC+2 is still the 2nd in UTC.
    now = datetime(2026, 3, 3, 1, 0, tzinfo=timezone(timedelta(hours=2)))
    store = MemorySessionStore()
    budget = TokenBudget(store, 10, clock=lambda: now)
    await budget.charge("ann", 10)
    assert await store.tokens_used("ann", datetime(2026, 3, 2).date()) == 10


async def test_no_budget_counts_nothing() -> None:
    store = MemorySessionStore()
    budget = TokenBudget(store, 0)
    await budget.charge("ann", 10**9)
    await budget.check("ann")
    assert not budget.enabled
