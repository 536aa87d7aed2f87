"""spec.schedules: several cron expressions as one stream of slots, each instant once.

A `ScheduleSet` is a `Schedule` whose named wall times are the union of its parts' (all in the
same time zone), so the time rule, catch-up and counting apply to the union exactly as to one
expression: an instant two parts name is one slot, and the wall times of a spring-forward gap
that any part names fire once, at the transition. Only the two things a Schedule computes from
its expression are replaced: walking the wall times (the parts' walks merged) and counting them
(per day, by which parts name the day; the union of those parts' times of day).
"""

from __future__ import annotations

import calendar
import functools
import heapq
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from cronlease.core.schedule.cron import EVERY, Schedule, ScheduleError, shortest_gap_of

MAX_SCHEDULES = 10


@dataclass(frozen=True)
class ScheduleSet(Schedule):
    """The union of `parts`; build it with `ScheduleSet.parse_all`."""

    parts: tuple[Schedule, ...] = field(default=(), compare=False)

    @classmethod
    def parse_all(
        cls, expressions: Sequence[str], time_zone: str = "UTC", anchor: datetime | None = None
    ) -> Schedule:
        """One expression is a plain Schedule; several, their union. Errors name the entry
        (`schedules[1]: ...`); "@every" (counted from `anchor`) cannot be combined: it has no
        wall times."""
        if not 1 <= len(expressions) <= MAX_SCHEDULES:
            raise ScheduleError(f"schedules: must hold 1 to {MAX_SCHEDULES} expressions")
        parts: list[Schedule] = []
        seen: dict[str, int] = {}
        for index, expression in enumerate(expressions):
            where = f"schedules[{index}]"
            text = expression.strip()
            if text.lower().startswith(EVERY) and len(expressions) > 1:
                raise ScheduleError(f"{where}: @every cannot be combined with other schedules")
            if text in seen:
                raise ScheduleError(f"{where}: duplicates schedules[{seen[text]}]")
            seen[text] = index
            try:
                parts.append(Schedule.parse(text, time_zone, anchor))
            except ScheduleError as error:
                raise ScheduleError(f"{where}: {str(error).removeprefix('schedule: ')}") from None
        if len(parts) == 1:
            return parts[0]
        return cls(
            " | ".join(part.expression for part in parts),
            parts[0].time_zone,
            has_seconds=any(part.has_seconds for part in parts),
            parts=tuple(parts),
        )

    @functools.cached_property
    def shortest_gap(self) -> timedelta:
        """The shortest time between two times of day any part names (parts may interleave)."""
        return shortest_gap_of(sorted(set().union(*(part.times_of_day for part in self.parts))))

    def _walls(self, start: datetime, *, backward: bool) -> Iterator[datetime]:
        """The parts' walks merged; a wall time two parts name comes twice, and the slot
        generators (`_slots_after`, `_slots_until`) keep each instant once."""
        walks = [part._walls(start, backward=backward) for part in self.parts]
        return heapq.merge(*walks, reverse=backward)

    def _walls_between(self, low: datetime, high: datetime) -> int:
        """How many wall times the union names in (low, high]; naive whole seconds."""
        if high <= low:
            return 0
        first, last = low.date(), high.date()
        if first == last:
            clock = self._clock_of(self._mask(first))
            return clock.up_to(high) - clock.up_to(low)
        count = sum(
            days * self._clock_of(mask).per_day
            for mask, days in self._masks_between(first + timedelta(days=1), last).items()
        )
        first_clock, last_clock = (
            self._clock_of(self._mask(first)),
            self._clock_of(self._mask(last)),
        )
        return count + first_clock.per_day - first_clock.up_to(low) + last_clock.up_to(high)

    def _mask(self, day: date) -> int:
        """Which parts name `day`, as bits."""
        return self._year_masks(day.year)[day.timetuple().tm_yday]

    def _masks_between(self, first: date, end: date) -> Counter[int]:
        """How many days of [first, end) each set of parts names."""
        counts: Counter[int] = Counter()
        for year in range(first.year, end.year + 1):
            low = first.timetuple().tm_yday if year == first.year else 1
            high = end.timetuple().tm_yday if year == end.year else 367  # exclusive
            masks = self._year_masks(year)
            if low == 1 and high == 367:
                counts.update(self._year_counts(year))
            else:
                counts.update(masks[low:high])
        return counts

    def _year_masks(self, year: int) -> tuple[int, ...]:
        """For each day of `year` (index 1 to 365 or 366), which parts name it."""
        return self._kind(year)[0]

    def _year_counts(self, year: int) -> Counter[int]:
        """How many days of `year` each set of parts names."""
        return self._kind(year)[1]

    def _kind(self, year: int) -> tuple[tuple[int, ...], Counter[int]]:
        """The masks of the days of `year` and their counts. Every year of a kind (leap or
        not, weekday of January 1) has the same calendar: computed once a kind."""
        kinds: dict[tuple[bool, int], tuple[tuple[int, ...], Counter[int]]]
        kinds = self.__dict__.setdefault("_kinds", {})
        kind = (calendar.isleap(year), date(year, 1, 1).weekday())
        known = kinds.get(kind)
        if known is None:
            named = [0] * (367 if kind[0] else 366)
            for bit, part in enumerate(self.parts):
                for yday in part._calendar.named_days(year):
                    named[yday] |= 1 << bit
            known = kinds[kind] = (tuple(named), Counter(named[1:]))
        return known

    def _clock_of(self, mask: int) -> _TimesOfDay:
        return _union_clock(self, mask)


class _TimesOfDay:
    """A sorted set of times of day (seconds since midnight), counted as `_Clock` counts."""

    def __init__(self, times: Sequence[int]) -> None:
        self.times = tuple(times)
        self.per_day = len(self.times)

    def up_to(self, moment: datetime) -> int:
        return bisect_right(self.times, (moment.hour * 60 + moment.minute) * 60 + moment.second)


@functools.lru_cache(maxsize=4096)
def _union_clock(schedules: ScheduleSet, mask: int) -> _TimesOfDay:
    named = [part for bit, part in enumerate(schedules.parts) if mask >> bit & 1]
    return _TimesOfDay(sorted(set().union(*(part.times_of_day for part in named))))
