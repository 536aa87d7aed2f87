"""spec.jitterSeconds (issue 16): the delay itself, and how decide() waits for it."""

from __future__ import annotations

import statistics
from datetime import datetime, timedelta

import pytest
from builders import CREATED, after_apply, processed, seconds, spec, utc, view
from hypothesis import given
from hypothesis import strategies as st

from cronlease.core.decide.reconcile import decide
from cronlease.core.schedule.cron import Schedule
from cronlease.core.schedule.jitter import jitter
from cronlease.core.specs.policies import SpecError
from cronlease.core.specs.spec import parse_spec

H09 = utc(2026, 1, 5, 9)
HOURLY_JITTER = 600  # up to 10 minutes after each hourly slot


def delay(slot: datetime, name: str = "backup") -> timedelta:
    return jitter("team-a", name, slot, HOURLY_JITTER, timedelta(hours=1))


# --- the delay -------------------------------------------------------------------------------


def test_the_delay_depends_only_on_namespace_name_and_slot() -> None:
    assert delay(H09) == delay(H09)
    assert jitter("team-b", "backup", H09, HOURLY_JITTER, None) != delay(H09)
    assert delay(H09, "restore") != delay(H09)
    assert delay(H09 + timedelta(hours=1)) != delay(H09)


def test_the_delay_spreads_evenly_over_the_window() -> None:
    """200 ScheduledJobs due on the same second: their delays cover the window evenly."""
    delays = [delay(H09, f"sj-{index}").total_seconds() for index in range(200)]
    assert all(0 <= value < HOURLY_JITTER for value in delays)
    assert statistics.mean(delays) == pytest.approx(HOURLY_JITTER / 2, rel=0.15)
    per_tenth = [0] * 10
    for value in delays:
        per_tenth[int(value * 10 // HOURLY_JITTER)] += 1
    assert min(per_tenth) >= 8, per_tenth  # 20 expected in each


@given(
    name=st.text(min_size=1, max_size=20),
    epoch=st.integers(0, 2**33),
    jitter_seconds=st.integers(0, 86_400),
    gap_ms=st.one_of(st.none(), st.integers(1, 10**8)),
)
def test_the_delay_is_below_the_window_and_the_gap(
    name: str, epoch: int, jitter_seconds: int, gap_ms: int | None
) -> None:
    slot = datetime.fromtimestamp(epoch, CREATED.tzinfo)
    gap = timedelta(milliseconds=gap_ms) if gap_ms is not None else None
    value = jitter("ns", name, slot, jitter_seconds, gap)
    assert timedelta(0) <= value
    assert value < timedelta(seconds=jitter_seconds) or value == timedelta(0)
    assert gap is None or value < gap


# --- the spec --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "jitter_seconds", "message"),
    [
        ("*/10 * * * * *", 10, "shortest gap between two slots of the schedule (10 s), not 10"),
        ("0,30 9 * * *", 1800, "(1800 s), not 1800"),
        ("@every 90s", 90, "(90 s), not 90"),
        ("0 * * * *", -1, "spec.jitterSeconds: must be an integer from 0 to 86400"),
        ("0 0 * * *", 86_401, "spec.jitterSeconds: must be an integer from 0 to 86400"),
        ("0 * * * *", 1.5, "spec.jitterSeconds: must be an integer"),
    ],
)
def test_a_jitter_not_below_the_shortest_gap_is_refused(
    schedule: str, jitter_seconds: object, message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec("backup", spec(schedule=schedule, jitterSeconds=jitter_seconds))
    assert message in str(caught.value)
    assert str(caught.value).startswith("spec.jitterSeconds: ")


def test_shortest_gap_of_a_schedule() -> None:
    assert Schedule.parse("0,30 9-17 * * *").shortest_gap == timedelta(minutes=30)
    assert Schedule.parse("59 23 * * *").shortest_gap == timedelta(days=1)
    assert Schedule.parse("0 23,1 * * *").shortest_gap == timedelta(hours=2)  # across midnight


# --- decide() --------------------------------------------------------------------------------


def jittered(**fields: object) -> dict[str, object]:
    return spec(jitterSeconds=HOURLY_JITTER, **fields)


def test_a_slot_waits_for_its_jitter_and_then_runs_once() -> None:
    raw = jittered()
    start = H09 + delay(H09)
    status = processed(raw, CREATED)
    before = decide(view(raw, status=status), [], start - seconds(0.001))
    assert before.runs == []
    assert before.wake_at == start
    # The cursor stays before the waiting slot, and status names it as the next.
    assert before.status["processedUntil"] == status["processedUntil"]
    assert before.status["nextScheduleTime"] == "2026-01-05T09:00:00Z"

    at_start = decide(view(raw, status=status), [], start)
    assert [(run.slot, run.start) for run in at_start.runs] == [(H09, start)]
    assert at_start.runs[0].job_name == f"backup-{int(H09.timestamp()) // 60}"  # nominal slot
    after = decide(*after_apply(view(raw, status=status), [], at_start), start + seconds(1))
    assert after.runs == []
    assert after.wake_at == utc(2026, 1, 5, 10) + delay(utc(2026, 1, 5, 10))


def test_the_deadline_counts_from_the_jittered_start() -> None:
    """A deadline shorter than the jitter still runs the slot: lateness is from the start."""
    raw = jittered(startingDeadlineSeconds=5)
    start = H09 + delay(H09)
    assert delay(H09) > seconds(5)
    on_time = decide(view(raw, status=processed(raw, CREATED)), [], start + seconds(4))
    assert [run.slot for run in on_time.runs] == [H09]
    late = decide(view(raw, status=processed(raw, CREATED)), [], start + seconds(10))
    assert late.runs == []
    assert late.status["slotsSkipped"]["DeadlineExceeded"] == 1


def test_a_caught_up_slot_before_the_newest_runs_at_once() -> None:
    """After an outage, every slot but the newest has started (a start is before the next slot);
    the newest waits for its own start."""
    raw = jittered(startingDeadlineSeconds=7200)
    now = utc(2026, 1, 5, 10) + seconds(1)  # 09:00 passed long ago; 10:00 just passed
    decision = decide(view(raw, status=processed(raw, CREATED)), [], now)
    assert [run.slot for run in decision.runs] == [H09]
    assert decision.wake_at == utc(2026, 1, 5, 10) + delay(utc(2026, 1, 5, 10))
