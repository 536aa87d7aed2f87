"""`kubectl cronlease next`: the next fire times of a schedule, in its zone and in UTC, each with
what the DST rule did to it. Pure, and the operator's own schedule code
(`cronlease.core.schedule.cron`, `cronlease.core.schedule.schedules`) computes the times: what this
prints is what the operator will do."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronlease.core.schedule.cron import Schedule

# cronlease's time rule (docs/design.md, "Time, precisely"), as `next` states it.
DST_RULE = (
    "each wall-clock time fires once: one a spring-forward skips fires at the first instant "
    "after the gap, one a fall-back repeats fires at its first occurrence only"
)
MAX_COUNT = 1000


@dataclass(frozen=True)
class Firing:
    slot: datetime  # UTC
    local: datetime  # in the schedule's zone
    note: str = ""  # what the DST rule did, if anything


def has_dst(time_zone: str, around: datetime) -> bool:
    """Whether the zone's offset changes within a year of `around`."""
    zone = ZoneInfo(time_zone)
    offsets = {
        (around + timedelta(days=day)).astimezone(zone).utcoffset() for day in range(0, 366, 30)
    }
    return len(offsets) > 1


def next_firings(schedule: Schedule, after: datetime, count: int) -> list[Firing]:
    """The first `count` slots strictly after `after` (fewer if the schedule ends)."""
    firings: list[Firing] = []
    instant = after
    zone = ZoneInfo(schedule.time_zone)
    while len(firings) < count:
        slot = schedule.next_after(instant)
        if slot is None:
            break
        local = slot.astimezone(zone)
        firings.append(Firing(slot, local, _note(slot, local, zone)))
        instant = slot
    return firings


def _note(slot: datetime, local: datetime, zone: ZoneInfo) -> str:
    offset = local.utcoffset()
    before = (slot - timedelta(seconds=1)).astimezone(zone).utcoffset()
    if before is not None and offset is not None and offset > before:
        return "spring-forward: the skipped wall times fire here, once"
    other = local.replace(fold=1 - local.fold)
    if other.utcoffset() != offset:  # an ambiguous wall time: a fall-back repeats it
        return "fall-back: fires at the first occurrence only (CronJob fires both)"
    return ""


def utc(instant: datetime) -> datetime:
    return instant.astimezone(UTC)
