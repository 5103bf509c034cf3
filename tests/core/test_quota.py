"""``core.quota``: the conversations one principal may have, counted where one is made."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engine_service.core.errors import QuotaExceeded
from engine_service.core.quota import SessionQuota
from engine_service.stores import MemorySessionStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


async def test_a_principal_at_its_most_has_no_room_and_others_keep_theirs() -> None:
    store = MemorySessionStore()
    quota = SessionQuota(store, 2)
    for session_id in ("a", "b"):
        await quota.check_room("alice")
        await store.create_session(session_id, "", NOW, owner="alice")
    with pytest.raises(QuotaExceeded) as caught:
        await quota.check_room("alice")
    assert caught.value.code == "quota_exceeded"
    assert caught.value.message.startswith("you (alice) have 2 conversations stored, the most")
    assert "[auth] max_sessions_per_caller (AGENTIK_MAX_SESSIONS_PER_CALLER)" in (
        caught.value.message
    )
    await quota.check_room("bob")
    await quota.check_made("alice")  # at its most, not past it
    await store.create_session("c", "", NOW, owner="alice")  # made by a run
    with pytest.raises(QuotaExceeded):
        await quota.check_made("alice")


async def test_no_limit_counts_nothing() -> None:
    store = MemorySessionStore()
    for index in range(3):
        await store.create_session(f"s{index}", "", NOW, owner="alice")
    await SessionQuota(store, 0).check_room("alice")
    await SessionQuota(store, 0).check_made("alice")
