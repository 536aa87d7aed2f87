"""Compatibility with CronJob's schedule parser (robfig/cron v3, `cron.ParseStandard`).

A table built from robfig's parser tests (TestRange, TestField, TestParseSchedule,
TestParseScheduleErrors), from the cases of Kubernetes' CronJob validation, and from what users
write: each expression a CronJob accepts must name the same instants here, and each it refuses
must be refused here, naming the field. The meaning is checked against a plain equivalent (only
values and lists, which croniter and robfig read alike) over two years of slots, so a wrong
translation shows as different instants, not as a different string.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from croniter import croniter

from cronlease.core.schedule.cron import MACROS, Schedule, ScheduleError
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import parse_spec

AFTER, UNTIL = datetime(2025, 1, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)
SLOTS = 300  # compared one by one before each of a few instants
EVENS = ",".join(str(n) for n in range(0, 60, 2))
ODD_DAYS = ",".join(str(n) for n in range(1, 32, 2))

# (expression, a plain equivalent, where the case comes from)
SAME_AS = [
    ("5 * * * *", "5 * * * *", "robfig TestParseSchedule"),
    ("* 5 * * * *", "* 5 * * * *", "robfig TestParseSchedule, seconds first"),
    ("0 5 * * * *", "0 5 * * * *", "robfig TestParseSchedule, seconds first"),
    ("5-5 * * * *", "5 * * * *", "robfig TestRange 5-5"),
    ("5-6 * * * *", "5,6 * * * *", "robfig TestRange 5-6"),
    ("5-7 * * * *", "5,6,7 * * * *", "robfig TestRange 5-7"),
    ("5-6/2 * * * *", "5 * * * *", "robfig TestRange 5-6/2"),
    ("5-7/2 * * * *", "5,7 * * * *", "robfig TestRange 5-7/2"),
    ("5-7/1 * * * *", "5,6,7 * * * *", "robfig TestRange 5-7/1"),
    ("*/2 * * * *", f"{EVENS} * * * *", "robfig TestRange */2"),
    ("0 0 * */2 *", "0 0 * 1,3,5,7,9,11 *", "robfig TestRange */2 (from the field's minimum)"),
    ("5,6 * * * *", "5,6 * * * *", "robfig TestField"),
    ("1,5-7/2,3 * * * *", "1,3,5,7 * * * *", "robfig TestField"),
    ("0 0 * * 6-6", "0 0 * * 6", "CronJob user: an equal range (issue 16)"),
    ("0 6-6 * * *", "0 6 * * *", "CronJob user: an equal range"),
    ("0-0/5 0 * * *", "0 0 * * *", "an equal range with a step"),
    ("0 0 1 JAN-JAN *", "0 0 1 1 *", "an equal range of names"),
    ("* * * * ?", "* * * * *", "robfig ParseStandard doc"),
    ("? ? ? ? ?", "* * * * *", "? in every field"),
    ("?/15 * * * *", "0,15,30,45 * * * *", "? with a step"),
    ("30/10 * * * *", "30,40,50 * * * *", "a/step runs to the end of the field"),
    ("05 * * * *", "5 * * * *", "a leading zero"),
    ("0000000005 * * * *", "5 * * * *", "leading zeros, as many as robfig's Atoi takes"),
    ("*/1234567890 * * * *", "0 * * * *", "a step of ten digits"),
    ("*/100 * * * *", "0 * * * *", "a step beyond the field"),
    ("0 0 1 jan,Feb,MAR *", "0 0 1 1,2,3 *", "names in any case"),
    ("0 0 1 JAN-MAR/2 *", "0 0 1 1,3 *", "a range of names with a step"),
    ("0 9 * * MON-FRI", "0 9 * * 1,2,3,4,5", "weekday names"),
    ("0 0 * * sun", "0 0 * * 0", "Sunday as 0"),
    ("0 0 * * 7", "0 0 * * 0", "Sunday as 7 (Vixie cron; robfig refuses it)"),
    ("0 0 * * 5-7", "0 0 * * 0,5,6", "a range up to Sunday as 7"),
    ("0 0 * * 0,7", "0 0 * * 0", "Sunday twice"),
    # Both day fields restricted: either matches (robfig's dayMatches, as Vixie cron).
    ("0 9 13 * FRI", "0 9 13 * 5", "either the 13th or a Friday"),
    ("0 9 1-31 * MON", "0 9 * * *", "a full list is restricted: every day"),
    ("0 9 */2 * MON", f"0 9 {ODD_DAYS} * 1", "a star with a step is restricted"),
    # A star or ? with step 1 is a star: only the other field restricts.
    ("0 9 */1 * MON", "0 9 * * 1", "*/1 is unrestricted: Mondays only"),
    ("0 9 ? * MON", "0 9 * * 1", "? is unrestricted: Mondays only"),
    ("0 9 13 * ?", "0 9 13 * *", "? is unrestricted: the 13th only"),
    ("0 9 13 * 0-6", "0 9 * * *", "a full list of weekdays is restricted: every day"),
    ("  0   0  *  *  *  ", "0 0 * * *", "spaces around and between fields"),
    ("@yearly", "0 0 1 1 *", "robfig TestParseSchedule"),
    ("@annually", "0 0 1 1 *", "robfig TestParseSchedule"),
    ("@monthly", "0 0 1 * *", "robfig descriptor"),
    ("@weekly", "0 0 * * 0", "robfig descriptor"),
    ("@daily", "0 0 * * *", "robfig descriptor"),
    ("@midnight", "0 0 * * *", "robfig TestParseSchedule"),
    ("@hourly", "0 * * * *", "robfig descriptor"),
]

# (expression, the field the message names, where the case comes from)
REFUSED = [
    ("5--5 * * * *", "minute", "robfig TestRange: too many hyphens"),
    ("0 0 1 jan-x *", "month", "robfig TestRange: failed to parse int"),
    ("0 0 2-x * *", "day-of-month", "robfig TestRange: failed to parse int"),
    ("*/-12 * * * *", "minute", "robfig TestRange: negative number"),
    ("*//2 * * * *", "minute", "robfig TestRange: too many slashes"),
    ("0 0 0 * *", "day-of-month", "robfig TestRange: below minimum"),
    ("60 * * * *", "minute", "robfig TestRange: above maximum"),
    ("0 24 * * *", "hour", "above maximum"),
    ("0 0 1 13 *", "month", "above maximum"),
    ("0 0 * * 8", "day-of-week", "above maximum (7 is Sunday)"),
    ("5-3 * * * *", "minute", "robfig TestRange: beyond end of range"),
    ("0 22-2 * * *", "hour", "a range that wraps"),
    ("0 0 * * FRI-MON", "day-of-week", "a range of names that wraps"),
    ("*/0 * * * *", "minute", "robfig TestRange: step should be a positive number"),
    ("0 j * * *", "hour", "robfig TestParseScheduleErrors: failed to parse int"),
    ("0 0 * * FUN", "day-of-week", "not a name"),
    ("0 0 15W * *", "day-of-month", "Quartz W: refused by both"),
    ("0 0 * * 5#2", "day-of-week", "Quartz #: refused by both"),
    ("0 0 * * 5L", "day-of-week", "Quartz L in day-of-week: refused by both"),
    ("H * * * *", "minute", "Jenkins H: refused by both"),
    ("1,,2 * * * *", "minute", "robfig's tokenizer drops the empty item; refused here"),
    ("+5 * * * *", "minute", "robfig's Atoi takes a sign; refused here"),
    ("*-5 * * * *", "minute", "robfig ignores a bound after a star; refused here"),
]

# (expression, a fragment of the message, where the case comes from)
REFUSED_WHOLE = [
    ("", "must not be empty", "robfig TestParseScheduleErrors: empty spec string"),
    ("* * * *", "has 4 fields", "robfig TestParseScheduleErrors: expected 5 to 6 fields"),
    ("* * * * * * *", "has 7 fields", "too many fields"),
    ("@every Xm", '"Xm" is not a duration', "robfig TestParseScheduleErrors"),
    ("@unrecognized", 'unknown macro "@unrecognized"', "robfig TestParseScheduleErrors"),
    ("@reboot", 'unknown macro "@reboot"', "robfig: unrecognized descriptor"),
    ("TZ=UTC 0 0 * * *", "use the timeZone field", "CronJob validation: TZ in schedule"),
    ("CRON_TZ=UTC 0 0 * * *", "use the timeZone field", "CronJob validation: TZ in schedule"),
    ("@every 500ms", "less than a second", "robfig rounds up to 1 s; refused here"),
    ("@every 0s", "less than a second", "robfig rounds up to 1 s; refused here"),
    ("@every -5m", '"-5m" is not a duration', "robfig rounds up to 1 s; refused here"),
    ("0 0 30 2 *", "never fires", "robfig accepts it; it never runs: refused here"),
]


@pytest.mark.parametrize(("expression", "plain", "source"), SAME_AS)
def test_same_instants_as_cronjob(expression: str, plain: str, source: str) -> None:
    schedule = Schedule.parse(expression)
    for until in (AFTER, datetime(2025, 6, 30, 23, 58, tzinfo=UTC), UNTIL):
        after = until - timedelta(days=800)
        ours = schedule.slots_between(after, until, limit=SLOTS)
        assert ours == croniter_slots(plain, after, until), source


def croniter_slots(plain: str, after: datetime, until: datetime) -> list[datetime]:
    """The last SLOTS slots in (after, until], read by croniter itself: the oracle (a plain
    expression, of values, lists and *, means the same to croniter and to robfig)."""
    walk = croniter(
        MACROS.get(plain, plain), until + timedelta(seconds=1), second_at_beginning=True
    )
    slots = [walk.get_prev(datetime).astimezone(UTC) for _ in range(SLOTS)]
    return sorted(slot for slot in slots if slot > after)


@pytest.mark.parametrize(("expression", "field", "source"), REFUSED)
def test_refused_naming_the_field(expression: str, field: str, source: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expression)
    assert str(caught.value).startswith(f"schedule: invalid {field} field "), source


@pytest.mark.parametrize(("expression", "fragment", "source"), REFUSED_WHOLE)
def test_refused_whole(expression: str, fragment: str, source: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        Schedule.parse(expression)
    assert str(caught.value).startswith("schedule: "), source
    assert fragment in str(caught.value), source


def test_last_day_of_the_month() -> None:
    """L, which croniter evaluates: the 31st, the 28th or 29th, the 30th."""
    slots = Schedule.parse("0 18 L * *").slots_between(AFTER, datetime(2025, 5, 1, tzinfo=UTC))
    assert [slot.day for slot in slots] == [31, 28, 31, 30]
    leap = Schedule.parse("0 0 L 2 *").next_after(datetime(2027, 3, 1, tzinfo=UTC))
    assert leap == datetime(2028, 2, 29, tzinfo=UTC)
    either = Schedule.parse("0 0 1,L * *").slots_between(AFTER, datetime(2025, 3, 1, tzinfo=UTC))
    assert [slot.day for slot in either] == [31, 1, 28, 1]


# --- @every: the ScheduledJob's creation plus whole periods, as CronJob counts them ---------

CREATED = datetime(2026, 3, 29, 0, 59, 30, 700_000, tzinfo=UTC)  # an instant of any precision


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [("5m", 300), ("1h30m", 5400), ("1.5h", 5400), ("90s", 90), ("2.7s", 2), ("1s", 1)],
)
def test_every_period(duration: str, seconds: int) -> None:
    """Go's duration syntax; robfig truncates to whole seconds."""
    schedule = Schedule.parse(f"@every {duration}", "Europe/Berlin", CREATED)
    start = CREATED.replace(microsecond=0)
    first = schedule.next_after(CREATED)
    assert first == start + timedelta(seconds=seconds)
    assert schedule.next_after(first) == first + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("duration", "has_seconds"), [("59s", True), ("1m", False), ("90s", False)]
)
def test_every_names_jobs_by_the_second_when_slots_share_a_minute(
    duration: str, has_seconds: bool
) -> None:
    assert Schedule.parse(f"@every {duration}", "UTC", CREATED).has_seconds is has_seconds


def test_every_ignores_the_time_zone_and_dst() -> None:
    """Berlin springs forward at 01:00 UTC on 2026-03-29: an hour's period stays an hour."""
    slots = Schedule.parse("@every 1h", "Europe/Berlin", CREATED).slots_between(
        CREATED, CREATED + timedelta(hours=4)
    )
    assert [slot - CREATED.replace(microsecond=0) for slot in slots] == [
        timedelta(hours=hours) for hours in (1, 2, 3, 4)
    ]


def test_every_slots_and_counts_agree() -> None:
    schedule = Schedule.parse("@every 7s", "UTC", CREATED)
    start = CREATED.replace(microsecond=0)
    # The creation itself is no slot; the first is one period later.
    assert schedule.slots_between(start - timedelta(days=1), start) == []
    after, until = start + timedelta(seconds=3), start + timedelta(seconds=70)
    slots = schedule.slots_between(after, until)
    assert slots == [start + timedelta(seconds=7 * k) for k in range(1, 11)]
    assert schedule.count_between(after, until) == 10
    assert schedule.slots_between(after, until, limit=3) == slots[-3:]
    assert schedule.count_between(until, after) == 0
    assert schedule.count_between(start - timedelta(days=9), start + timedelta(days=1)) == 12342


def test_every_counts_from_its_own_anchor() -> None:
    """Two ScheduledJobs with the same @every fire at their own phases (cached apart)."""
    other = CREATED + timedelta(seconds=20)
    first = Schedule.parse("@every 1m", "UTC", CREATED).next_after(other)
    second = Schedule.parse("@every 1m", "UTC", other).next_after(other)
    assert (first, second) == (
        CREATED.replace(microsecond=0) + timedelta(minutes=1),
        other.replace(microsecond=0) + timedelta(minutes=1),
    )


# --- spec.schedules: several expressions, one stream of slots --------------------------------


def test_several_schedules_merge_into_one_stream() -> None:
    raw = {"schedules": ["*/2 * * * * *", "*/3 * * * * *"], "jobTemplate": {"spec": {}}}
    schedule = parse_spec("backup", raw).schedule
    assert schedule is not None
    slots = schedule.slots_between(AFTER, AFTER + timedelta(seconds=12))
    assert [slot.second for slot in slots] == [2, 3, 4, 6, 8, 9, 10, 12]  # 6 and 12 once
    assert schedule.count_between(AFTER, AFTER + timedelta(days=1)) == 86_400 * 2 // 3


@pytest.mark.parametrize(
    ("schedules", "message"),
    [
        (["0 * * * *", "0 * * * *"], "spec.schedules[1]: duplicates schedules[0]"),
        (["0 * * * *", "61 * * * *"], 'spec.schedules[1]: invalid minute field "61"'),
        (["@every 5m", "0 * * * *"], "spec.schedules[0]: @every cannot be combined"),
        ([], "spec.schedules: must hold 1 to 10 expressions"),
        (["0 * * * *"] * 11, "spec.schedules: must hold 1 to 10 expressions"),
        ("0 * * * *", "spec.schedules: must be a list of cron expressions"),
        ([5], "spec.schedules: must be a list of cron expressions"),
    ],
)
def test_bad_schedules_name_the_entry(schedules: object, message: str) -> None:
    raw = {"schedules": schedules, "jobTemplate": {"spec": {}}}
    with pytest.raises(SpecError) as caught:
        parse_spec("backup", raw)
    assert message in str(caught.value)


def test_one_entry_of_schedules_is_that_schedule() -> None:
    raw = {"schedules": ["@every 90s"], "jobTemplate": {"spec": {}}}
    assert parse_spec("backup", raw, CREATED).schedule == Schedule.parse(
        "@every 90s", "UTC", CREATED
    )


def test_exactly_one_of_schedule_schedules_and_run_at() -> None:
    raw = {"schedule": "0 * * * *", "schedules": ["0 * * * *"], "jobTemplate": {"spec": {}}}
    with pytest.raises(SpecError, match="exactly one of schedule, schedules and runAt"):
        parse_spec("backup", raw)
