"""The time rule's oracle for the tests, written once (the module docstring of
cronlease.core.schedule.cron states the rule). Independent of the code under test: the zones'
transitions are found by bisecting zoneinfo's offsets, and a cron expression is drawn from values,
lists, ranges and steps, so the test knows which values each field names.

Two brute-force views of the same rule, each checked against the other by the schedule
properties (test_schedule_properties.py):

* from the wall-clock side (`slots_from_walls`): every wall time the expression names maps to
  exactly one instant (its first occurrence, or the end of the gap it falls in);
* from the instant side (`fires`): every minute (second) is a slot exactly when its wall time is
  named on its first occurrence, or it ends a gap in which a named wall time was skipped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from functools import cache
from itertools import islice
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, settings
from hypothesis import strategies as st

from cronlease.core.schedule.cron import Schedule, ScheduleError

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
