"""``session_key``: one conversation, one key, whatever zone its time is read in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from engine_service.core.tool import session_key


def test_the_same_moment_in_another_zone_gives_the_same_key() -> None:
    moment = datetime(2026, 12, 1, 10, 24, 12, 999_999, tzinfo=UTC)
    east = moment.astimezone(timezone(timedelta(hours=3)))
    assert session_key("s1", "alice", moment) == session_key("s1", "alice", east)


def test_id_owner_and_creation_to_the_microsecond_each_change_the_key() -> None:
    moment = datetime(2026, 12, 1, 10, 24, 12, 500_000, tzinfo=UTC)
    key = session_key("s1", "alice", moment)
    assert len(key) == 32 and int(key, 16) >= 0
    assert key != session_key("s2", "alice", moment)
    assert key != session_key("s1", "bob", moment)
    assert key != session_key("s1", "alice", moment + timedelta(microseconds=1))
