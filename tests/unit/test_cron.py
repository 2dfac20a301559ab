"""Cron validation (FAULTS.md E7) and fire times across daylight saving transitions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgfleet.core import crontab as cron
from pgfleet.core.crontab import (
    CronError,
    fire_times_after,
    previous_fire_time,
    validate_cron,
    validate_timezone,
)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires_on_day(expr: str, zone: str, day: datetime) -> list[datetime]:
    """Every fire instant in the 24 h of UTC time starting 12 h before `day`."""
    start = day - timedelta(hours=12)
    times = fire_times_after(expr, zone, start, 200)
    return [t for t in times if t <= start + timedelta(hours=48)]


# ----------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "expr",
    [
        "* * * * *",
        "*/15 * * * *",
        "0 9 * * mon-fri",
        "0 0 1,15 * *",
        "5/20 * * * *",
        "0 0 29 2 *",
        "0 0 31 1-12 *",
        "0 0 30 2 mon",  # weekday OR day-of-month: fires every Monday of February
        "0 0 * * 7",
        "0 12 * jan,jul sun",
        "30 0 9 * * *",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "  @Daily ",
    ],
)
def test_valid_expressions(expr: str) -> None:
    validate_cron(expr)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        (
            "* * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week) or 6 "
            "with seconds first, got 4",
        ),
        (
            "* * * * * * *",
            "expected 5 fields (minute hour day-of-month month day-of-week) or "
            "6 with seconds first, got 7",
        ),
        ("60 * * * *", "minute 60 is out of range 0-59"),
        ("* 24 * * *", "hour 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month 0 is out of range 1-31"),
        ("* * * 13 *", "month 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week 8 is out of range 0-7"),
        ("60 * * * * *", "second 60 is out of range 0-59"),
        ("*/0 * * * *", "minute step 0 is out of range 1-59"),
        ("0 0 30 2 *", "day-of-month 30 never occurs in month 2, so it would never fire"),
        ("0 0 31 4 *", "day-of-month 31 never occurs in month 4, so it would never fire"),
        ("0 0 31 4,6,9,11 *", "day-of-month 31 never occurs in month 4,6,9,11"),
        ("0-99999999 * * * *", "minute 99999999 is out of range 0-59"),
        ("30-5 * * * *", "minute range 30-5 runs backwards; write the low end first"),
        ("0 0 L * *", "day-of-month uses 'L', which pgfleet does not support"),
        ("0 0 15W * *", "day-of-month uses 'W', which pgfleet does not support"),
        ("0 0 * * mon#2", "day-of-week uses '#', which pgfleet does not support"),
        ("0 0 ? * *", "day-of-month uses '?', which pgfleet does not support"),
        ("H * * * *", "minute uses 'H', which pgfleet does not support"),
        ("0 0 * foo *", "month value 'foo' is not a number or a known name"),
        ("0 0 mon * *", "day-of-month value 'mon' is not a number or a known name"),
        ("-1 * * * *", "minute item '-1' is not valid cron syntax"),
        ("@reboot", "unknown alias '@reboot'"),
        ("", "expected 5 fields"),
    ],
)
def test_invalid_expressions(expr: str, message: str) -> None:
    with pytest.raises(CronError) as caught:
        validate_cron(expr)
    assert message in str(caught.value)


def test_list_and_length_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    # 101 items need 201 characters, so lift the length cap to reach the list cap.
    monkeypatch.setattr(cron, "MAX_EXPRESSION_LENGTH", 1000)
    with pytest.raises(CronError, match="more than 100 list items"):
        validate_cron(",".join(["1"] * 101) + " * * * *")
    monkeypatch.undo()
    with pytest.raises(CronError, match="longer than 200 characters"):
        validate_cron("* * * * " + "1," * 100 + "1")


@pytest.mark.parametrize(
    "expr",
    ["0-99999999 * * * *", "1-" + "9" * 150 + " * * * *", "*/0 * * * *", "0 0 30 2 *"],
)
def test_invalid_expressions_never_reach_croniter(
    expr: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Forbidden:
        @staticmethod
        def is_valid(*args: Any, **kwargs: Any) -> bool:
            raise AssertionError("croniter was asked about an invalid expression")

    monkeypatch.setattr(cron, "croniter", Forbidden)
    with pytest.raises(CronError):
        validate_cron(expr)


def test_timezones() -> None:
    assert validate_timezone("Europe/Berlin").key == "Europe/Berlin"
    for name in ["Mars/Olympus", "", "../../etc/passwd", " UTC"]:
        with pytest.raises(CronError, match=r"^unknown time zone "):
            validate_timezone(name)
    with pytest.raises(CronError, match=r"^unknown time zone 'Mars/Olympus'$"):
        validate_timezone("Mars/Olympus")


# ----------------------------------------------------------------- fire times


def test_fire_times_are_utc_and_strictly_after() -> None:
    times = fire_times_after("0 9 * * *", "Europe/Berlin", utc(2026, 1, 5, 8, 0), 2)
    assert times == [utc(2026, 1, 6, 8, 0), utc(2026, 1, 7, 8, 0)]
    assert all(t.tzinfo is UTC for t in times)


def test_six_fields_put_seconds_first() -> None:
    times = fire_times_after("15 10 * * * *", "UTC", utc(2026, 1, 1), 2)
    assert times == [utc(2026, 1, 1, 0, 10, 15), utc(2026, 1, 1, 1, 10, 15)]


def test_step_from_a_start_value() -> None:
    times = fire_times_after("5/20 * * * *", "UTC", utc(2026, 1, 1), 4)
    assert [t.minute for t in times] == [5, 25, 45, 5]


def test_leap_day_expression_fires_in_leap_years() -> None:
    assert fire_times_after("0 0 29 2 *", "UTC", utc(2026, 3, 1), 2) == [
        utc(2028, 2, 29),
        utc(2032, 2, 29),
    ]


def test_previous_fire_time_includes_the_instant_itself() -> None:
    assert previous_fire_time("0 * * * *", "UTC", utc(2026, 1, 1, 5)) == utc(2026, 1, 1, 5)
    assert previous_fire_time("0 * * * *", "UTC", utc(2026, 1, 1, 5, 59)) == utc(2026, 1, 1, 5)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="time-zone-aware"):
        fire_times_after("* * * * *", "UTC", datetime(2026, 1, 1), 1)


def test_zero_count() -> None:
    assert fire_times_after("* * * * *", "UTC", utc(2026, 1, 1), 0) == []


# ------------------------------------------------------------ daylight saving


def test_berlin_spring_forward_shifts_the_missing_time_once() -> None:
    # 02:30 does not exist on 2026-03-29; the run moves to 03:00 CEST = 01:00 UTC.
    assert fires_on_day("30 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 12)) == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 30),
    ]


def test_berlin_fall_back_runs_the_repeated_time_once() -> None:
    # 02:30 happens twice on 2026-10-25; only the first (CEST, 00:30 UTC) runs.
    # croniter alone would also fire at 02:30 CET = 01:30 UTC.
    assert fires_on_day("30 2 * * *", "Europe/Berlin", utc(2026, 10, 25, 12)) == [
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 26, 1, 30),
    ]


def test_new_york_spring_forward() -> None:
    # 02:30 does not exist on 2026-03-08; the run moves to 03:00 EDT = 07:00 UTC.
    assert fires_on_day("30 2 * * *", "America/New_York", utc(2026, 3, 8, 12)) == [
        utc(2026, 3, 8, 7, 0),
        utc(2026, 3, 9, 6, 30),
    ]


def test_new_york_fall_back() -> None:
    # 01:30 happens twice on 2026-11-01; only the first (EDT, 05:30 UTC) runs.
    assert fires_on_day("30 1 * * *", "America/New_York", utc(2026, 11, 1, 12)) == [
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 2, 6, 30),
    ]
    # 02:30 is not repeated in New York (the clocks go from 02:00 EDT back to 01:00 EST).
    assert fires_on_day("30 2 * * *", "America/New_York", utc(2026, 11, 1, 12)) == [
        utc(2026, 11, 1, 7, 30),
        utc(2026, 11, 2, 7, 30),
    ]


def test_several_times_inside_the_gap_collapse_into_one_run() -> None:
    times = fires_on_day("*/15 2 * * *", "Europe/Berlin", utc(2026, 3, 29, 12))
    assert times[:5] == [
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 30, 0, 0),
        utc(2026, 3, 30, 0, 15),
        utc(2026, 3, 30, 0, 30),
        utc(2026, 3, 30, 0, 45),
    ]


def test_every_hour_schedules_follow_real_time_on_fall_back() -> None:
    times = fire_times_after("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 45), 6)
    # 00:00, 00:30 UTC are 02:00, 02:30 CEST; 01:00, 01:30 UTC are 02:00, 02:30 CET.
    assert times == [utc(2026, 10, 25, 0, m) for m in (0, 30)] + [
        utc(2026, 10, 25, h, m) for h in (1, 2) for m in (0, 30)
    ]


def test_every_hour_schedules_follow_real_time_on_spring_forward() -> None:
    times = fire_times_after("*/30 * * * *", "Europe/Berlin", utc(2026, 3, 28, 23, 45), 4)
    # 01:00 UTC is 03:00 CEST: the half hour after 01:30 CET is simply the next run.
    assert times == [
        utc(2026, 3, 29, 0, 0),
        utc(2026, 3, 29, 0, 30),
        utc(2026, 3, 29, 1, 0),
        utc(2026, 3, 29, 1, 30),
    ]


def test_starting_inside_the_repeated_hour() -> None:
    # At 02:50 CEST the second pass of 02:00 (CET, 01:00 UTC) is still ahead.
    after = utc(2026, 10, 25, 0, 50)
    assert fire_times_after("0 * * * *", "Europe/Berlin", after, 2) == [
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 2, 0),
    ]
    # A fixed-hour schedule whose first pass already happened does not run again.
    assert fire_times_after("30 2 * * *", "Europe/Berlin", after, 1) == [utc(2026, 10, 26, 1, 30)]


@pytest.mark.parametrize(
    ("at", "fixed", "every_half_hour"),
    [
        (utc(2026, 10, 25, 0, 40), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 0, 30)),
        (utc(2026, 10, 25, 1, 40), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30)),
        (utc(2026, 10, 25, 0, 20), utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 0)),
        (utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 0)),
        (utc(2026, 3, 29, 0, 59), utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 0, 30)),
    ],
)
def test_previous_fire_time_around_transitions(
    at: datetime, fixed: datetime, every_half_hour: datetime
) -> None:
    assert previous_fire_time("30 2 * * *", "Europe/Berlin", at) == fixed
    assert previous_fire_time("*/30 * * * *", "Europe/Berlin", at) == every_half_hour
