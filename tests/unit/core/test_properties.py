"""Property-based tests (hypothesis) of the pure core: schedule arithmetic and decide().

Schedules: random 5- and 6-field expressions whose fields are built from values, lists, ranges and
steps, so the test knows which values each field names. Slots are checked against two independent
brute-force oracles of the time rule (the module docstring of cronlease.core.schedule.cron):

* from the wall-clock side: every wall time the expression names maps to exactly one instant (its
  first occurrence, or the end of the gap it falls in), and the slots are exactly those instants;
* from the instant side: every minute (second) of the window is a slot exactly when its wall time
  is named on its first occurrence, or it ends a gap in which a named wall time was skipped.

Counting: count_between, which is arithmetic, against the slot generator, which is the definition.

decide(): random sequences of "now" fed to decide(), the status written back and the created Jobs
added to the live model each time, as the shell does; bookkeeping invariants are checked throughout.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from functools import cache
from itertools import islice, pairwise, takewhile
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from builders import after_apply, condition, job_template, names, view
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from cronlease.core.decide.decision import Decision, PlannedRun, ScheduledJobView
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.slots import ON_TIME_TOLERANCE
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    ANNOTATION_RUN_NOW,
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    format_time,
    parse_time,
)
from cronlease.core.schedule.cron import Schedule, ScheduleError
from cronlease.core.schedule.schedules import ScheduleSet

# DST zones first: hypothesis draws the first elements of sampled_from more often.
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "UTC"]
DST_ZONES = frozenset({"Europe/Berlin", "America/New_York", "Australia/Lord_Howe"})
START, END = datetime(2024, 1, 1, tzinfo=UTC), datetime(2029, 1, 1, tzinfo=UTC)
MINUTE, SECOND, MICRO = timedelta(minutes=1), timedelta(seconds=1), timedelta(microseconds=1)
# Wall times whose slot can fall in a window lie within this much of the window's wall times
# (DST shifts the wall clock by at most an hour in these zones).
WALL_MARGIN = timedelta(minutes=65)


def properties(max_examples: int) -> settings:
    """Settings for every test here: no deadline, no example database (no .hypothesis dir)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# --- the zones' transitions, found independently of cronlease.core.schedule.cron ------------------


@cache
def transitions(zone_name: str) -> tuple[datetime, ...]:
    """Every instant in 2023-2029 at which `zone_name` changes its UTC offset (to the second)."""
    zone = ZoneInfo(zone_name)

    def offset(epoch: int) -> timedelta | None:
        return datetime.fromtimestamp(epoch, zone).utcoffset()

    found = []
    day = 86_400
    epoch = int(datetime(2023, 1, 1, tzinfo=UTC).timestamp())
    stop = int(datetime(2030, 1, 1, tzinfo=UTC).timestamp())
    while epoch < stop:
        if offset(epoch) != offset(epoch + day):
            low, high = epoch, epoch + day  # offset(low) is the old one, offset(high) the new
            while high - low > 1:
                middle = (low + high) // 2
                if offset(middle) == offset(epoch):
                    low = middle
                else:
                    high = middle
            found.append(datetime.fromtimestamp(high, UTC))
        epoch += day
    return tuple(found)


def wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


# --- cron expressions that know what they mean -----------------------------------------------


@dataclasses.dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]


@dataclasses.dataclass(frozen=True)
class Cron:
    """An expression and, per field, the values it names (day-of-week 7 folded onto 0)."""

    fields: tuple[Field, ...]

    @property
    def expression(self) -> str:
        return " ".join(field.text for field in self.fields)

    @property
    def has_seconds(self) -> bool:
        return len(self.fields) == 6

    @property
    def unit(self) -> timedelta:
        return SECOND if self.has_seconds else MINUTE

    def _field(self, index_from_end: int) -> Field:
        return self.fields[len(self.fields) - index_from_end]

    @property
    def seconds(self) -> frozenset[int]:
        return self.fields[0].values if self.has_seconds else frozenset({0})

    @property
    def minutes(self) -> frozenset[int]:
        return self._field(5).values

    @property
    def hours(self) -> frozenset[int]:
        return self._field(4).values

    @property
    def days(self) -> Field:
        return self._field(3)

    @property
    def months(self) -> frozenset[int]:
        return self._field(2).values

    @property
    def weekdays(self) -> Field:
        return self._field(1)

    def day_matches(self, day: date) -> bool:
        """Day-of-month OR day-of-week when both are restricted, else the restricted one.

        CronJob's (robfig's) notion of "restricted": a field is unrestricted if one of its items
        is * or ?, without a step or with step 1; a list naming every value is restricted (so
        "0 0 1-31 * 1" fires daily).
        """
        days, weekdays = self.days, self.weekdays
        days_star, weekdays_star = unrestricted(days.text), unrestricted(weekdays.text)
        in_days = day.day in days.values
        in_weekdays = (day.weekday() + 1) % 7 in weekdays.values
        if days_star and weekdays_star:
            return True
        if days_star:
            return in_weekdays
        if weekdays_star:
            return in_days
        return in_days or in_weekdays

    def matches(self, moment: datetime) -> bool:
        """Whether the expression names naive wall-clock time `moment`."""
        return (
            moment.microsecond == 0
            and moment.second in self.seconds
            and moment.minute in self.minutes
            and moment.hour in self.hours
            and moment.month in self.months
            and self.day_matches(moment.date())
        )

    def walls(self, low: datetime, high: datetime) -> Iterator[datetime]:
        """Named naive wall times in [low, high], ascending."""
        day = low.date()
        while day <= high.date():
            if day.month in self.months and self.day_matches(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        for second in sorted(self.seconds):
                            moment = datetime(day.year, day.month, day.day, hour, minute, second)  # noqa: DTZ001
                            if low <= moment <= high:
                                yield moment
            day += timedelta(days=1)


def unrestricted(text: str) -> bool:
    return any(item in ("*", "?", "*/1", "?/1") for item in text.split(","))


# (name, low, high, names) per field; names map to low, low + 1, ...
SECOND_SPEC = ("second", 0, 59, ())
MINUTE_SPEC = ("minute", 0, 59, ())
HOUR_SPEC = ("hour", 0, 23, ())
DAY_SPEC = ("day-of-month", 1, 31, ())
MONTH_SPEC = (
    "month",
    1,
    12,
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"),
)
WEEKDAY_SPEC = ("day-of-week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))


def _text(draw: st.DrawFn, value: int, low: int, names: tuple[str, ...]) -> str:
    index = value - low
    if names and index < len(names) and draw(st.booleans()):
        name = names[index]
        return name.lower() if draw(st.booleans()) else name
    return str(value)


@st.composite
def cron_item(
    draw: st.DrawFn, spec: tuple[str, int, int, tuple[str, ...]]
) -> tuple[str, frozenset[int]]:
    """One comma-separated item of a field: a value, a range, or a step, and the values it names."""
    name, low, high, names = spec
    # "*/n" and "a/n" run to the field's top; day-of-week tops out at 6 there (7 is Sunday again).
    top = 6 if name == "day-of-week" else high
    kind = draw(st.sampled_from(["value", "range", "range-step", "star-step", "value-step"]))
    step = draw(st.integers(1, 99) if draw(st.integers(0, 4)) == 4 else st.integers(1, 12))
    if kind == "value":
        value = draw(st.integers(low, high))
        return _text(draw, value, low, names), frozenset({value})
    if kind == "star-step":
        return f"{draw(st.sampled_from('*?'))}/{step}", frozenset(range(low, top + 1, step))
    if kind == "value-step":
        start = draw(st.integers(low, top))
        return f"{start}/{step}", frozenset(range(start, top + 1, step))
    start = draw(st.integers(low, high - 1))
    end = draw(st.integers(start, high))  # an equal range is its one value, as in CronJob
    use_names = names and end - low < len(names) and draw(st.booleans())
    text = f"{names[start - low]}-{names[end - low]}" if use_names else f"{start}-{end}"
    if kind == "range":
        return text, frozenset(range(start, end + 1))
    return f"{text}/{step}", frozenset(range(start, end + 1, step))


@st.composite
def cron_field(draw: st.DrawFn, spec: tuple[str, int, int, tuple[str, ...]], star: float) -> Field:
    name, low, high, _ = spec
    if draw(st.floats(0, 1)) < star:
        text = draw(st.sampled_from(["*", "?", "*/1"]))
        values = frozenset(range(low, high + 1))
    else:
        items = draw(st.lists(cron_item(spec), min_size=1, max_size=3))
        text = ",".join(item[0] for item in items)
        values = frozenset().union(*(item[1] for item in items))
    if name == "day-of-week":
        values = frozenset(value % 7 for value in values)
    return Field(text, values)


@st.composite
def crons(draw: st.DrawFn, seconds: bool) -> Cron:
    """Mostly dense expressions (so that small windows hold slots), sometimes sparse ones.

    The hour field often names only some of the hours 1-3, in which the zones here change their
    clocks: a schedule that names a gap hour but not the hour after it, or the repeated hour, is
    where a wrong time rule shows.
    """
    if draw(st.integers(0, 2)) == 0:
        dst_hours = sorted(draw(st.sets(st.integers(1, 3), min_size=1, max_size=2)))
        hours = Field(",".join(map(str, dst_hours)), frozenset(dst_hours))
    else:
        hours = draw(cron_field(HOUR_SPEC, star=0.5))
    fields = [
        draw(cron_field(MINUTE_SPEC, star=0.2)),
        hours,
        draw(cron_field(DAY_SPEC, star=0.6)),
        draw(cron_field(MONTH_SPEC, star=0.85)),
        draw(cron_field(WEEKDAY_SPEC, star=0.5)),
    ]
    if seconds:
        fields.insert(0, draw(cron_field(SECOND_SPEC, star=0.2)))
    return Cron(tuple(fields))


def parse(expression: str, zone_name: str) -> Schedule:
    """The Schedule of a generated expression; only "never fires" may refuse it (Feb 30...)."""
    try:
        return Schedule.parse(expression, zone_name)
    except ScheduleError as error:
        message = str(error)
    assert "never fires" in message, (expression, message)
    assume(False)
    raise AssertionError("unreachable: assume(False) ends the example")


@st.composite
def instants(draw: st.DrawFn, zone_name: str, near: timedelta) -> datetime:
    """Uniform over 2024-2028, or up to `near` before (a little after) a DST transition."""
    micros = draw(st.sampled_from([0, 0, 0, 1, 500_000, 999_999]))
    changes = [t for t in transitions(zone_name) if START <= t < END]
    if changes and draw(st.integers(0, 3)) > 0:
        around = draw(st.sampled_from(changes))
        offset = draw(st.integers(-int(near.total_seconds()), int(near.total_seconds() / 4)))
        base = around + timedelta(seconds=offset)
    else:
        base = START + timedelta(seconds=draw(st.integers(0, int((END - START).total_seconds()))))
    return base + timedelta(microseconds=micros)


@st.composite
def windows(
    draw: st.DrawFn, cron: Cron, zone_name: str, scale: timedelta
) -> tuple[datetime, datetime]:
    """(after, until) reaching up to `scale` either side of an anchor: mostly a DST transition of
    the zone, otherwise the slot of a wall time the expression names (so the window holds slots).
    """
    micros = timedelta(microseconds=draw(st.sampled_from([0, 0, 0, 1, 500_000, 999_999])))
    # before == 0 (hypothesis likes it) puts `after` right on the anchor, often a slot itself
    before = scale * draw(st.integers(0, 1000)) / 1000
    beyond = scale * draw(st.integers(1, 1000)) / 1000
    changes = [t for t in transitions(zone_name) if START <= t < END]
    if changes and draw(st.integers(0, 3)) < 3:
        anchor = draw(st.sampled_from(changes))
    else:
        day = datetime(2024, 1, 1) + timedelta(days=draw(st.integers(0, 5 * 365)))  # noqa: DTZ001
        named = list(islice(cron.walls(day, day + timedelta(days=3)), 1000))
        moment = draw(st.sampled_from(named)) if named else day
        anchor = slot_of(zone_name, moment)
    return anchor - before - micros, anchor + beyond - micros


# --- the two oracles --------------------------------------------------------------------------


def gap_end(zone_name: str, moment: datetime) -> datetime:
    """The transition instant ending the gap in which naive wall time `moment` does not exist."""
    zone = ZoneInfo(zone_name)
    before = moment.replace(tzinfo=zone, fold=1).astimezone(UTC)
    after = moment.replace(tzinfo=zone, fold=0).astimezone(UTC)
    low, high = min(before, after), max(before, after)
    ends = [t for t in transitions(zone_name) if low < t <= high]
    assert len(ends) == 1, (zone_name, moment, ends)
    return ends[0]


def slot_of(zone_name: str, moment: datetime) -> datetime:
    """The time rule: the instant at which naive wall time `moment` fires."""
    zone = ZoneInfo(zone_name)
    first = moment.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if wall(first, zone) == moment:
        second = moment.replace(tzinfo=zone, fold=1).astimezone(UTC)
        return min(first, second)  # the first occurrence of a repeated wall time
    return gap_end(zone_name, moment)


def slots_from_walls(
    cron: Cron, zone_name: str, after: datetime, until: datetime
) -> tuple[list[datetime], dict[datetime, list[datetime]]]:
    """Oracle 1: the instants of all named wall times, and which wall times map to each."""
    zone = ZoneInfo(zone_name)
    low, high = wall(after, zone) - WALL_MARGIN, wall(until, zone) + WALL_MARGIN
    by_slot: dict[datetime, list[datetime]] = {}
    for moment in cron.walls(low, high):
        slot = slot_of(zone_name, moment)
        if after < slot <= until:
            by_slot.setdefault(slot, []).append(moment)
    return sorted(by_slot), by_slot


def fires(cron: Cron, zone_name: str, instant: datetime) -> bool:
    """Oracle 2: whether `instant` (on a whole unit) is a slot, judged from the instant side."""
    zone = ZoneInfo(zone_name)
    local = instant.astimezone(zone)
    here = local.replace(tzinfo=None)
    if cron.matches(here) and not local.fold:
        return True
    previous = wall(instant - cron.unit, zone)
    skipped = previous + cron.unit
    while skipped < here:  # only right after a spring-forward gap
        if cron.matches(skipped):
            return True
        skipped += cron.unit
    return False


def units_in(after: datetime, until: datetime, unit: timedelta) -> Iterator[datetime]:
    """Every whole-unit instant t with after < t <= until."""
    step = int(unit.total_seconds())
    epoch = int(after.timestamp()) // step * step + step
    moment = datetime.fromtimestamp(epoch, UTC)
    while moment <= until:
        yield moment
        moment += unit


# --- schedule properties ----------------------------------------------------------------------


def check_slots(
    schedule: Schedule, cron: Cron, zone_name: str, after: datetime, until: datetime
) -> None:
    slots = schedule.slots_between(after, until, limit=100_000)
    # strictly increasing UTC instants inside the window
    assert all(slot.tzinfo is UTC for slot in slots)
    assert all(earlier < later for earlier, later in pairwise(slots)), slots
    assert all(after < slot <= until for slot in slots)
    assert schedule.count_between(after, until) == len(slots)
    # next_after walks exactly the same chain and then leaves the window
    # (for a dense window, from a spread of 200 links: each call builds a croniter)
    chain = list(zip([after, *slots], slots, strict=False))
    for current, slot in chain[:: max(1, len(chain) // 200)] + chain[-1:]:
        assert schedule.next_after(current) == slot, (current, slot)
    beyond = schedule.next_after(slots[-1] if slots else after)
    assert beyond is None or beyond > until
    # the limit keeps the most recent slots
    assert schedule.slots_between(after, until, limit=3) == slots[-3:]
    # oracle 1: every named wall time maps to exactly one slot, and nothing else is a slot
    expected, by_slot = slots_from_walls(cron, zone_name, after, until)
    assert slots == expected, (cron.expression, zone_name, after, until)
    # oracle 2: no instant between (or around) the slots is a slot
    slot_set = set(slots)
    for instant in units_in(after, until, cron.unit):
        assert fires(cron, zone_name, instant) == (instant in slot_set), (
            cron.expression,
            zone_name,
            instant,
        )
    # DST: a wall-clock time never fires twice (the fold's second pass is silent)
    zone = ZoneInfo(zone_name)
    local_walls = [wall(slot, zone) for slot in slots]
    assert len(set(local_walls)) == len(local_walls)
    # several named wall times share a slot only when they fall in one gap
    for slot, moments in by_slot.items():
        if len(moments) > 1 or wall(slot, zone) != moments[0]:
            assert zone_name in DST_ZONES
            assert slot in transitions(zone_name)
            event("a named wall time in a spring-forward gap")
    if any(after < change <= until for change in transitions(zone_name)):
        event("the window holds a DST transition")
    event("slots in the window" if slots else "no slot in the window")


def check_a_window(data: st.DataObject, cron: Cron, zone_name: str, span: timedelta) -> None:
    after, until = data.draw(windows(cron, zone_name, span), label="window")
    check_slots(parse(cron.expression, zone_name), cron, zone_name, after, until)


@properties(200)
@given(data=st.data(), cron=crons(seconds=False), zone_name=st.sampled_from(ZONES))
def test_minute_schedules_follow_the_time_rule(
    data: st.DataObject, cron: Cron, zone_name: str
) -> None:
    check_a_window(data, cron, zone_name, timedelta(hours=12))


@properties(150)
@given(data=st.data(), cron=crons(seconds=True), zone_name=st.sampled_from(ZONES))
def test_second_schedules_follow_the_time_rule(
    data: st.DataObject, cron: Cron, zone_name: str
) -> None:
    check_a_window(data, cron, zone_name, timedelta(minutes=15))


@properties(100)
@given(
    data=st.data(),
    seconds=st.booleans(),
    zone_name=st.sampled_from(ZONES),
    probes=st.lists(st.floats(0, 1), min_size=1, max_size=5),
)
def test_next_after_any_instant_is_the_first_later_slot(
    data: st.DataObject, seconds: bool, zone_name: str, probes: list[float]
) -> None:
    cron = data.draw(crons(seconds=seconds), label="cron")
    schedule = parse(cron.expression, zone_name)
    scale = timedelta(minutes=30) if seconds else timedelta(hours=12)
    after, until = data.draw(windows(cron, zone_name, scale), label="window")
    expected, _ = slots_from_walls(cron, zone_name, after, until)
    for fraction in probes:
        probe = after + (until - after) * fraction
        later = [slot for slot in expected if slot > probe]
        following = schedule.next_after(probe)
        if later:
            assert following == later[0], (cron.expression, zone_name, probe)
        else:
            assert following is None or following > until


@properties(60)
@given(
    data=st.data(),
    seconds=st.booleans(),
    zone_name=st.sampled_from(ZONES),
    days=st.integers(1, 60),
)
def test_long_windows_chain_without_gaps(
    data: st.DataObject, seconds: bool, zone_name: str, days: int
) -> None:
    """Over weeks, the most recent slots still form an unbroken next_after chain."""
    cron = data.draw(crons(seconds=seconds), label="cron")
    schedule = parse(cron.expression, zone_name)
    after = data.draw(instants(zone_name, near=timedelta(days=days)), label="after")
    until = after + timedelta(days=days)
    slots = schedule.slots_between(after, until, limit=300)
    assert all(earlier < later for earlier, later in pairwise(slots))
    assert all(after < slot <= until for slot in slots)
    for earlier, later in pairwise(slots):
        assert schedule.next_after(earlier) == later
    if slots:
        beyond = schedule.next_after(slots[-1])
        assert beyond is None or beyond > until
        first = schedule.next_after(after)
        assert first is not None
        assert first <= slots[0]
    else:
        following = schedule.next_after(after)
        assert following is None or following > until


# --- counting: arithmetic against enumeration ---------------------------------------------------

# The zones above, and: Chatham (+12:45, DST at 02:45), Havana (clocks change at midnight, so a
# local day can start at 01:00), Casablanca (a DST that goes back an hour for Ramadan).
COUNT_ZONES = [*ZONES, "Pacific/Chatham", "America/Havana", "Africa/Casablanca"]
# Day fields: the last day of the month (croniter defines it), and day-of-week fields that name
# every day, restricted or not (CronJob's OR of the day fields turns on the difference).
SPECIAL_DAYS = ["L", "1,L", "L,15", "*/10,L", "l"]
SPECIAL_WEEKDAYS = ["0-6", "sun-sat", "*/1", "?", "0-7", "7", "5-7", "1-1"]
# Slots enumerated per example at most (croniter takes tens of microseconds a slot).
ENUMERATED = 1500


@st.composite
def counted_crons(draw: st.DrawFn) -> str:
    """Expressions of every shape: dense or sparse times of day, day fields with L."""
    seconds = draw(st.booleans())
    fields = [field.text for field in draw(crons(seconds=seconds)).fields]
    if draw(st.booleans()):  # sparse: a few times a day, so that windows span months and years
        for index in range(len(fields) - 3):  # the time fields: [second] minute hour
            top, most = (23, 3) if index == len(fields) - 4 else (59, 2)
            values = draw(st.sets(st.integers(0, top), min_size=1, max_size=most))
            fields[index] = ",".join(map(str, sorted(values)))
    if draw(st.integers(0, 3)) == 0:
        fields[-3] = draw(st.sampled_from(SPECIAL_DAYS))
    if draw(st.integers(0, 3)) == 0:
        fields[-1] = draw(st.sampled_from(SPECIAL_WEEKDAYS))
    return " ".join(fields)


def enumerated(schedule: Schedule, after: datetime, until: datetime, limit: int) -> list[datetime]:
    """The slots in (after, until] as the slot generator walks them, at most `limit` + 1."""
    in_range = takewhile(lambda slot: slot <= until, schedule._slots_after(after))
    return list(islice(in_range, limit + 1))


def enumerated_window(
    data: st.DataObject, schedule: Schedule, after: datetime, until: datetime
) -> tuple[list[datetime], datetime]:
    """The slots in (after, until] and `until`; a window that holds more than ENUMERATED slots
    is cut between two of them, at a random point."""
    slots = enumerated(schedule, after, until, ENUMERATED)
    if len(slots) > ENUMERATED:
        last, beyond = slots[ENUMERATED - 1], slots[ENUMERATED]
        until = last + (beyond - last - MICRO) * data.draw(st.floats(0, 1), label="cut")
        slots = slots[:ENUMERATED]
        event("window cut at the slot limit")
    return slots, until


@st.composite
def count_windows(
    draw: st.DrawFn, schedule: Schedule, zone_name: str, span: timedelta
) -> tuple[datetime, datetime]:
    """(after, until) up to `span` long, at any microsecond: reaching over a DST transition of
    the zone, or over the first slot after a random instant, or anywhere."""
    length = span * draw(st.integers(0, 1000)) / 1000 + draw(st.integers(0, 999_999)) * MICRO
    lead = length * draw(st.integers(0, 100)) / 100
    uniform = START + timedelta(seconds=draw(st.integers(0, int((END - START).total_seconds()))))
    changes = [t for t in transitions(zone_name) if START <= t < END]
    kind = draw(
        st.sampled_from(["transition", "slot", "anywhere"] if changes else ["slot", "anywhere"])
    )
    if kind == "transition":
        after = draw(st.sampled_from(changes)) - lead
    elif kind == "slot":
        after = (schedule.next_after(uniform) or uniform) - lead
    else:
        after = uniform
    after += timedelta(microseconds=draw(st.integers(0, 999_999)))
    event(f"window anchored at: {kind}")
    return after, after + length


@properties(300)
@given(
    data=st.data(),
    expression=counted_crons(),
    zone_name=st.sampled_from(COUNT_ZONES),
    span=st.sampled_from([timedelta(days=days) for days in (0.01, 0.1, 1, 7, 62, 400, 3 * 366)]),
)
def test_count_between_equals_the_enumeration(
    data: st.DataObject, expression: str, zone_name: str, span: timedelta
) -> None:
    """count_between is arithmetic; the slot generator is the definition. A window that holds
    more than ENUMERATED slots ends between two of its slots, at a random point."""
    schedule = parse(expression, zone_name)
    after, until = data.draw(count_windows(schedule, zone_name, span), label="window")
    slots, until = enumerated_window(data, schedule, after, until)
    assert schedule.count_between(after, until) == len(slots), (expression, zone_name, after, until)
    assert schedule.count_between(until, after) == 0
    if any(after < change <= until for change in transitions(zone_name)):
        event("the window holds a DST transition")
    event("slots in the window" if slots else "no slot in the window")


@st.composite
def schedule_sets(draw: st.DrawFn) -> list[str]:
    """Two or three expressions, often variants of one another (so that they share slots)."""
    base = draw(counted_crons())
    expressions = [base]
    for _ in range(draw(st.integers(1, 2))):
        if draw(st.booleans()):
            fields = base.split()
            fields[draw(st.integers(0, len(fields) - 1))] = draw(
                st.sampled_from(["*", "1", "1-3", "*/2", "?"])
            )
            expressions.append(" ".join(fields))
        else:
            expressions.append(draw(counted_crons()))
    assume(len(set(expressions)) == len(expressions))
    return expressions


@properties(200)
@given(
    data=st.data(),
    expressions=schedule_sets(),
    zone_name=st.sampled_from(COUNT_ZONES),
    span=st.sampled_from([timedelta(days=days) for days in (0.01, 0.1, 1, 7, 62, 400)]),
)
def test_several_schedules_are_one_stream_of_their_slots(
    data: st.DataObject, expressions: list[str], zone_name: str, span: timedelta
) -> None:
    """spec.schedules: the union's slots are the parts' slots merged, each instant once, and its
    count is their number (counted per day, by which parts name it: no enumeration)."""
    parts = [parse(expression, zone_name) for expression in expressions]
    union = ScheduleSet.parse_all(expressions, zone_name)
    after, until = data.draw(count_windows(union, zone_name, span), label="window")
    slots, until = enumerated_window(data, union, after, until)
    merged = sorted(set().union(*(enumerated(part, after, until, ENUMERATED) for part in parts)))
    assert slots == merged
    assert union.count_between(after, until) == len(slots), (expressions, zone_name, after, until)
    nexts = [following for part in parts if (following := part.next_after(after)) is not None]
    assert union.next_after(after) == min(nexts, default=None)
    event(
        "parts share slots"
        if sum(len(enumerated(p, after, until, ENUMERATED)) for p in parts) > len(slots)
        else "parts share no slot"
    )


@properties(100)
@given(
    data=st.data(),
    expression=counted_crons(),
    zone_name=st.sampled_from(COUNT_ZONES),
    cuts=st.lists(st.floats(0, 1), min_size=1, max_size=6),
)
def test_count_between_adds_up_over_years(
    data: st.DataObject, expression: str, zone_name: str, cuts: list[float]
) -> None:
    """Over years (too many slots to enumerate), the counts of consecutive windows add up to the
    count of their union, wherever they are cut, and a window's count is bounded by its length."""
    schedule = parse(expression, zone_name)
    after, until = data.draw(
        count_windows(schedule, zone_name, timedelta(days=6 * 366)), label="window"
    )
    bounds = [after, *sorted(after + (until - after) * cut for cut in cuts), until]
    pieces = [schedule.count_between(low, high) for low, high in pairwise(bounds)]
    total = schedule.count_between(after, until)
    assert sum(pieces) == total
    unit = 1 if len(expression.split()) == 6 else 60
    assert 0 <= total <= (until - after).total_seconds() // unit + 1


# --- decide() ---------------------------------------------------------------------------------

POLICIES = ["Allow", "Forbid", "Replace", "BufferOne", "BufferAll", "CancelOther"]
NO_OVERLAP = {"BufferOne", "BufferAll", "CancelOther"}  # not even with a Job being deleted
DEADLINES = [None, 0, 1, 5, 30, 120, 3600]


@st.composite
def decide_schedules(draw: st.DrawFn) -> str:
    """Schedules dense enough that a few 0-300 s steps cross several slots."""
    kind = draw(st.sampled_from(["every-n-seconds", "every-n-minutes", "cron"]))
    if kind == "every-n-seconds":
        return f"*/{draw(st.sampled_from([1, 2, 5, 10, 15, 30, 45]))} * * * * *"
    if kind == "every-n-minutes":
        return f"*/{draw(st.integers(1, 20))} * * * *"
    return draw(crons(seconds=draw(st.booleans()))).expression


@dataclasses.dataclass(frozen=True)
class Step:
    wait: float | None  # seconds until the next decision; None: at the decision's wake_at
    lag: float  # how late the loop wakes up after wake_at
    finish: float  # the share of active Jobs that finish before it
    failed: bool
    toggle_suspend: bool
    run_now: bool


steps_strategy = st.lists(
    st.builds(
        Step,
        wait=st.one_of(st.none(), st.just(0.0), st.floats(0, 300), st.integers(0, 300).map(float)),
        lag=st.sampled_from([0.0, 0.001, 0.2, 0.9, 1.5]),
        finish=st.sampled_from([0.0, 0.5, 1.0]),
        failed=st.booleans(),
        toggle_suspend=st.integers(0, 5).map(lambda n: n == 0),
        run_now=st.integers(0, 6).map(lambda n: n == 0),
    ),
    min_size=3,
    max_size=25,
)


def finish_some(jobs: list[JobInfo], share: float, failed: bool, now: datetime) -> list[JobInfo]:
    """The Job controller's part: the first `share` of the active Jobs end at `now`."""
    active = [job for job in jobs if job.state is JobState.ACTIVE]
    ending = {job.uid for job in active[: int(len(active) * share)]}
    state = JobState.FAILED if failed else JobState.SUCCEEDED
    return [
        dataclasses.replace(job, state=state, started_at=job.created_at, finished_at=now)
        if job.uid in ending
        else job
        for job in jobs
    ]


def vanish_some(jobs: list[JobInfo], share: float) -> list[JobInfo]:
    """The garbage collector's part: the first `share` of the Jobs being deleted are gone."""
    deleting = [job.uid for job in jobs if job.deleting]
    gone = set(deleting[: int(len(deleting) * share)])
    return [job for job in jobs if job.uid not in gone]


@properties(300)
@given(
    data=st.data(),
    zone_name=st.sampled_from(ZONES),
    policy=st.sampled_from(POLICIES),
    catch_up=st.sampled_from([None, "Latest", "All"]),
    buffer_limit=st.integers(1, 4),
    jitter_share=st.sampled_from([0.0, 0.0, 0.5, 0.99]),
    deadline=st.sampled_from(DEADLINES),
    suspend=st.integers(0, 3).map(lambda n: n == 3),
    limits=st.tuples(st.integers(0, 3), st.integers(0, 2)),
    one_off=st.integers(0, 9).map(lambda n: n == 0),
    steps=steps_strategy,
)
def test_decide_runs_or_records_every_slot_exactly_once(
    data: st.DataObject,
    zone_name: str,
    policy: str,
    catch_up: str | None,
    buffer_limit: int,
    jitter_share: float,
    deadline: int | None,
    suspend: bool,
    limits: tuple[int, int],
    one_off: bool,
    steps: list[Step],
) -> None:
    created = data.draw(instants(zone_name, near=timedelta(hours=2)), label="created")
    created = created.replace(microsecond=0)  # creationTimestamp has whole seconds
    raw: dict[str, Any] = {
        "timeZone": zone_name,
        "concurrencyPolicy": policy,
        "suspend": suspend,
        "successfulJobsHistoryLimit": limits[0],
        "failedJobsHistoryLimit": limits[1],
        "jobTemplate": job_template(),
    }
    if deadline is not None:
        raw["startingDeadlineSeconds"] = deadline
    if catch_up is not None:
        raw["catchUp"] = catch_up
    if policy == "BufferAll":
        raw["bufferLimit"] = buffer_limit
    jitter_seconds = 0
    run_at: datetime | None = None
    schedule: Schedule | None = None
    if one_off:
        run_at = created + timedelta(seconds=data.draw(st.integers(-600, 3000), label="runAt"))
        raw["runAt"] = run_at.isoformat()
    else:
        raw["schedule"] = data.draw(decide_schedules(), label="schedule")
        schedule = parse(raw["schedule"], zone_name)
        jitter_seconds = int(jitter_share * schedule.shortest_gap.total_seconds())
        raw["jitterSeconds"] = jitter_seconds
    sj: ScheduledJobView = view(raw, created_at=created)
    jobs: list[JobInfo] = []
    now = created + timedelta(seconds=data.draw(st.floats(0, 300), label="first wait"))
    run_slots: list[datetime] = []
    job_names: set[str] = set()
    tokens_run: list[str] = []
    skipped_in_decisions = 0
    cursor: datetime | None = None

    for index, step in enumerate(steps):
        waiting = set(parse_time(entry) for entry in sj.status.get("buffered") or [])
        decision = decide(sj, jobs, now)
        assert not decision.recorded, "the model holds every created Job: nothing to re-record"
        for run in decision.runs:
            assert run.job_name not in job_names, f"a second Job named {run.job_name}"
            job_names.add(run.job_name)
            if run.trigger == TRIGGER_MANUAL:
                assert run.run_now_token is not None
                tokens_run.append(run.run_now_token)
                continue
            assert run.trigger == TRIGGER_SCHEDULE
            assert run.slot <= now
            if cursor is not None and run.slot <= cursor:
                assert run.slot in waiting, "a slot at or before processedUntil ran, not buffered"
            if deadline is not None:
                late = now - run.slot - timedelta(seconds=jitter_seconds)
                assert late <= timedelta(seconds=deadline) + ON_TIME_TOLERANCE
            if schedule is not None:
                # the slot is a slot of the schedule
                assert schedule.slots_between(run.slot - SECOND, run.slot) == [run.slot]
            else:
                assert run.slot == run_at
            run_slots.append(run.slot)
        skipped_in_decisions += sum(skip.count for skip in decision.skips)
        assert len(run_slots) == len(set(run_slots)), "two runs for one slot"
        assert len(tokens_run) == len(set(tokens_run)), "two manual runs for one token"

        cancelled = {
            deletion.uid for deletion in decision.deletions if deletion.reason == "CancelOther"
        }
        # CancelOther deletes in the foreground: the Job stays, deleting, until its pods are gone.
        lingering = [
            dataclasses.replace(job, deleting=True) for job in jobs if job.uid in cancelled
        ]
        sj, jobs = after_apply(sj, jobs, decision)
        jobs += lingering
        processed = parse_time(sj.status.get("processedUntil"))
        if cursor is not None:
            assert processed is not None
            assert processed >= cursor, "processedUntil went back"
        cursor = processed
        if policy != "Allow":
            active = [job for job in jobs if job.state is JobState.ACTIVE and not job.deleting]
            assert len(active) <= 1, f"{policy}: {[job.name for job in active]}"
        if policy in NO_OVERLAP:
            running = [job for job in jobs if job.state is JobState.ACTIVE]
            assert len(running) <= 1, f"{policy}: {[job.name for job in running]}"
        buffered = sj.status.get("buffered") or []
        if buffered:
            event(f"{policy}: slots waited in the buffer")
        if lingering:
            event("CancelOther: a deleted run lingered")
        limit = {"BufferOne": 1, "BufferAll": buffer_limit, "CancelOther": 1}.get(policy, 0)
        assert len(buffered) <= limit, (policy, buffered)

        if index == len(steps) - 1:
            break
        jobs = vanish_some(finish_some(jobs, step.finish, step.failed, now), step.finish)
        if step.toggle_suspend:
            spec = {**sj.spec, "suspend": not sj.spec.get("suspend", False)}
            sj = dataclasses.replace(sj, spec=spec, generation=sj.generation + 1)
        if step.run_now:
            annotations = {ANNOTATION_RUN_NOW: f"token-{index}"}
            sj = dataclasses.replace(sj, annotations=annotations)
        if step.wait is not None:
            now += timedelta(seconds=step.wait)
        elif decision.wake_at is not None:  # as the shell does: sleep until wake_at
            now = max(now, min(decision.wake_at, now + timedelta(seconds=300)))
            now += timedelta(seconds=step.lag)

    status = sj.status
    skipped = sum((status.get("slotsSkipped") or {}).values())
    assert skipped == skipped_in_decisions
    assert status["runsCreated"] == len(job_names)
    buffered = len(status.get("buffered") or [])
    if schedule is not None:
        processed = parse_time(status.get("processedUntil")) or created
        expected = schedule.count_between(created, processed)
        # Only the newest slot may wait for its jitter, beyond the cursor.
        assert schedule.count_between(processed, now) <= (1 if jitter_seconds else 0)
    else:
        assert run_at is not None
        expected = 1 if run_at <= now else 0
    accounted = len(run_slots) + skipped + buffered
    assert accounted == expected, (run_slots, status.get("slotsSkipped"), buffered)
    event(f"{'some' if run_slots else 'no'} scheduled runs")
    event(f"slots due in total: {'0' if not expected else '1-9' if expected < 10 else '10+'}")
    event(f"{'some' if tokens_run else 'no'} manual runs")
    for reason in status.get("slotsSkipped") or {}:
        event(f"slots skipped: {reason}")


# --- runAt: any instant the API server's date-time format accepts -----------------------------

NOW = datetime(2026, 1, 5, 8, 30, tzinfo=UTC)
LABEL_VALUE_MAX = 63  # a Job's name becomes the value of its pods' job-name label
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# A runAt's Job is named `<name>-<epoch seconds>`: 52 + 1 + 10 characters fit a label value only
# for instants from the epoch to the last second with ten digits. The operator refuses the rest.
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST_TEN_DIGIT_SECOND = datetime(2286, 11, 20, 17, 46, 39, tzinfo=UTC)
RFC3339 = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?(?:Z|([+-])(\d\d):(\d\d))"
)


@st.composite
def rfc3339(draw: st.DrawFn, low: date, high: date) -> str:
    """An RFC 3339 date-time with an offset, as the CRD's `format: date-time` accepts it, often
    with a fraction of 1 to 9 digits (finer than the milliseconds the operator stores)."""
    day, clock = draw(st.dates(low, high)), draw(st.times())
    minutes = draw(st.integers(-(23 * 60 + 59), 23 * 60 + 59))
    sign, size = ("-" if minutes < 0 else "+"), abs(minutes)
    offset = f"{sign}{size // 60:02d}:{size % 60:02d}"
    if minutes == 0 and draw(st.booleans()):
        offset = "Z"
    digits = draw(st.integers(0, 9))
    fraction = f".{draw(st.integers(0, 10**digits - 1)):0{digits}d}" if digits else ""
    return f"{day.year:04d}-{day.month:02d}-{day.day:02d}T{clock:%H:%M:%S}{fraction}{offset}"


def instant_of(text: str) -> datetime | None:
    """The UTC instant an RFC 3339 text names, cut to the milliseconds the operator stores, by
    arithmetic on its fields (not the operator's parser); None when it lies outside the years
    1-9999 that a datetime can hold."""
    match = RFC3339.fullmatch(text)
    assert match is not None, text
    year, month, day, hour, minute, second = (int(part) for part in match.group(1, 2, 3, 4, 5, 6))
    micro = int((match.group(7) or "0")[:3].ljust(3, "0")) * 1000
    offset = timedelta(hours=int(match.group(9) or 0), minutes=int(match.group(10) or 0))
    wall = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
    try:
        return wall - offset if match.group(8) != "-" else wall + offset
    except OverflowError:
        return None


def run_at_decisions(name: str, run_at: str) -> tuple[Decision, Decision]:
    """Two consecutive decisions, at NOW and a second later (the second sees the first's status
    and the Jobs it created)."""
    raw = {"runAt": run_at, "jobTemplate": job_template()}
    sj = view(raw, name=name, created_at=NOW - timedelta(hours=1))
    first = decide(sj, [], NOW)
    sj, jobs = after_apply(sj, [], first)
    second = decide(sj, jobs, NOW + SECOND)
    return first, second


def check_run_at(name: str, run_at: str) -> list[PlannedRun]:
    """What a one-off promises, whatever instant the API server let through: an instant whose Job
    name could not be a label value is refused (InvalidSpec naming spec.runAt, one Warning, no
    Job); any other runs exactly once when due, at that very instant, under a name that is a label
    value, and is then processed (nothing due, nothing next). Returns the runs planned."""
    instant = instant_of(run_at)
    first, second = run_at_decisions(name, run_at)
    runs = [*first.runs, *second.runs]
    if instant is None or not EPOCH <= instant <= LAST_TEN_DIGIT_SECOND:
        for decision in (first, second):
            assert decision.runs == [], f"{run_at} ran as {names(decision.runs)}"
            assert decision.recorded == []
            invalid = condition(decision.status, "InvalidSpec")
            assert invalid["status"] == "True", (run_at, invalid)
            assert invalid["message"].startswith("spec.runAt:"), invalid["message"]
        assert [(e.type, e.reason) for e in first.events] == [("Warning", "InvalidSpec")]
        assert second.events == [], "the same refusal is reported once"
        return runs
    assert condition(second.status, "InvalidSpec")["status"] == "False"
    assert second.recorded == [], f"{run_at} was due again after it ran"
    assert len(runs) == (1 if instant <= NOW + SECOND else 0), names(runs)
    for run in runs:
        assert run.slot == instant
        assert run.trigger == TRIGGER_SCHEDULE
        assert len(run.job_name) <= LABEL_VALUE_MAX, run.job_name
        assert DNS_LABEL.fullmatch(run.job_name), run.job_name
    processed = parse_time(second.status.get("processedUntil"))
    if runs:
        assert processed is not None
        assert processed >= instant, (processed, instant)
        assert second.status["runsCreated"] == 1
        assert second.status["nextScheduleTime"] is None
        assert second.wake_at is None
    else:
        assert processed is None or processed < instant
        assert second.status["nextScheduleTime"] == format_time(instant)
        assert second.wake_at == instant
    return runs


@properties(200)
@example(name="a" * 52, run_at="2286-11-20T17:46:39.999Z")
@example(name="a" * 52, run_at="1970-01-01T00:00:00Z")
@given(
    name=st.integers(1, 52).map(lambda size: "a" * size),
    run_at=rfc3339(date(1970, 1, 2), date(2286, 11, 19)),
)
def test_run_at_job_names_fit_a_label_value(name: str, run_at: str) -> None:
    check_run_at(name, run_at)


@properties(100)
@example(run_at="0001-01-01T00:00:00+01:00")
@example(run_at="9999-12-31T23:59:59-01:00")
@example(run_at="2286-11-20T17:46:40Z")
@example(run_at="2026-01-05T08:30:00.999Z")  # due only at the second decision
@example(run_at="2026-01-05T08:30:01.001Z")  # not due yet
@given(
    run_at=st.one_of(
        rfc3339(date(1000, 1, 1), date(9999, 12, 31)),
        rfc3339(date(2025, 12, 1), date(2026, 2, 1)),  # around NOW: past and future instants
    )
)
def test_decide_on_any_accepted_run_at_runs_it_once_or_refuses_it(run_at: str) -> None:
    runs = check_run_at("backup", run_at)
    instant = instant_of(run_at)
    event(
        "refused" if instant is None or not EPOCH <= instant <= LAST_TEN_DIGIT_SECOND else "valid"
    )
    event(f"{len(runs)} run(s)")


def test_a_run_at_with_microseconds_is_processed_once() -> None:
    """The first defect of issue 13: processedUntil kept milliseconds, so a runAt with finer
    digits was never processed and its Job was recorded again at every decision."""
    assert len(check_run_at("backup", "2026-01-05T08:00:00.123456789Z")) == 1


@properties(100)
@example(moment=datetime(999, 1, 1, tzinfo=UTC))
@example(moment=datetime(2026, 1, 5, 8, 0, 0, 999999, tzinfo=UTC))
@given(moment=st.datetimes(timezones=st.just(UTC)))
def test_format_and_parse_agree_at_any_precision(moment: datetime) -> None:
    """An instant, its stored text and that text parsed again are one instant, cut to ms."""
    stored = parse_time(format_time(moment))
    assert stored == parse_time(moment.isoformat())
    assert stored == moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    assert format_time(stored) == format_time(moment)


@pytest.mark.parametrize(
    "text",
    ["", "yesterday", "2026-13-01T00:00:00Z", "2026-01-01T25:00:00Z", 42, ["2026"], None],
)
def test_parse_time_of_hostile_text_is_none(text: object) -> None:
    assert parse_time(text) is None


@properties(100)
@example(run_at="1900-01-01T00:00:00Z")
@example(run_at="1969-12-31T23:59:59.999Z")
@example(run_at="1970-01-01T00:59:59+01:00")  # 1969-12-31T23:59:59Z
@given(run_at=rfc3339(date(1000, 1, 1), date(1969, 12, 31)))
def test_run_at_before_1970_is_refused_so_no_job_name_outgrows_a_label_value(run_at: str) -> None:
    """Before 1970 a Job name would carry negative epoch seconds, up to 12 characters: the Job of
    a 52-character ScheduledJob would not fit a label value. Such a runAt is refused, never run."""
    instant = instant_of(run_at)
    assume(instant is not None and instant < EPOCH)  # a negative offset can reach 1970
    assert check_run_at("a" * 52, run_at) == []
