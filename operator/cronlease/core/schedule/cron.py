"""Schedule arithmetic (cron expression, time zone, the DST rule): which instants a schedule names.

Everything here is pure (no Kubernetes, no I/O, no clock reads) so the controller can
replay any window deterministically, e.g. after downtime or a leader change.

The time rule. Without a timeZone a schedule is plain UTC. With one, the expression names
WALL-CLOCK times, and every named wall-clock time fires exactly once:

* a wall time skipped by a spring-forward gap fires at the first instant after the gap
  (the transition instant), so a daily 02:30 job still runs on the short day;
* a wall time that occurs twice (fall-back) fires only at its first occurrence, so a
  daily 02:30 job does not run twice on the long day;
* slots are instants: several gap wall times landing on the same instant are one slot.

croniter alone gets both wrong across DST (it repeats the fall-back hour for hourly
schedules), so it only enumerates naive wall-clock times here and `_instant` applies the
rule. That mapping is monotone in wall time, which is what lets us start croniter from
any wall time whose slot is on the correct side of an instant and never miss a slot.

The grammar is CronJob's (robfig/cron), read by `cronsyntax` into what croniter evaluates.
Day-of-month and day-of-week combine with OR when both are restricted, like classic cron and
CronJob. "@every <duration>" is no calendar: its slots are the ScheduledJob's creation plus
whole periods, as CronJob counts them, in any time zone.

Counting is arithmetic, not enumeration (`Schedule.count_between`): the named wall times are
the named days times the named times of day, so they are counted per day, and the time rule
only moves the ends of the range and merges the wall times of each spring-forward gap.
"""

from __future__ import annotations

import calendar
import copy
import functools
import itertools
import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from itertools import islice, takewhile
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from cronlease.core.schedule.cronsyntax import (
    MINUTE_FIELDS,
    SECOND_FIELDS,
    CronSyntaxError,
    every_seconds,
    read_field,
)

MACROS: dict[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

EVERY = "@every"
# Where "@every" slots count from when the caller names no instant (a ScheduledJob names its
# creation).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Names that ZoneInfo may load but that mean "whatever this machine is set to", which
# would make a schedule depend on the node the operator happens to run on.
_HOST_ZONES = frozenset({"local", "localtime", "posixrules"})
# Fixed (not "now") so that parse() accepts or rejects an expression the same way forever.
_FIRES_ANCHOR = datetime(2025, 1, 1, tzinfo=UTC)
# From the anchor, Feb 29 is 3 years away (the 8-year gap is around 2100), Feb 30 never.
_FIRES_HORIZON = timedelta(days=5 * 366)
_SECOND = timedelta(seconds=1)
_DAY = timedelta(days=1)
_DAY_SECONDS = 86_400
# croniter's indices of day-of-month, month and day-of-week in its expanded fields.
_DAY_FIELDS = (2, 3, 4)
# A year of each kind (leap or not, weekday of January 1): the calendar of a year is that of
# every other year of its kind. 2001-2028 holds all fourteen, far from croniter's limits.
_SAMPLE_YEARS = {
    (calendar.isleap(year), date(year, 1, 1).weekday()): year for year in range(2028, 2000, -1)
}


class ScheduleError(ValueError):
    """Invalid schedule; str(e) is a user-facing message naming the problem.

    Messages start with the spec field at fault ('schedule: ...' or 'timeZone: ...') so
    they can go straight into a status condition or an admission rejection.
    """


def is_valid_time_zone(name: str) -> bool:
    """Whether `name` is acceptable as spec.timeZone (empty means UTC, as in parse)."""
    try:
        _load_zone(name or "UTC")
    except ScheduleError:
        return False
    return True


@dataclass(frozen=True)
class Schedule:
    """A validated cron expression bound to a time zone; build it with `parse`.

    The fields are exactly what the user wrote (normalised), so a Schedule can be
    compared with the spec to decide whether it must be re-parsed.
    """

    expression: str
    time_zone: str = "UTC"
    has_seconds: bool = False
    # "@every": the period in seconds (0 for a cron expression); the slots are anchor + k x
    # every for k >= 1, the anchor cut to the second.
    every: int = 0
    anchor: datetime = EPOCH

    @classmethod
    def parse(
        cls, expression: str, time_zone: str = "UTC", anchor: datetime | None = None
    ) -> Schedule:
        """Parse once per distinct (expression, zone): every decision re-reads its spec, and
        validation includes a search for the first slot. Schedules are immutable, so shared.
        `anchor` is where "@every" counts from (EPOCH if None); other expressions ignore it."""
        if not expression.strip().lower().startswith(EVERY):
            anchor = None  # one cached Schedule for every ScheduledJob with this expression
        return _parse_cached(expression, time_zone, anchor)

    @classmethod
    def _parse_uncached(cls, expression: str, time_zone: str, anchor: datetime | None) -> Schedule:
        """Validate the spec values up front so bad input fails once, with a clear message.

        Only ScheduleError escapes: callers turn it into a user-visible condition and must
        not crash on whatever croniter happens to raise.
        """
        expression = expression.strip()
        zone_name = time_zone or "UTC"
        _load_zone(zone_name)
        if expression.lower().startswith(EVERY):
            every = _every(expression)
            start = _as_utc(anchor or EPOCH).replace(microsecond=0)
            # Jobs are named by the minute unless slots can share one (a period under 60 s).
            return cls(expression, zone_name, every < 60, every=every, anchor=start)
        fields = _cron_fields(expression)
        schedule = cls(expression, zone_name, has_seconds=len(fields) == len(SECOND_FIELDS))
        schedule._require_fires()
        return schedule

    def next_after(self, instant: datetime) -> datetime | None:
        """First slot strictly after `instant`; None once the schedule can never fire again.

        Every ScheduledJob with this schedule shares this object, and at a slot they all ask
        at nearly the same instant. No slot lies between an instant asked and its answer, so
        the last answer serves any instant in [asked, answer) (what it saves at a burst:
        bench/results/latest.md)."""
        instant = _as_utc(instant)
        if self.every:
            return self._nth_every(max(self._periods_to(instant), 0) + 1)
        last: tuple[datetime, datetime | None] | None = self.__dict__.get("_last_next_after")
        if last is not None and last[1] is not None and last[0] <= instant < last[1]:
            return last[1]
        answer = next(self._slots_after(instant), None)
        self.__dict__["_last_next_after"] = (instant, answer)  # one tuple: safe across threads
        return answer

    def slots_between(self, after: datetime, until: datetime, limit: int = 1000) -> list[datetime]:
        """Slots s with after < s <= until, ascending; only the most recent `limit` of them.

        Walks backwards from `until` because a caller catching up after downtime only
        ever acts on the newest slots, and a per-second schedule over a long outage
        would otherwise enumerate millions of slots just to drop them.

        At a burst every ScheduledJob with this schedule asks with the same `after` (its
        cursor, the previous slot) and an `until` a little later each time: the last answer
        serves any `until` before the next slot after the one it was computed for (as in
        next_after). The caller gets its own copy.
        """
        after, until = _as_utc(after), _as_utc(until)
        if limit <= 0:
            return []
        last: tuple[datetime, int, datetime, datetime | None, list[datetime]] | None
        last = self.__dict__.get("_last_slots_between")
        if last is not None:
            asked_after, asked_limit, asked_until, following, answer = last
            fits = asked_until <= until and (following is None or until < following)
            if asked_after == after and asked_limit == limit and fits:
                return list(answer)
        if self.every:
            first, final = self._every_range(after, until)
            slots = (self._nth_every(k) for k in range(max(first, final - limit + 1), final + 1))
            recent = [slot for slot in slots if slot is not None]
        else:
            recent = list(islice(takewhile(lambda s: s > after, self._slots_until(until)), limit))
            recent.reverse()
        # One tuple: safe across threads (a long catch-up is decided in a worker thread).
        self.__dict__["_last_slots_between"] = (after, limit, until, self.next_after(until), recent)
        return list(recent)

    def count_between(self, after: datetime, until: datetime) -> int:
        """Exact number of slots in (after, until], for any range, without enumerating them.

        Every slot is the instant of a named wall time, and `_wall_not_after(t)` is the latest
        wall time whose slot is at or before t (the time rule is monotone). So the slots in the
        range are the instants of the named wall times in (wall_not_after(after),
        wall_not_after(until)], counted by arithmetic on days (`_Calendar`, `_Clock`), less
        the merges: all named wall times of a spring-forward gap, and the wall time ending it,
        are one slot (the transition instant). The cost grows with the days in the range, not
        with the slots: a year of per-second slots takes well under a millisecond. A schedule
        that restricts days first has croniter walk the days of a year of each kind it meets
        (`_Calendar`), about 10 ms per kind, once per Schedule.
        """
        after, until = _as_utc(after), _as_utc(until)
        if until <= after:
            return 0
        if self.every:
            first, last = self._every_range(after, until)
            return max(last - first + 1, 0)
        count = self._walls_between(self._wall_not_after(after), self._wall_not_after(until))
        for change in self._clock_jumps(after, until):
            merged = self._walls_between(
                self._wall_not_after(change - _SECOND), self._wall_not_after(change)
            )
            count -= max(merged - 1, 0)
        return count

    @functools.cached_property
    def times_of_day(self) -> tuple[int, ...]:
        """The times of day the expression names, in seconds since midnight, ascending."""
        clock = self._clock
        return tuple(
            (hour * 60 + minute) * 60 + second
            for hour in clock.hours
            for minute in clock.minutes
            for second in clock.seconds
        )

    @functools.cached_property
    def shortest_gap(self) -> timedelta:
        """The shortest time between two named times of day (or the period of "@every"): the
        slots of a day are never closer, except where a clock change takes an hour out."""
        if self.every:
            return timedelta(seconds=self.every)
        return shortest_gap_of(self.times_of_day)

    @property
    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)  # ZoneInfo caches instances per key

    @functools.cached_property
    def _cron_expression(self) -> str:
        """The expression as croniter must read it (`cronsyntax`)."""
        return " ".join(_cron_fields(self.expression))

    def _periods_to(self, instant: datetime) -> int:
        """How many whole "@every" periods lie between the anchor and `instant` (floor)."""
        return math.floor((instant - self.anchor).total_seconds() / self.every)

    def _every_range(self, after: datetime, until: datetime) -> tuple[int, int]:
        """The k of the "@every" slots in (after, until]: first..last, empty if last < first."""
        return max(self._periods_to(after) + 1, 1), self._periods_to(until)

    def _nth_every(self, k: int) -> datetime | None:
        try:
            return self.anchor + timedelta(seconds=k * self.every)
        except OverflowError:  # past year 9999: the schedule never fires again
            return None

    def _walls_between(self, low: datetime, high: datetime) -> int:
        """How many wall times the expression names in (low, high]; naive whole seconds."""
        if high <= low:
            return 0
        clock, days = self._clock, self._calendar
        up_to_low, up_to_high = clock.up_to(low), clock.up_to(high)
        first, last = low.date(), high.date()
        if first == last:
            return up_to_high - up_to_low if days.names(first) else 0
        count = days.count(first + _DAY, last - _DAY) * clock.per_day
        if days.names(first):
            count += clock.per_day - up_to_low
        if days.names(last):
            count += up_to_high
        return count

    def _clock_jumps(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """The spring-forward transitions t of the zone with after < t <= until.

        zoneinfo has no transition table, so compare the offset a day apart and bisect where it
        grew (about a microsecond a day). A change undone within the day would go unseen; no two
        transitions of any tzdata zone are less than three days apart.
        """
        if self.time_zone == "UTC":
            return
        zone = self._zone
        start, offset = after, _utcoffset(after.astimezone(zone))
        while start < until:
            end = start + _DAY if until - start > _DAY else until
            following = _utcoffset(end.astimezone(zone))
            if following > offset:
                yield _offset_change(zone, start, end)
            start, offset = end, following

    @functools.cached_property
    def _clock(self) -> _Clock:
        expanded = self._cron_template.expanded
        seconds = expanded[5] if len(expanded) > len(MINUTE_FIELDS) else [0]
        return _Clock(_values(expanded[1], 24), _values(expanded[0], 60), _values(seconds, 60))

    @functools.cached_property
    def _calendar(self) -> _Calendar:
        day, month, weekday = self._cron_expression.split()[-3:]
        return _Calendar(croniter(f"0 0 {day} {month} {weekday}", _FIRES_ANCHOR))

    def _require_fires(self) -> None:
        """Reject expressions croniter accepts but that name no real date (Feb 30)."""
        try:
            first = self.next_after(_FIRES_ANCHOR)
        except Exception as exc:  # croniter's error surface is untyped; keep parse's contract
            raise ScheduleError(f'schedule: "{self.expression}" cannot be evaluated') from exc
        if first is None or first - _FIRES_ANCHOR > _FIRES_HORIZON:
            raise ScheduleError(
                f'schedule: "{self.expression}" never fires (no matching date within 5 years)'
            )

    def _slots_after(self, instant: datetime) -> Iterator[datetime]:
        """Slots strictly after `instant`, ascending, deduplicated."""
        last = instant
        for wall in self._walls(self._wall_not_after(instant), backward=False):
            slot = self._instant(wall)
            if slot > last:
                last = slot
                yield slot

    def _slots_until(self, instant: datetime) -> Iterator[datetime]:
        """Slots at or before `instant`, descending, deduplicated."""
        last: datetime | None = None
        for wall in self._walls(self._wall_beyond(instant), backward=True):
            slot = self._instant(wall)
            if slot <= instant and (last is None or slot < last):
                last = slot
                yield slot

    def _walls(self, start: datetime, *, backward: bool) -> Iterator[datetime]:
        """Naive wall-clock times named by the expression, strictly after/before `start`.

        croniter sees the wall clock labelled as UTC so it does no DST handling of its
        own; `_instant` alone decides what a wall time means.
        """
        cron = copy.copy(self._cron_template)  # shares the expanded fields, not the position
        cron.set_current(start.replace(tzinfo=UTC, fold=0), force=True)
        while True:
            try:
                wall = cron.get_prev(datetime) if backward else cron.get_next(datetime)
            except (ValueError, OverflowError):  # nothing within croniter's 50-year search,
                return  # or past year 1 / 9999
            yield wall.replace(tzinfo=None)

    @functools.cached_property
    def _cron_template(self) -> croniter:
        """Expanding the expression is croniter's costly part: done once per Schedule. Every
        walk then works on a shallow copy, so concurrent walks (threads) never share a position."""
        return croniter(
            self._cron_expression,
            datetime(2000, 1, 1, tzinfo=UTC),
            second_at_beginning=True,
        )

    def _instant(self, wall: datetime) -> datetime:
        """The time rule: the instant at which naive wall-clock time `wall` fires."""
        zone = self._zone
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        if first.astimezone(zone).replace(tzinfo=None) == wall:
            return first  # exists (first occurrence if repeated)
        # In a gap fold=1 applies the post-transition offset, landing before the gap.
        before_gap = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        return _offset_change(zone, before_gap, first)

    def _wall_not_after(self, instant: datetime) -> datetime:
        """A wall time whose slot is <= instant, as late as cheaply possible.

        Because `_instant` is monotone, croniter started strictly after it reaches every
        slot > instant. Inside the second pass of a repeated hour, the hour's wall times
        already fired on the first pass, so we jump to the end of the repetition instead
        of re-walking (and filtering) all of them.
        """
        local = instant.astimezone(self._zone)
        if local.fold:
            return self._repeat_end(local) - _SECOND
        return local.replace(tzinfo=None, microsecond=0)

    def _wall_beyond(self, instant: datetime) -> datetime:
        """A wall time whose slot is > instant, so croniter stepping back misses nothing."""
        later = (instant.replace(microsecond=0) + _SECOND).astimezone(self._zone)
        if later.fold:
            return self._repeat_end(later)
        return later.replace(tzinfo=None)

    def _repeat_end(self, local: datetime) -> datetime:
        """Naive wall time ending the repeated interval that `local` (fold=1) lies in."""
        first_pass = local.replace(fold=0)
        change = _offset_change(self._zone, first_pass.astimezone(UTC), local.astimezone(UTC))
        return (change + _utcoffset(first_pass)).replace(tzinfo=None)


class _Clock:
    """The times of day an expression names: hours x minutes x seconds, counted by arithmetic."""

    def __init__(
        self, hours: tuple[int, ...], minutes: tuple[int, ...], seconds: tuple[int, ...]
    ) -> None:
        self.hours, self.minutes, self.seconds = hours, minutes, seconds
        self.per_hour = len(minutes) * len(seconds)
        self.per_day = len(hours) * self.per_hour

    def up_to(self, moment: datetime) -> int:
        """How many named times of day are at or before the time of day of `moment`."""
        count = bisect_left(self.hours, moment.hour) * self.per_hour
        if not _contains(self.hours, moment.hour):
            return count
        count += bisect_left(self.minutes, moment.minute) * len(self.seconds)
        if not _contains(self.minutes, moment.minute):
            return count
        return count + bisect_right(self.seconds, moment.second)


class _Calendar:
    """The days an expression names, as croniter reads its day-of-month, month and day-of-week.

    Which days of a year match depends only on whether it is a leap year and on the weekday of
    its January 1 (fourteen kinds of year). croniter walks one year of each kind, once, at day
    granularity, so L, W, # and the OR of day-of-month and day-of-week mean exactly what they
    mean when croniter enumerates the slots themselves.
    """

    def __init__(self, days: croniter) -> None:
        self._days = days
        unrestricted = all(days.expanded[field] == ["*"] for field in _DAY_FIELDS)
        self._every_day = unrestricted and not (days.nth_weekday_of_month or days.nearest_weekday)
        self._years: dict[tuple[bool, int], tuple[int, ...]] = {}

    def names(self, day: date) -> bool:
        return self._every_day or _contains(self._year(day.year), day.timetuple().tm_yday)

    def count(self, first: date, last: date) -> int:
        """How many named days lie in [first, last]."""
        if last < first:
            return 0
        if self._every_day:
            return (last - first).days + 1
        count = 0
        for year in range(first.year, last.year + 1):
            low = first.timetuple().tm_yday if year == first.year else 1
            high = last.timetuple().tm_yday if year == last.year else 366
            named = self._year(year)
            count += bisect_right(named, high) - bisect_left(named, low)
        return count

    def named_days(self, year: int) -> tuple[int, ...]:
        """The named days of `year`, as ascending day-of-year numbers (January 1 is 1)."""
        if self._every_day:
            return tuple(range(1, (367 if calendar.isleap(year) else 366)))
        return self._year(year)

    def _year(self, year: int) -> tuple[int, ...]:
        """The named days of `year`, as ascending day-of-year numbers (January 1 is 1)."""
        kind = (calendar.isleap(year), date(year, 1, 1).weekday())
        named = self._years.get(kind)
        if named is None:
            named = self._years[kind] = self._walk(_SAMPLE_YEARS[kind])
        return named

    def _walk(self, year: int) -> tuple[int, ...]:
        days = copy.copy(self._days)
        days.set_current(datetime(year - 1, 12, 31, tzinfo=UTC), force=True)
        named = []
        try:
            while (day := days.get_next(datetime)).year == year:
                named.append(day.timetuple().tm_yday)
        except ValueError:  # no named day within croniter's 50-year search
            pass
        return tuple(named)


def shortest_gap_of(times: Sequence[int]) -> timedelta:
    """The shortest gap between times of day (ascending seconds since midnight), across
    midnight too."""
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    return timedelta(seconds=min([*gaps, times[0] + _DAY_SECONDS - times[-1]]))


def _values(field: Sequence[int | str], size: int) -> tuple[int, ...]:
    """A time field as croniter expanded it ('*' or numbers), as its sorted values."""
    return tuple(range(size)) if field == ["*"] else tuple(sorted(int(value) for value in field))


def _contains(values: tuple[int, ...], value: int) -> bool:
    index = bisect_left(values, value)
    return index < len(values) and values[index] == value


def _cron_fields(expression: str) -> list[str]:
    """Validate an expression; its fields as croniter must read them (macros expanded)."""
    _require_plain(expression)
    fields = _expand_macro(expression) if expression.startswith("@") else expression.split()
    if len(fields) not in (len(MINUTE_FIELDS), len(SECOND_FIELDS)):
        raise ScheduleError(
            f'schedule: "{expression}" has {len(fields)} fields; expected 5 '
            "(minute hour day-of-month month day-of-week) or 6 (second first)"
        )
    grammar = SECOND_FIELDS if len(fields) == len(SECOND_FIELDS) else MINUTE_FIELDS
    read = []
    for text, field in zip(fields, grammar, strict=True):
        try:
            read.append(read_field(text, field))
        except CronSyntaxError as error:
            raise ScheduleError(f'schedule: invalid {field.name} field "{text}": {error}') from None
    return read


def _every(expression: str) -> int:
    """The period of "@every <duration>" in seconds."""
    _require_plain(expression)
    keyword, *duration = expression.split(None, 1)
    if keyword.lower() != EVERY:
        raise ScheduleError(f'schedule: unknown macro "{expression}"; write "@every <duration>"')
    try:
        return every_seconds(duration[0] if duration else "")
    except CronSyntaxError as error:
        raise ScheduleError(f"schedule: {error}") from None


def _require_plain(expression: str) -> None:
    if not expression:
        raise ScheduleError("schedule: must not be empty")
    if not expression.isascii():
        raise ScheduleError(f'schedule: "{expression}" contains non-ASCII characters')
    if expression.split()[0].upper().startswith(("TZ=", "CRON_TZ=")):
        raise ScheduleError(
            f'schedule: "{expression}": TZ=/CRON_TZ= prefixes are not supported; '
            "use the timeZone field instead"
        )


def _expand_macro(expression: str) -> list[str]:
    macro = MACROS.get(expression.lower())
    if macro is None:
        supported = ", ".join([*MACROS, EVERY + " <duration>"])
        raise ScheduleError(f'schedule: unknown macro "{expression}" (supported: {supported})')
    return macro.split()


def _load_zone(name: str) -> ZoneInfo:
    if name.lower() in _HOST_ZONES:
        raise ScheduleError(f'timeZone: unknown time zone "{name}"')
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: e.g. a directory name
        raise ScheduleError(f'timeZone: unknown time zone "{name}"') from None


def _as_utc(moment: datetime) -> datetime:
    """Naive datetimes would silently mean the operator host's zone: refuse them."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"schedule arithmetic needs an aware datetime, got {moment!r}")
    return moment.astimezone(UTC)


def _utcoffset(moment: datetime) -> timedelta:
    offset = moment.utcoffset()
    if offset is None:
        raise ValueError(f"expected an aware datetime, got {moment!r}")
    return offset


def _offset_change(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The transition instant in (before, after]: the first second with after's offset.

    zoneinfo exposes no transition table, so bisect; `before` and `after` are at most a
    gap or fold apart (hours), so this takes about a dozen steps and only runs near DST.
    """
    target = after.astimezone(zone).utcoffset()
    low = int(before.replace(microsecond=0).timestamp())
    high = int(after.replace(microsecond=0).timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


@functools.lru_cache(maxsize=4096)
def _parse_cached(expression: str, time_zone: str, anchor: datetime | None) -> Schedule:
    return Schedule._parse_uncached(expression, time_zone, anchor)
