"""Property-based tests (hypothesis) of schedule arithmetic: random 5- and 6-field expressions
in zones with and without DST, their slots checked against the time rule's oracle (timerule.py),
and counting (count_between, which is arithmetic) against the slot generator (the definition).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

from hypothesis import assume, event, given
from hypothesis import strategies as st
from timerule import (
    DST_ZONES,
    END,
    MICRO,
    START,
    ZONES,
    Cron,
    crons,
    fires,
    instants,
    parse,
    properties,
    slots_from_walls,
    transitions,
    units_in,
    wall,
    windows,
)

from cronlease.core.schedule.cron import Schedule
from cronlease.core.schedule.schedules import ScheduleSet

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
