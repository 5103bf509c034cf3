"""How the SQLite store writes times and page sizes (``engine_service.stores.sqlite.rows``):
fixed-width UTC text that orders as the times do, read back exactly; naive times refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from engine_service.core.errors import InvalidInput
from engine_service.stores.sqlite.rows import from_iso, iso, sql_limit


def test_times_are_fixed_width_utc_text_that_reads_back_exactly() -> None:
    paris = timezone(timedelta(hours=1))
    times = [
        datetime(2025, 1, 1, 0, 30, tzinfo=paris),
        datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
        datetime(2025, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]
    texts = [iso(value, "now") for value in times]
    assert texts[0] == "2024-12-31T23:30:00.000000+00:00"
    assert len({len(text) for text in texts}) == 1
    assert sorted(texts) == texts  # ordered as text, as the times are
    assert [from_iso(text) for text in texts] == times
    assert all(from_iso(text).tzinfo is UTC for text in texts)


def test_a_naive_time_is_refused_naming_what_it_is() -> None:
    with pytest.raises(InvalidInput, match="lease must be a timezone-aware datetime"):
        iso(datetime(2025, 1, 1), "lease")


def test_a_limit_of_zero_means_no_limit_and_a_negative_one_is_refused() -> None:
    assert (sql_limit(0), sql_limit(7)) == (-1, 7)
    with pytest.raises(InvalidInput, match="limit must not be negative"):
        sql_limit(-1)
