"""Tests for cronlease.core.schedule.cron: parsing, slot enumeration and the DST time rule."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from cronlease.core.schedule.cron import MACROS, Schedule, ScheduleError, is_valid_time_zone

BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


# --- parse ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "has_seconds"),
    [
        ("0 * * * *", False),
        ("*/5 0-6,22 1,15 JAN-MAR mon-fri", False),
        ("0 0 1,L * 5-7", False),
        ("0 5-5 * * 6-6", False),
        ("? ? ? ? ?", False),
        ("59/15 * * * *", False),
        ("0 0 * * ?", False),
        ("*/10 * * * * *", True),
        ("30 0 12 * * MON", True),
        *[(macro, False) for macro in MACROS],
        ("@DAILY", False),
    ],
)
def test_parse_accepts(expression: str, has_seconds: bool) -> None:
    schedule = Schedule.parse(f"  {expression}\t")
    assert schedule == Schedule(expression, "UTC", has_seconds)


@pytest.mark.parametrize(("time_zone", "stored"), [("", "UTC"), (BERLIN, BERLIN), ("UTC", "UTC")])
def test_parse_time_zone(time_zone: str, stored: str) -> None:
    assert Schedule.parse("0 * * * *", time_zone).time_zone == stored


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_macros_match_their_expansion(macro: str, equivalent: str) -> None:
    assert MACROS[macro] == equivalent
    after, until = utc(2025, 1, 1), utc(2026, 2, 1)
    expected = Schedule.parse(equivalent).slots_between(after, until, limit=10_000)
    assert Schedule.parse(macro).slots_between(after, until, limit=10_000) == expected


@pytest.mark.parametrize(
    ("expression", "time_zone", "message"),
    [
        ("", "UTC", "schedule: must not be empty"),
        ("   ", "UTC", "schedule: must not be empty"),
        ("TZ=Europe/Berlin 0 * * * *", "UTC", "use the timeZone field"),
        ("CRON_TZ=UTC 0 * * * *", "UTC", "use the timeZone field"),
        ("cron_tz=UTC 0 * * * *", "UTC", "use the timeZone field"),
        ("60 * * * *", "UTC", 'invalid minute field "60"'),
        ("0 24 * * *", "UTC", 'invalid hour field "24"'),
        ("0 0 32 * *", "UTC", 'invalid day-of-month field "32"'),
        ("0 0 0 * *", "UTC", 'invalid day-of-month field "0"'),
        ("0 0 1 13 *", "UTC", 'invalid month field "13"'),
        ("0 0 1 FOO *", "UTC", 'invalid month field "FOO"'),
        ("0 0 * * 8", "UTC", 'invalid day-of-week field "8"'),
        ("60 0 0 * * *", "UTC", 'invalid second field "60"'),
        ("*/0 * * * *", "UTC", 'invalid minute field "*/0"'),
        ("1,,2 * * * *", "UTC", 'invalid minute field "1,,2"'),
        ("x * * * *", "UTC", 'invalid minute field "x"'),
        ("5-2 * * * *", "UTC", 'invalid minute field "5-2": range "5-2" runs backwards'),
        ("0 22-2/3 * * *", "UTC", 'invalid hour field "22-2/3": range "22-2" runs backwards'),
        ("0 0 * * sat-sun", "UTC", 'invalid day-of-week field "sat-sun"'),
        ("0 0 1-L * *", "UTC", 'invalid day-of-month field "1-L"'),
        ("* * * *", "UTC", "has 4 fields"),
        ("* * * * * * *", "UTC", "has 7 fields"),
        ("0 0 1 1 * 2030 x", "UTC", "has 7 fields"),
        ("@every", "UTC", "@every needs a duration"),
        ("@everyday", "UTC", 'unknown macro "@everyday"'),
        ("@reboot", "UTC", 'unknown macro "@reboot"'),
        ("R * * * *", "UTC", 'invalid minute field "R": "R" is not a minute value'),
        ("H * * * *", "UTC", 'invalid minute field "H"'),
        ("\u0663 * * * *", "UTC", "non-ASCII"),
        ("0 0 30 2 *", "UTC", "never fires"),
        ("0 0 31 4 *", BERLIN, "never fires"),
        ("0 * * * *", "Mars/Olympus", 'timeZone: unknown time zone "Mars/Olympus"'),
        ("0 * * * *", "Local", 'timeZone: unknown time zone "Local"'),
        ("0 * * * *", "localtime", 'timeZone: unknown time zone "localtime"'),
        ("0 * * * *", "America", 'timeZone: unknown time zone "America"'),
        ("0 * * * *", "../etc/passwd", 'timeZone: unknown time zone "../etc/passwd"'),
        ("0 * * * *", "europe/berlin", 'timeZone: unknown time zone "europe/berlin"'),
    ],
)
def test_parse_rejects(expression: str, time_zone: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expression, time_zone)
    assert message in str(caught.value)
    assert str(caught.value).startswith(("schedule: ", "timeZone: "))


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("UTC", True),
        ("", True),
        (BERLIN, True),
        ("Asia/Kolkata", True),
        ("Local", False),
        ("localtime", False),
        ("Nowhere/Special", False),
        ("../../etc/passwd", False),
    ],
)
def test_is_valid_time_zone(name: str, valid: bool) -> None:
    assert is_valid_time_zone(name) is valid


# --- next_after ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "instant", "expected"),
    [
        ("*/5 * * * *", utc(2025, 5, 1, 10, 2, 30), utc(2025, 5, 1, 10, 5)),
        ("0 * * * *", utc(2025, 5, 1, 10), utc(2025, 5, 1, 11)),
        ("0 * * * *", utc(2025, 5, 1, 10, 59, 59, 999_999), utc(2025, 5, 1, 11)),
        ("0 * * * *", datetime(2025, 5, 1, 12, 30, tzinfo=ZoneInfo(BERLIN)), utc(2025, 5, 1, 11)),
        ("*/10 * * * * *", utc(2025, 5, 1, 10), utc(2025, 5, 1, 10, 0, 10)),
        ("*/10 * * * * *", utc(2025, 5, 1, 10, 0, 5, 500_000), utc(2025, 5, 1, 10, 0, 10)),
        ("*/10 * * * * *", utc(2025, 12, 31, 23, 59, 55), utc(2026, 1, 1)),
        ("30 0 12 * * *", utc(2025, 5, 1, 12, 0, 30), utc(2025, 5, 2, 12, 0, 30)),
        ("@yearly", utc(2025, 6, 1), utc(2026, 1, 1)),
        ("@annually", utc(2025, 12, 31, 23, 59, 59), utc(2026, 1, 1)),
        ("@monthly", utc(2025, 12, 15), utc(2026, 1, 1)),
        ("@weekly", utc(2025, 1, 1), utc(2025, 1, 5)),
        ("@daily", utc(2025, 12, 31, 23, 59), utc(2026, 1, 1)),
        ("@midnight", utc(2025, 2, 28, 0, 0, 1), utc(2025, 3, 1)),
        ("@hourly", utc(2025, 1, 31, 23, 30), utc(2025, 2, 1)),
        ("0 0 31 * *", utc(2025, 2, 1), utc(2025, 3, 31)),
        ("0 12 L * *", utc(2025, 2, 1), utc(2025, 2, 28, 12)),
        ("0 0 29 2 *", utc(2025, 1, 1), utc(2028, 2, 29)),
        ("0 0 29 2 *", utc(2028, 2, 29), utc(2032, 2, 29)),
        ("0 0 13 * 5", utc(2025, 6, 1), utc(2025, 6, 6)),  # day-of-month OR day-of-week
        ("0 9 * * 1-5", utc(2025, 5, 30, 9), utc(2025, 6, 2, 9)),
    ],
)
def test_next_after_utc(expression: str, instant: datetime, expected: datetime) -> None:
    slot = Schedule.parse(expression).next_after(instant)
    assert slot == expected
    assert slot is not None
    assert slot.tzinfo is UTC


def test_next_after_none_when_never_again() -> None:
    assert Schedule.parse("0 0 1 1 *").next_after(utc(9999, 6, 1)) is None


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        Schedule.parse("* * * * *").next_after(datetime(2025, 1, 1))  # noqa: DTZ001


# --- slots_between / count_between -----------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "until", "expected"),
    [
        (
            "30 10,11,12 * * 1-5",
            utc(2026, 11, 26, 10, 30),  # Thursday
            utc(2026, 11, 27, 16, 30),
            [
                utc(2026, 11, 26, 11, 30),
                utc(2026, 11, 26, 12, 30),
                utc(2026, 11, 27, 10, 30),
                utc(2026, 11, 27, 11, 30),
                utc(2026, 11, 27, 12, 30),
            ],
        ),
        (
            "30 10,11,12 * * 1-5",
            utc(2026, 11, 27, 12, 30),  # Friday, last slot of the week
            utc(2026, 11, 30, 10, 30),
            [utc(2026, 11, 30, 10, 30)],
        ),
        ("0 * * * *", utc(2025, 1, 1, 1), utc(2025, 1, 1, 1), []),
        ("0 * * * *", utc(2025, 1, 1, 5), utc(2025, 1, 1, 1), []),
        ("0 0 29 2 *", utc(2025, 1, 1), utc(2027, 12, 31), []),
        ("*/20 * * * * *", utc(2025, 1, 1), utc(2025, 1, 1, 0, 1), [
            utc(2025, 1, 1, 0, 0, 20),
            utc(2025, 1, 1, 0, 0, 40),
            utc(2025, 1, 1, 0, 1),
        ]),
    ],
)  # fmt: skip
def test_slots_between(
    expression: str, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    schedule = Schedule.parse(expression)
    assert schedule.slots_between(after, until) == expected
    assert schedule.count_between(after, until) == len(expected)


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (0, []),
        (1, [utc(2025, 1, 1, 23)]),
        (3, [utc(2025, 1, 1, 21), utc(2025, 1, 1, 22), utc(2025, 1, 1, 23)]),
        (24, [utc(2025, 1, 1, hour) for hour in range(24)]),
        (100, [utc(2025, 1, 1, hour) for hour in range(24)]),
    ],
)
def test_slots_between_limit_keeps_most_recent(limit: int, expected: list[datetime]) -> None:
    schedule = Schedule.parse("0 * * * *")
    assert schedule.slots_between(utc(2024, 12, 31, 23), utc(2025, 1, 1, 23, 30), limit) == expected


@pytest.mark.parametrize(
    ("expression", "time_zone", "after", "until"),
    [
        ("*/7 * * * *", "UTC", utc(2025, 1, 1), utc(2025, 1, 1, 5)),
        ("0 */3 * * *", BERLIN, utc(2025, 3, 28), utc(2025, 4, 2)),
        ("*/15 * * * *", NEW_YORK, utc(2025, 11, 1, 20), utc(2025, 11, 2, 12)),
        ("*/30 * * * * *", BERLIN, utc(2025, 10, 25, 23), utc(2025, 10, 26, 3)),
        ("0 0 * * *", "Australia/Lord_Howe", utc(2025, 1, 1), utc(2025, 12, 31)),
    ],
)
def test_count_agrees_with_slots(
    expression: str, time_zone: str, after: datetime, until: datetime
) -> None:
    schedule = Schedule.parse(expression, time_zone)
    slots = schedule.slots_between(after, until, limit=100_000)
    assert schedule.count_between(after, until) == len(slots)
    assert_chain(schedule, after, until, slots)


def test_count_is_exact_beyond_the_slot_limit() -> None:
    schedule = Schedule.parse("* * * * *")
    after, until = utc(2025, 1, 1), utc(2025, 1, 2)
    assert schedule.count_between(after, until) == 1440
    slots = schedule.slots_between(after, until)
    assert len(slots) == 1000
    assert slots[-1] == until


def local(time_zone: str, year: int, month: int, day: int) -> datetime:
    """Midnight of a local date: a window from one to the next holds that day's wall times."""
    return datetime(year, month, day, tzinfo=ZoneInfo(time_zone))


LORD_HOWE, CHATHAM = "Australia/Lord_Howe", "Pacific/Chatham"
YEAR = 365 * 86_400  # seconds in 2025


@pytest.mark.parametrize(
    ("expression", "time_zone", "after", "until", "expected"),
    [
        pytest.param("* * * * * *", "UTC", utc(2025, 1, 1), utc(2026, 1, 1), YEAR,
                     id="a-year-of-seconds"),
        pytest.param("* * * * * *", "UTC", utc(2024, 1, 1), utc(2034, 1, 1), 3653 * 86_400,
                     id="ten-years-of-seconds-three-leap-days"),
        pytest.param("* * * * * *", "UTC", utc(1, 1, 1), utc(9999, 12, 31),
                     (date(9999, 12, 31) - date(1, 1, 1)).days * 86_400,
                     id="every-second-datetime-can-hold"),
        # The spring gap's 3600 wall times fire with 03:00:00 as one slot; the repeated hour once.
        pytest.param("* * * * * *", BERLIN, local(BERLIN, 2025, 1, 1), local(BERLIN, 2026, 1, 1),
                     YEAR - 3600, id="berlin-year-of-seconds"),
        # 9 seconds a minute; the gap holds 540 named wall times, merged with 03:00:00.
        pytest.param("*/7 * * * * *", BERLIN, local(BERLIN, 2025, 1, 1),
                     local(BERLIN, 2026, 1, 1), 365 * 1440 * 9 - 540, id="berlin-year-every-7s"),
        pytest.param("0 9 * * 1-5", NEW_YORK, local(NEW_YORK, 2025, 1, 1),
                     local(NEW_YORK, 2026, 1, 1), 261, id="weekdays-of-2025"),
        # Day-of-month OR day-of-week: 52 Fridays and 12 thirteenths, June 13 being both.
        pytest.param("0 0 13 * 5", "UTC", utc(2025, 1, 1), utc(2026, 1, 1), 63,
                     id="fridays-or-13ths"),
        pytest.param("30 12 L * *", "UTC", utc(2024, 1, 1), utc(2028, 1, 1), 48,
                     id="last-days-of-four-years"),
        pytest.param("0 0 29 2 *", "UTC", utc(2001, 1, 1), utc(2401, 1, 1), 97,
                     id="leap-days-of-400-years"),
        pytest.param("0 * * * *", BERLIN, local(BERLIN, 2025, 3, 30), local(BERLIN, 2025, 3, 31),
                     23, id="berlin-hourly-spring-day"),
        pytest.param("0 * * * *", BERLIN, local(BERLIN, 2025, 10, 26),
                     local(BERLIN, 2025, 10, 27), 24, id="berlin-hourly-fall-day"),
        # 02:00 and 02:15 fall in the 30-minute gap and fire with 02:30, at the transition.
        pytest.param("*/15 * * * *", LORD_HOWE, local(LORD_HOWE, 2025, 10, 5),
                     local(LORD_HOWE, 2025, 10, 6), 94, id="lord-howe-half-hour-gap"),
        pytest.param("*/15 * * * *", LORD_HOWE, local(LORD_HOWE, 2025, 4, 6),
                     local(LORD_HOWE, 2025, 4, 7), 96, id="lord-howe-half-hour-repeat"),
        # 02:45 to 03:30 fall in the gap and fire with 03:45.
        pytest.param("*/15 * * * *", CHATHAM, local(CHATHAM, 2025, 9, 28),
                     local(CHATHAM, 2025, 9, 29), 92, id="chatham-gap-at-02:45"),
        pytest.param("*/15 * * * *", CHATHAM, local(CHATHAM, 2025, 4, 6),
                     local(CHATHAM, 2025, 4, 7), 96, id="chatham-repeat"),
        pytest.param("* * * * * *", "UTC", utc(2025, 1, 1, 0, 0, 0, 999_999),
                     utc(2025, 1, 1, 0, 0, 3), 3, id="sub-second-after"),
        pytest.param("* * * * * *", "UTC", utc(2025, 1, 1), utc(2025, 1, 1, 0, 0, 2, 999_999), 2,
                     id="sub-second-until"),
        pytest.param("* * * * *", "UTC", utc(2025, 1, 2), utc(2025, 1, 1), 0, id="reversed"),
    ],
)  # fmt: skip
def test_count_between_known_counts(
    expression: str, time_zone: str, after: datetime, until: datetime, expected: int
) -> None:
    """Counts with no cap, derived by hand; the small ones are also enumerated."""
    schedule = Schedule.parse(expression, time_zone)
    assert schedule.count_between(after, until) == expected
    if expected <= 1000:
        assert len(schedule.slots_between(after, until, limit=1001)) == expected


# --- DST: the time rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "time_zone", "after", "until", "expected"),
    [
        pytest.param(
            "30 2 * * *", BERLIN, utc(2025, 3, 29, 12), utc(2025, 3, 31, 12),
            [utc(2025, 3, 30, 1), utc(2025, 3, 31, 0, 30)],
            id="berlin-spring-daily-in-gap-fires-at-gap-end",
        ),
        pytest.param(
            "30 2 * * *", BERLIN, utc(2025, 10, 25, 12), utc(2025, 10, 27, 12),
            [utc(2025, 10, 26, 0, 30), utc(2025, 10, 27, 1, 30)],
            id="berlin-fall-daily-in-fold-fires-once-first",
        ),
        pytest.param(
            "30 2 * * *", NEW_YORK, utc(2025, 3, 8, 12), utc(2025, 3, 10, 12),
            [utc(2025, 3, 9, 7), utc(2025, 3, 10, 6, 30)],
            id="new-york-spring-daily-in-gap-fires-at-gap-end",
        ),
        pytest.param(
            "30 1 * * *", NEW_YORK, utc(2025, 11, 1, 12), utc(2025, 11, 3, 12),
            [utc(2025, 11, 2, 5, 30), utc(2025, 11, 3, 6, 30)],
            id="new-york-fall-daily-in-fold-fires-once-first",
        ),
        pytest.param(
            "0 * * * *", BERLIN, utc(2025, 10, 25, 23, 30), utc(2025, 10, 26, 3),
            [utc(2025, 10, 26, 0), utc(2025, 10, 26, 2), utc(2025, 10, 26, 3)],
            id="berlin-fall-hourly-skips-second-pass",
        ),
        pytest.param(
            "*/15 * * * *", BERLIN, utc(2025, 3, 30, 0, 30), utc(2025, 3, 30, 1, 20),
            [utc(2025, 3, 30, 0, 45), utc(2025, 3, 30, 1), utc(2025, 3, 30, 1, 15)],
            id="berlin-spring-quarter-hours-collapse-into-one-slot",
        ),
        pytest.param(
            "*/15 * * * *", NEW_YORK, utc(2025, 3, 9, 6, 30), utc(2025, 3, 9, 7, 30),
            [utc(2025, 3, 9, 6, 45), utc(2025, 3, 9, 7), utc(2025, 3, 9, 7, 15),
             utc(2025, 3, 9, 7, 30)],
            id="new-york-spring-quarter-hours-collapse-into-one-slot",
        ),
        pytest.param(
            "*/15 * * * *", BERLIN, utc(2025, 10, 25, 23, 50), utc(2025, 10, 26, 2, 20),
            [utc(2025, 10, 26, 0), utc(2025, 10, 26, 0, 15), utc(2025, 10, 26, 0, 30),
             utc(2025, 10, 26, 0, 45), utc(2025, 10, 26, 2), utc(2025, 10, 26, 2, 15)],
            id="berlin-fall-quarter-hours-once",
        ),
        pytest.param(
            "*/15 * * * *", NEW_YORK, utc(2025, 11, 2, 4, 50), utc(2025, 11, 2, 7, 20),
            [utc(2025, 11, 2, 5), utc(2025, 11, 2, 5, 15), utc(2025, 11, 2, 5, 30),
             utc(2025, 11, 2, 5, 45), utc(2025, 11, 2, 7), utc(2025, 11, 2, 7, 15)],
            id="new-york-fall-quarter-hours-once",
        ),
        pytest.param(
            "0 30 2 * * *", BERLIN, utc(2025, 3, 29, 12), utc(2025, 3, 30, 12),
            [utc(2025, 3, 30, 1)],
            id="berlin-spring-seconds-schedule-in-gap",
        ),
        pytest.param(
            "30 2 * * *", "Australia/Lord_Howe", utc(2025, 10, 4, 12), utc(2025, 10, 4, 18),
            [utc(2025, 10, 4, 15, 30)],
            id="lord-howe-half-hour-gap",
        ),
    ],
)  # fmt: skip
def test_dst_slots(
    expression: str, time_zone: str, after: datetime, until: datetime, expected: list[datetime]
) -> None:
    schedule = Schedule.parse(expression, time_zone)
    slots = schedule.slots_between(after, until)
    assert slots == expected
    assert_chain(schedule, after, until, slots)


@pytest.mark.parametrize(
    ("time_zone", "day", "expected"),
    [
        (BERLIN, (2025, 3, 30), 23),
        (BERLIN, (2025, 10, 26), 24),
        (BERLIN, (2025, 6, 1), 24),
        (NEW_YORK, (2025, 3, 9), 23),
        (NEW_YORK, (2025, 11, 2), 24),
        (NEW_YORK, (2026, 3, 8), 23),
        (NEW_YORK, (2026, 11, 1), 24),
        ("Asia/Kolkata", (2025, 3, 30), 24),
    ],
)
def test_hourly_runs_once_per_local_hour(
    time_zone: str, day: tuple[int, int, int], expected: int
) -> None:
    start = datetime(day[0], day[1], day[2], tzinfo=ZoneInfo(time_zone))
    end = start + timedelta(days=1)  # wall-clock arithmetic: next local midnight
    after, until = start - timedelta(microseconds=1), end - timedelta(microseconds=1)
    schedule = Schedule.parse("0 * * * *", time_zone)
    slots = schedule.slots_between(after, until)
    assert len(slots) == expected
    assert schedule.count_between(after, until) == expected
    assert len({slot.astimezone(ZoneInfo(time_zone)).replace(tzinfo=None) for slot in slots}) == (
        expected
    )


@pytest.mark.parametrize(
    ("time_zone", "instant", "expected"),
    [
        (BERLIN, utc(2025, 10, 26, 1, 10), utc(2025, 10, 26, 2)),  # 02:10 CET, second pass
        (BERLIN, utc(2025, 10, 26, 0, 50), utc(2025, 10, 26, 2)),  # 02:50 CEST, first pass
        (BERLIN, utc(2025, 10, 26, 1), utc(2025, 10, 26, 2)),  # the transition instant
        (NEW_YORK, utc(2025, 11, 2, 6, 10), utc(2025, 11, 2, 7)),  # 01:10 EST, second pass
        (NEW_YORK, utc(2025, 11, 2, 5, 59, 59), utc(2025, 11, 2, 7)),  # just before fall back
        (BERLIN, utc(2025, 3, 30, 0, 59, 59), utc(2025, 3, 30, 1)),  # just before the gap
        (BERLIN, utc(2025, 3, 30, 1), utc(2025, 3, 30, 1, 15)),  # at the gap end
    ],
)
def test_next_after_around_dst(time_zone: str, instant: datetime, expected: datetime) -> None:
    schedule = Schedule.parse("*/15 * * * *", time_zone)
    assert schedule.next_after(instant) == expected
    assert schedule.slots_between(instant, expected) == [expected]


# --- property --------------------------------------------------------------------------


def assert_chain(
    schedule: Schedule, after: datetime, until: datetime, slots: list[datetime]
) -> None:
    """Iterating next_after from `after` must visit exactly `slots`, then leave the range."""
    assert all(earlier < later for earlier, later in pairwise(slots))
    assert all(slot.tzinfo is UTC for slot in slots)
    current = after
    for slot in slots:
        following = schedule.next_after(current)
        assert following == slot
        current = slot
    beyond = schedule.next_after(current)
    assert beyond is None or beyond > until


def test_next_after_reuses_its_last_answer_only_for_instants_it_covers() -> None:
    """The shared Schedule answers from its last answer; each call below checks one edge."""
    schedule = Schedule.parse("*/10 * * * *", "Europe/Berlin")

    def at(minute: int, second: int = 0) -> datetime:
        return datetime(2026, 1, 5, 9, minute, second, tzinfo=UTC)

    assert schedule.next_after(at(0, 1)) == at(10)
    assert schedule.next_after(at(9, 59)) == at(10)  # covered: [09:00:01, 09:10)
    assert schedule.next_after(at(10)) == at(20)  # the answer itself is not covered
    assert schedule.next_after(at(0)) == at(10)  # before the last instant asked
    assert schedule.next_after(datetime(2026, 1, 5, 8, 59, 59, tzinfo=UTC)) == at(0)


def test_slots_between_reuses_its_last_answer_only_while_no_slot_comes_between() -> None:
    """At a burst every ScheduledJob asks with the same cursor and a later `until`: the answer is
    reused until the next slot, and each caller gets its own list (the jitter pops from it)."""
    schedule = Schedule.parse("0 * * * *")
    cursor = utc(2026, 1, 5, 8)
    first = schedule.slots_between(cursor, utc(2026, 1, 5, 9, 0, 0, 100_000))
    assert first == [utc(2026, 1, 5, 9)]
    first.pop()
    reused = schedule.slots_between(cursor, utc(2026, 1, 5, 9, 59))
    assert reused == [utc(2026, 1, 5, 9)]
    reused.pop()
    assert schedule.slots_between(cursor, utc(2026, 1, 5, 9, 30)) == [utc(2026, 1, 5, 9)]
    assert schedule.slots_between(cursor, utc(2026, 1, 5, 10)) == [
        utc(2026, 1, 5, 9),
        utc(2026, 1, 5, 10),
    ]
    assert schedule.slots_between(cursor, utc(2026, 1, 5, 10), limit=1) == [utc(2026, 1, 5, 10)]
    assert schedule.slots_between(utc(2026, 1, 5, 9), utc(2026, 1, 5, 10)) == [utc(2026, 1, 5, 10)]
