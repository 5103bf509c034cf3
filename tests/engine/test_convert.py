"""Stored times reach gRPC clients exactly, to the microsecond."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from engine_service.convert import timestamp


def test_a_datetime_becomes_a_timestamp_to_the_microsecond() -> None:
    # Float seconds lose the last microsecond of many such values (1.3e9 s needs 16 digits).
    start = datetime(2026, 12, 1, 10, 24, 12, tzinfo=UTC)
    for micros in range(0, 1_000_000, 997):
        value = start + timedelta(microseconds=micros)
        converted = timestamp(value)
        assert converted.ToDatetime(UTC) == value
        assert converted.nanos == value.microsecond * 1000


def test_another_zone_and_times_before_1970_convert_too() -> None:
    east = datetime(2026, 12, 1, 13, 0, 0, 123456, tzinfo=timezone(timedelta(hours=3)))
    assert timestamp(east).ToDatetime(UTC) == east
    before = datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    converted = timestamp(before)
    assert (converted.seconds, converted.nanos) == (-1, 999_999_000)


def test_float_seconds_still_convert() -> None:
    converted = timestamp(1.25)
    assert (converted.seconds, converted.nanos) == (1, 250_000_000)
