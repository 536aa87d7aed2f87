"""decide(), table by table (cronlease.core.decide): the cursor (a fresh object's first slot,
schedule edits) and deciding twice.
"""

from __future__ import annotations

import copy
import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    CREATED,
    after_apply,
    event_reasons,
    job,
    processed,
    run_at_spec,
    seconds,
    skip_counts,
    slot_job,
    spec,
    trigger_key,
    utc,
    view,
)
from hourly import (
    H09,
    H10,
    H11,
    H12,
    SCENARIOS,
    SUCCEEDED,
    SUPERSEDED,
    recent,
    scenario,
    ts,
    twice,
)

from cronlease.core.decide.reconcile import decide

# --- 1. the cursor of a fresh object -------------------------------------------------------------


@pytest.mark.parametrize(
    ("created_at", "now", "run_slots", "superseded", "processed_until"),
    [
        pytest.param(CREATED, utc(2026, 1, 5, 8, 59), [], 0, CREATED, id="no-slot-yet"),
        pytest.param(CREATED, H09, [H09], 0, H09, id="slot-at-now-is-due"),
        pytest.param(H09, H09 + seconds(30), [], 0, H09, id="slot-at-creation-is-not-due"),
        pytest.param(
            H09 - seconds(1), H09 + seconds(30), [H09], 0, H09, id="slot-just-after-creation"
        ),
        pytest.param(CREATED, utc(2026, 1, 5, 11, 10), [H11], 2, H11, id="missed-since-creation"),
    ],
)
def test_fresh_object_processes_slots_after_creation(
    created_at: datetime,
    now: datetime,
    run_slots: list[datetime],
    superseded: int,
    processed_until: datetime,
) -> None:
    decision = decide(view(created_at=created_at), [], now)

    assert [run.slot for run in decision.runs] == run_slots
    assert skip_counts(decision) == ({SUPERSEDED: superseded} if superseded else {})
    assert decision.status["processedUntil"] == ts(processed_until)
    assert decision.status["observedSchedule"] == trigger_key(spec())
    assert "ScheduleChanged" not in event_reasons(decision)


@pytest.mark.parametrize(
    ("start_after", "created_at", "now", "run_slots", "processed_until"),
    [
        # Adopted from a CronJob whose last slot was 09:00, created at 10:30 (its 10:00 lost
        # otherwise): 10:00 is due, as after an outage.
        pytest.param(ts(H09), H10 + seconds(1800), H10 + seconds(1801), [H10], H10, id="seeded"),
        # The CronJob ran 10:00 itself (the same Job name): nothing before 10:00 is due.
        pytest.param(ts(H10), H10 + seconds(5), H10 + seconds(6), [], H10, id="ran-by-cronjob"),
        # Later than the creation: never postpones the schedule, the creation counts.
        pytest.param(ts(H11), H10 - seconds(5), H10 + seconds(1), [H10], H10, id="capped"),
        pytest.param("yesterday", H10 - seconds(5), H10 + seconds(1), [H10], H10, id="garbage"),
    ],
)
def test_a_new_object_starts_after_its_start_after_annotation(
    start_after: str,
    created_at: datetime,
    now: datetime,
    run_slots: list[datetime],
    processed_until: datetime,
) -> None:
    sj = dataclasses.replace(
        view(created_at=created_at), annotations={"cronlease.io/start-after": start_after}
    )

    decision = decide(sj, [], now)

    assert [run.slot for run in decision.runs] == run_slots
    assert decision.status["processedUntil"] == ts(processed_until)


def test_start_after_is_read_only_at_the_first_decision() -> None:
    """Once the schedule is observed the cursor is the status', whatever the annotation says."""
    sj = dataclasses.replace(
        view(status=processed(spec(), H11)), annotations={"cronlease.io/start-after": ts(H09)}
    )

    decision = decide(sj, [], H11 + seconds(60))

    assert decision.runs == []
    assert decision.status["processedUntil"] == ts(H11)


def test_fresh_object_wakes_at_the_next_slot() -> None:
    decision = decide(view(), [], utc(2026, 1, 5, 8, 45))

    assert decision.runs == []
    assert decision.events == []
    assert decision.wake_at == H09
    assert decision.status["nextScheduleTime"] == ts(H09)


def test_processed_slots_are_not_due_again() -> None:
    sj = view(status=processed(spec(), H11))

    decision = decide(sj, [], H11 + timedelta(minutes=30))

    assert decision.runs == []
    assert decision.skips == []
    assert decision.status["processedUntil"] == ts(H11)
    assert decision.wake_at == H12


# --- 2. schedule edits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "edited"),
    [
        pytest.param(spec(), spec(schedule="30 * * * *"), True, id="expression"),
        pytest.param(spec(), spec(timeZone="Europe/Berlin"), True, id="time-zone"),
        pytest.param(run_at_spec(utc(2026, 1, 5, 9, 15)), spec(), True, id="run-at-to-schedule"),
        pytest.param(spec(), spec(timeZone="UTC"), False, id="explicit-utc-is-no-edit"),
        pytest.param(spec(), spec(startingDeadlineSeconds=3000), False, id="deadline-no-edit"),
        pytest.param(spec(), spec(concurrencyPolicy="Forbid"), False, id="policy-no-edit"),
    ],
)
def test_schedule_edit_moves_the_cursor_to_now(
    old: dict[str, Any], new: dict[str, Any], edited: bool
) -> None:
    status = processed(old, utc(2026, 1, 5, 9, 15) if "runAt" in old else H09)
    now = utc(2026, 1, 5, 11, 45)

    decision = decide(view(new, status=status), [], now)

    assert decision.status["observedSchedule"] == trigger_key(new)
    if edited:
        assert decision.runs == []
        assert decision.skips == []
        assert decision.status["processedUntil"] == ts(now)
        changed = [event for event in decision.events if event.reason == "ScheduleChanged"]
        assert [event.type for event in changed] == ["Normal"]
        assert decision.events == changed
    else:
        assert "ScheduleChanged" not in event_reasons(decision)
        assert decision.status["processedUntil"] == ts(H11)
        assert [run.slot for run in decision.runs] == [H11]


def test_schedule_edit_wakes_at_the_new_schedules_next_slot() -> None:
    now = utc(2026, 1, 5, 11, 45)
    sj = view(spec(schedule="30 * * * *"), status=processed(spec(), H09))

    decision = decide(sj, [], now)

    assert decision.status["nextScheduleTime"] == ts(utc(2026, 1, 5, 12, 30))
    assert decision.wake_at == utc(2026, 1, 5, 12, 30)


def test_schedule_edit_is_reported_once() -> None:
    now = utc(2026, 1, 5, 11, 45)
    sj = view(spec(schedule="30 * * * *"), status=processed(spec(), H09))
    first = decide(sj, [], now)

    second = decide(dataclasses.replace(sj, status=first.status), [], now + seconds(10))

    assert second.events == []
    assert second.runs == []
    assert second.status["processedUntil"] == ts(now)


# --- 14. idempotence -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCENARIOS)
def test_second_decision_plans_nothing(name: str) -> None:
    _, second = twice(name, with_uids=True)

    assert second.runs == []
    assert second.deletions == []
    assert second.skips == []
    assert second.events == []


@pytest.mark.parametrize(
    "name",
    SCENARIOS,
)
def test_second_decision_writes_an_identical_status(name: str) -> None:
    first, second = twice(name, with_uids=True)

    assert second.status == first.status
    assert second.wake_at == first.wake_at


@pytest.mark.parametrize("name", SCENARIOS)
def test_status_is_stable_apart_from_new_jobs_uids(name: str) -> None:
    # The same as above with the created Jobs' uid unknown ("" is omitted from refs): everything
    # else in the status is already a fixed point after one decision.
    first, second = twice(name, with_uids=False)

    assert second.status == first.status
    assert second.wake_at == first.wake_at


@pytest.mark.parametrize("name", SCENARIOS)
def test_third_decision_is_a_fixed_point(name: str) -> None:
    sj, jobs, now = scenario(name)
    first = decide(sj, jobs, now)
    sj2, jobs2 = after_apply(sj, jobs, first)
    second = decide(sj2, jobs2, now)
    sj3, jobs3 = after_apply(sj2, jobs2, second)

    third = decide(sj3, jobs3, now + seconds(1))

    assert (third.runs, third.deletions, third.skips, third.events) == ([], [], [], [])
    assert third.status == second.status


def test_decide_does_not_mutate_its_inputs() -> None:
    previous = [recent("backup-running", "Active"), recent("backup-gone", "Active")]
    raw = spec(concurrencyPolicy="Replace", successfulJobsHistoryLimit=0)
    status = processed(
        raw, H09, recentRuns=previous, slotsSkipped={SUPERSEDED: 1}, conditions=[], active=[]
    )
    sj = view(raw, status=status, run_now="tok-1")
    jobs = [job("backup-running"), slot_job(H09, state=SUCCEEDED)]
    before = (copy.deepcopy(sj), copy.deepcopy(jobs))

    decide(sj, jobs, H12)

    assert (sj, jobs) == before
