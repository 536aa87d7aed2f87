"""Table-driven tests for cronlease.core.decide.reconcile.decide(), the operator's pure decision
core.

Each test builds a ScheduledJobView, the Jobs the live model says it owns, and a fixed `now`, then
checks the Decision: planned runs and deletions, skipped slots, events, the status to write and
when to wake up. No clock, no cluster.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    CREATED,
    HOURLY,
    NAME,
    NAMESPACE,
    OTHER_UID,
    UID,
    after_apply,
    condition,
    created_jobs,
    event_reasons,
    job,
    names,
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

from cronlease.core.decide.decision import Decision, PlannedDeletion, ScheduledJobView, SkipReason
from cronlease.core.decide.history import RECENT_RUNS
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.slots import MAX_CATCH_UP_RUNS, MAX_ENUMERATED_SLOTS
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    format_time,
    manual_job_name,
)

ACTIVE, SUCCEEDED, FAILED = JobState.ACTIVE, JobState.SUCCEEDED, JobState.FAILED
SUPERSEDED = SkipReason.SUPERSEDED.value
DEADLINE = SkipReason.DEADLINE_EXCEEDED.value
FORBID = SkipReason.CONCURRENCY_FORBID.value
SUSPENDED = SkipReason.SUSPENDED.value

# Hourly slots on Monday 2026-01-05 (the builders' default schedule and creation day).
H09, H10, H11, H12, H13 = (utc(2026, 1, 5, hour) for hour in (9, 10, 11, 12, 13))


def slot_name(slot: datetime) -> str:
    """Reference implementation of a 5-field schedule's Job name: minutes since the epoch."""
    return f"{NAME}-{int(slot.timestamp()) // 60}"


def ts(instant: datetime) -> str:
    return format_time(instant)


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


# --- 3. missed slots: within the deadline all run (Allow), else the newest; the rest recorded ----


@pytest.mark.parametrize(
    ("deadline", "policy", "run_slots", "skipped"),
    [
        pytest.param(None, "Allow", [H12], {SUPERSEDED: 2}, id="no-deadline"),
        pytest.param(600, "Allow", [H12], {DEADLINE: 2}, id="older-slots-past-deadline"),
        pytest.param(4000, "Allow", [H11, H12], {DEADLINE: 1}, id="mixed-allow-catches-up"),
        pytest.param(4000, "Forbid", [H12], {DEADLINE: 1, SUPERSEDED: 1}, id="mixed-forbid"),
        pytest.param(4000, "Replace", [H12], {DEADLINE: 1, SUPERSEDED: 1}, id="mixed-replace"),
        pytest.param(60, "Allow", [], {DEADLINE: 3}, id="all-past-deadline"),
        pytest.param(0, "Allow", [], {DEADLINE: 3}, id="deadline-zero-all-late"),
    ],
)
def test_missed_slots_run_the_latest_and_record_the_rest(
    deadline: int | None, policy: str, run_slots: list[datetime], skipped: dict[str, int]
) -> None:
    raw = spec(startingDeadlineSeconds=deadline, concurrencyPolicy=policy)
    now = utc(2026, 1, 5, 12, 5)

    decision = decide(view(raw, status=processed(raw, H09)), [], now)

    assert [run.slot for run in decision.runs] == run_slots
    assert skip_counts(decision) == skipped
    assert decision.status["slotsSkipped"] == skipped
    assert decision.status["processedUntil"] == ts(H12)
    assert decision.status["nextScheduleTime"] == ts(H13)
    assert decision.wake_at == H13


def test_skipped_slots_carry_the_latest_slot_of_each_reason() -> None:
    raw = spec(startingDeadlineSeconds=4000, concurrencyPolicy="Forbid")

    decision = decide(view(raw, status=processed(raw, H09)), [], utc(2026, 1, 5, 12, 5))

    latest = {skipped.reason.value: skipped.latest for skipped in decision.skips}
    assert latest == {DEADLINE: H10, SUPERSEDED: H11}


@pytest.mark.parametrize(
    "deadline",
    [
        None,
        600,
        4000,
        pytest.param(60, id="all-past-deadline"),
    ],
)
def test_one_event_and_one_skip_entry_per_reason(deadline: int | None) -> None:
    raw = spec(startingDeadlineSeconds=deadline)

    decision = decide(view(raw, status=processed(raw, H09)), [], utc(2026, 1, 5, 12, 5))

    reasons = event_reasons(decision)
    assert len(reasons) == len(set(reasons)), reasons
    skip_reasons = [skipped.reason for skipped in decision.skips]
    assert len(skip_reasons) == len(set(skip_reasons)), skip_reasons
    assert {event.reason for event in decision.events} == {
        f"Skipped{reason}" for reason in skip_counts(decision)
    }
    assert all(event.type == "Warning" for event in decision.events)


def test_skip_counters_accumulate_in_status() -> None:
    status = processed(spec(), H09, slotsSkipped={SUPERSEDED: 5, SUSPENDED: 1})

    decision = decide(view(status=status), [], utc(2026, 1, 5, 12, 5))

    assert decision.status["slotsSkipped"] == {SUPERSEDED: 7, SUSPENDED: 1}


@pytest.mark.parametrize(
    ("deadline", "runs", "skipped"),
    [
        pytest.param(None, 1, {SUPERSEDED: 1499}, id="no-deadline"),
        # Slots 0..60 minutes old are within 3600 s + 1 s and all run; the 1439 older ones are
        # not, and that includes the ones beyond MAX_ENUMERATED_SLOTS that are only counted.
        pytest.param(3600, 61, {DEADLINE: 1439}, id="deadline"),
    ],
)
def test_long_outage_counts_slots_beyond_the_enumeration_limit(
    deadline: int | None, runs: int, skipped: dict[str, int]
) -> None:
    raw = spec(schedule="* * * * *", startingDeadlineSeconds=deadline)
    now = utc(2026, 1, 5, 12, 0)
    assert MAX_ENUMERATED_SLOTS < 1500

    decision = decide(view(raw, status=processed(raw, now - timedelta(minutes=1500))), [], now)

    assert [run.slot for run in decision.runs] == [
        now - timedelta(minutes=minutes) for minutes in reversed(range(runs))
    ]
    assert skip_counts(decision) == skipped
    assert decision.status["processedUntil"] == ts(now)


@pytest.mark.parametrize(
    ("deadline", "runs", "skipped"),
    [
        pytest.param(None, 1, {SUPERSEDED: 365 * 86_400 - 1}, id="no-deadline"),
        # Slots up to 60 s + 1 s old run; every older one, listed or only counted, is late.
        pytest.param(60, 62, {DEADLINE: 365 * 86_400 - 62}, id="deadline"),
    ],
)
def test_an_outage_of_a_year_of_seconds_is_counted_exactly(
    deadline: int | None, runs: int, skipped: dict[str, int]
) -> None:
    """Slots beyond the enumeration limit are counted by arithmetic, with no cap."""
    raw = spec(schedule="* * * * * *", startingDeadlineSeconds=deadline)
    now = utc(2026, 1, 5, 12, 0)

    decision = decide(view(raw, status=processed(raw, now - timedelta(days=365))), [], now)

    assert len(decision.runs) == runs
    assert skip_counts(decision) == skipped
    assert decision.status["processedUntil"] == ts(now)


def test_catch_up_within_the_deadline_is_capped_and_the_rest_superseded() -> None:
    raw = spec(schedule="* * * * * *", startingDeadlineSeconds=3600)
    now = utc(2026, 1, 5, 12, 0)

    decision = decide(view(raw, status=processed(raw, now - seconds(3000))), [], now)

    assert len(decision.runs) == MAX_CATCH_UP_RUNS
    assert decision.runs[-1].slot == now
    assert skip_counts(decision) == {SUPERSEDED: 3000 - MAX_CATCH_UP_RUNS}


# --- 4. the upstream CronJob bug case ------------------------------------------------------------


def test_weekday_schedule_after_an_outage_runs_the_latest_slot_and_sleeps_until_monday() -> None:
    raw = spec(schedule="30 10,11,12 * * 1-5")
    thursday = utc(2026, 11, 26, 10, 30)
    friday_1230 = utc(2026, 11, 27, 12, 30)
    now = utc(2026, 11, 27, 16, 30)

    decision = decide(view(raw, status=processed(raw, thursday)), [], now)

    assert [(run.job_name, run.slot, run.trigger) for run in decision.runs] == [
        ("backup-29929710", friday_1230, TRIGGER_SCHEDULE)
    ]
    assert skip_counts(decision) == {SUPERSEDED: 4}
    assert decision.skips[0].latest == utc(2026, 11, 27, 11, 30)
    assert decision.status["processedUntil"] == ts(friday_1230)
    assert decision.status["lastScheduleTime"] == ts(friday_1230)
    assert decision.status["nextScheduleTime"] == "2026-11-30T10:30:00Z"
    assert decision.wake_at == utc(2026, 11, 30, 10, 30)


# --- 5. startingDeadlineSeconds and the on-time tolerance ----------------------------------------


DAILY = "0 9 * * *"


@pytest.mark.parametrize(
    ("deadline", "late_by", "runs"),
    [
        pytest.param(0, 0.0, True, id="0-on-the-dot"),
        pytest.param(0, 0.5, True, id="0-half-second-late"),
        pytest.param(0, 1.0, True, id="0-at-tolerance"),
        pytest.param(0, 1.000001, False, id="0-a-microsecond-past-tolerance"),
        pytest.param(0, 1.001, False, id="0-past-tolerance"),
        pytest.param(0, 5.0, False, id="0-five-seconds-late"),
        pytest.param(30, 20.0, True, id="30-twenty-seconds-late"),
        pytest.param(30, 31.0, True, id="30-at-tolerance"),
        pytest.param(30, 31.5, False, id="30-past-tolerance"),
        pytest.param(3600, 3602.0, False, id="3600-past-tolerance"),
        pytest.param(None, 20 * 3600.0, True, id="none-twenty-hours-late"),
    ],
)
def test_starting_deadline(deadline: int | None, late_by: float, runs: bool) -> None:
    raw = spec(schedule=DAILY, startingDeadlineSeconds=deadline)
    slot = H09
    now = slot + seconds(late_by)

    decision = decide(view(raw, status=processed(raw, slot - timedelta(days=1))), [], now)

    assert decision.status["processedUntil"] == ts(slot)
    if runs:
        assert [run.slot for run in decision.runs] == [slot]
        assert decision.skips == []
        assert decision.status["recentRuns"][-1]["lagSeconds"] == round(late_by, 3)
    else:
        assert decision.runs == []
        assert skip_counts(decision) == {DEADLINE: 1}
        assert decision.skips[0].latest == slot
        assert event_reasons(decision) == ["SkippedDeadlineExceeded"]
        assert decision.status["slotsSkipped"] == {DEADLINE: 1}


# --- 6. suspend ----------------------------------------------------------------------------------


def test_suspended_slots_are_recorded_not_run() -> None:
    raw = spec(suspend=True)

    decision = decide(view(raw, status=processed(raw, H09)), [], utc(2026, 1, 5, 11, 30))

    assert decision.runs == []
    assert skip_counts(decision) == {SUSPENDED: 2}
    assert decision.skips[0].latest == H11
    assert [(event.type, event.reason) for event in decision.events] == [
        ("Normal", "SkippedSuspended")
    ]
    assert decision.status["processedUntil"] == ts(H11)
    assert decision.status["nextScheduleTime"] is None
    assert decision.status["slotsSkipped"] == {SUSPENDED: 2}
    suspended = condition(decision.status, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "Suspended")
    # Not woken per slot (a write and an Event each): the next decision records them all.
    assert decision.wake_at is None


def test_suspended_without_due_slots_does_nothing() -> None:
    raw = spec(suspend=True)

    decision = decide(view(raw, status=processed(raw, H11)), [], utc(2026, 1, 5, 11, 30))

    assert decision.runs == []
    assert decision.skips == []
    assert decision.events == []
    assert decision.wake_at is None


def test_resuming_runs_nothing_retroactively() -> None:
    suspended_at = utc(2026, 1, 5, 11, 30)
    sj = view(spec(suspend=True), status=processed(spec(), H09))
    during = decide(sj, [], suspended_at)
    resumed_at = utc(2026, 1, 5, 11, 50)

    decision = decide(view(spec(suspend=False), status=during.status), [], resumed_at)

    assert decision.runs == []
    assert decision.skips == []
    assert decision.events == []
    assert decision.status["processedUntil"] == ts(H11)
    assert decision.status["nextScheduleTime"] == ts(H12)
    suspended = condition(decision.status, "Suspended")
    assert suspended["status"] == "False"
    assert suspended["lastTransitionTime"] == ts(resumed_at)
    assert condition(decision.status, "Ready")["status"] == "True"


# --- 7. concurrencyPolicy ------------------------------------------------------------------------

RUNNING = slot_job(H11, uid="uid-running")
RUNNING_2 = job("backup-manual", uid="uid-running-2", trigger=TRIGGER_MANUAL)
STOPPING = slot_job(H10, uid="uid-stopping", deleting=True)
DONE_OK = slot_job(H09, state=SUCCEEDED)
DONE_BAD = slot_job(utc(2026, 1, 5, 8), state=FAILED)
FOREIGN = job("other-123", uid="uid-foreign", owner_uid=OTHER_UID)
ORPHAN = job("backup-orphan", uid="uid-orphan", owner_uid=None)


@pytest.mark.parametrize(
    ("policy", "jobs", "runs", "replaced", "forbidden"),
    [
        pytest.param("Allow", [], True, [], False, id="allow-idle"),
        pytest.param("Allow", [RUNNING], True, [], False, id="allow-alongside-active"),
        pytest.param("Forbid", [], True, [], False, id="forbid-idle"),
        pytest.param("Forbid", [RUNNING], False, [], True, id="forbid-active"),
        pytest.param("Forbid", [DONE_OK, DONE_BAD], True, [], False, id="forbid-finished"),
        pytest.param("Forbid", [STOPPING], True, [], False, id="forbid-deleting"),
        pytest.param("Forbid", [FOREIGN, ORPHAN], True, [], False, id="forbid-not-owned"),
        pytest.param("Replace", [], True, [], False, id="replace-idle"),
        pytest.param(
            "Replace",
            [RUNNING, RUNNING_2, STOPPING, DONE_OK, DONE_BAD, FOREIGN, ORPHAN],
            True,
            [RUNNING, RUNNING_2],
            False,
            id="replace-active-only",
        ),
    ],
)
def test_concurrency_policy(
    policy: str, jobs: list[JobInfo], runs: bool, replaced: list[JobInfo], forbidden: bool
) -> None:
    raw = spec(concurrencyPolicy=policy)
    now = H12 + seconds(2)

    decision = decide(view(raw, status=processed(raw, H11)), jobs, now)

    assert names(decision.runs) == ([slot_name(H12)] if runs else [])
    assert [d for d in decision.deletions if d.reason == "Replace"] == [
        PlannedDeletion(j.name, j.uid, "Replace") for j in replaced
    ]
    assert decision.status["processedUntil"] == ts(H12)  # advances either way
    if forbidden:
        assert skip_counts(decision) == {FORBID: 1}
        assert decision.skips[0].latest == H12
        assert [(e.type, e.reason) for e in decision.events] == [
            ("Normal", "SkippedConcurrencyForbid")  # asked for: CronJob's JobAlreadyActive
        ]
        assert decision.status["slotsSkipped"] == {FORBID: 1}
    else:
        assert decision.skips == []
        assert decision.events == []


def test_replace_status_lists_the_new_run_not_the_replaced_jobs() -> None:
    raw = spec(concurrencyPolicy="Replace")

    decision = decide(view(raw, status=processed(raw, H11)), [RUNNING, STOPPING], H12)

    assert [ref["name"] for ref in decision.status["active"]] == [slot_name(H12)]
    assert decision.status["activeCount"] == 1


def test_forbid_wakes_at_the_next_slot() -> None:
    raw = spec(concurrencyPolicy="Forbid")

    decision = decide(view(raw, status=processed(raw, H11)), [RUNNING], H12)

    assert decision.wake_at == H13
    assert decision.status["nextScheduleTime"] == ts(H13)


# --- 8. crash recovery: the slot's Job already exists --------------------------------------------


@pytest.mark.parametrize("state", [ACTIVE, SUCCEEDED, FAILED])
@pytest.mark.parametrize("policy", ["Allow", "Forbid", "Replace"])
def test_existing_job_for_the_slot_is_not_created_again(state: JobState, policy: str) -> None:
    raw = spec(concurrencyPolicy=policy)
    existing = slot_job(H12, state=state)

    decision = decide(view(raw, status=processed(raw, H11)), [existing], H12 + seconds(3))

    assert decision.runs == []
    assert decision.skips == []
    assert decision.events == []
    assert [d for d in decision.deletions if d.reason == "Replace"] == []
    assert decision.status["processedUntil"] == ts(H12)
    # The earlier attempt's record was lost with the crash; this decision writes it.
    assert [run.job_name for run, _ in decision.recorded] == [existing.name]
    assert decision.status["runsCreated"] == 1
    assert decision.status["lastScheduleTime"] == ts(H12)
    assert decision.status["recentRuns"][-1]["job"] == existing.name


@pytest.mark.parametrize(
    "raw",
    [spec(suspend=True), spec(startingDeadlineSeconds=0), spec(concurrencyPolicy="Forbid")],
    ids=["suspended", "late", "forbid"],
)
def test_a_due_slot_whose_job_exists_is_a_run_never_a_skip(raw: dict[str, Any]) -> None:
    """Its Job was created, but the response (and so the record) was lost: it ran."""
    existing = slot_job(H12)

    decision = decide(view(raw, status=processed(raw, H11)), [existing], H12 + seconds(30))

    assert decision.skips == []
    assert decision.runs == []
    assert decision.status["runsCreated"] == 1
    assert decision.status["slotsSkipped"] == {}


def test_a_template_the_api_server_refused_is_invalid_until_the_spec_is_edited() -> None:
    refused = {
        "generation": 1,
        "message": 'strict decoding error: unknown field "spec.backofLimit"',
    }
    sj = view(status=processed(spec(), H11, templateError=refused))

    decision = decide(sj, [], H12)

    assert decision.runs == []
    assert condition(decision.status, "InvalidSpec")["status"] == "True"
    assert (
        "spec.jobTemplate: strict decoding error"
        in condition(decision.status, "InvalidSpec")["message"]
    )
    edited = decide(
        dataclasses.replace(sj, generation=2, status=decision.status), [], H12 + seconds(5)
    )
    assert condition(edited.status, "InvalidSpec")["status"] == "False"


# --- 9. Job names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "slot", "expected"),
    [
        pytest.param("0 * * * *", utc(2026, 1, 5, 12), "backup-29460240", id="minutes"),
        pytest.param("@hourly", utc(2026, 1, 5, 12), "backup-29460240", id="macro-minutes"),
        pytest.param("*/30 * * * * *", utc(2026, 1, 5, 12), "backup-1767614400", id="seconds"),
        pytest.param(
            "*/30 * * * * *", utc(2026, 1, 5, 12, 0, 30), "backup-1767614430", id="seconds-30"
        ),
    ],
)
def test_scheduled_job_name(schedule: str, slot: datetime, expected: str) -> None:
    raw = spec(schedule=schedule)

    decision = decide(view(raw, status=processed(raw, slot - seconds(1))), [], slot)

    assert [(run.job_name, run.slot) for run in decision.runs] == [(expected, slot)]


def test_manual_job_name_is_stable_per_token() -> None:
    first = manual_job_name(NAME, "tok-1")

    assert re.fullmatch(r"backup-m[0-9a-f]{9}", first)
    assert first == "backup-m65dcf16ea"
    assert manual_job_name(NAME, "tok-1") == first
    assert manual_job_name(NAME, "tok-2") != first


# --- 10. run-now ---------------------------------------------------------------------------------

IDLE_NOW = utc(2026, 1, 5, 11, 20)  # between slots: nothing scheduled is due


def run_now_view(token: str | None = "tok-1", **fields: Any) -> ScheduledJobView:
    raw = spec(**fields)
    return view(raw, status=processed(raw, H11), run_now=token)


def test_run_now_creates_one_manual_run() -> None:
    sj = run_now_view()
    sj = dataclasses.replace(
        sj, status={**sj.status, "lastScheduleTime": ts(H11), "runsCreated": 4}
    )

    decision = decide(sj, [], IDLE_NOW)

    assert decision.runs == [
        type(decision.runs[0])(manual_job_name(NAME, "tok-1"), IDLE_NOW, TRIGGER_MANUAL, "tok-1")
    ]
    status = decision.status
    assert status["runNowToken"] == "tok-1"
    assert status["lastScheduleTime"] == ts(H11)  # manual runs don't move it
    assert status["runsCreated"] == 5
    assert status["processedUntil"] == ts(H11)
    assert status["recentRuns"][-1] == {
        "slot": ts(IDLE_NOW),
        "job": manual_job_name(NAME, "tok-1"),
        "trigger": TRIGGER_MANUAL,
        "result": "Active",
        "lagSeconds": 0.0,
    }
    assert decision.skips == []
    assert decision.events == []
    assert decision.wake_at == H12


@pytest.mark.parametrize("token", [None, ""])
def test_no_run_now_without_a_token(token: str | None) -> None:
    decision = decide(run_now_view(token), [], IDLE_NOW)

    assert decision.runs == []
    assert "runNowToken" not in decision.status


def test_same_run_now_token_runs_once() -> None:
    sj = run_now_view()
    first = decide(sj, [], IDLE_NOW)
    sj2, jobs2 = after_apply(sj, [], first)

    second = decide(sj2, jobs2, IDLE_NOW + seconds(30))

    assert second.runs == []
    assert second.events == []
    assert second.status["runNowToken"] == "tok-1"


def test_new_run_now_token_runs_again() -> None:
    sj = run_now_view("tok-2")
    sj = dataclasses.replace(sj, status={**sj.status, "runNowToken": "tok-1"})

    decision = decide(sj, [], IDLE_NOW)

    assert [(run.job_name, run.run_now_token) for run in decision.runs] == [
        (manual_job_name(NAME, "tok-2"), "tok-2")
    ]
    assert decision.status["runNowToken"] == "tok-2"


def test_run_now_obeys_forbid_and_is_acknowledged() -> None:
    decision = decide(run_now_view(concurrencyPolicy="Forbid"), [RUNNING], IDLE_NOW)

    assert decision.runs == []
    # A refused request is not a slot: an Event says so, no slot counter moves.
    assert skip_counts(decision) == {}
    assert [(e.type, e.reason) for e in decision.events] == [("Warning", "RunNowForbidden")]
    assert decision.status["runNowToken"] == "tok-1"
    assert decision.status["processedUntil"] == ts(H11)


def test_run_now_obeys_replace() -> None:
    decision = decide(run_now_view(concurrencyPolicy="Replace"), [RUNNING, DONE_OK], IDLE_NOW)

    assert names(decision.runs) == [manual_job_name(NAME, "tok-1")]
    assert decision.deletions == [PlannedDeletion(RUNNING.name, RUNNING.uid, "Replace")]
    assert decision.status["runNowToken"] == "tok-1"


def test_run_now_runs_while_suspended() -> None:
    decision = decide(run_now_view(suspend=True), [], IDLE_NOW)

    assert [run.trigger for run in decision.runs] == [TRIGGER_MANUAL]
    assert decision.status["runNowToken"] == "tok-1"
    assert decision.status["nextScheduleTime"] is None


def test_run_now_runs_while_suspended_slots_are_skipped() -> None:
    decision = decide(run_now_view(suspend=True), [], H12 + seconds(5))

    assert skip_counts(decision) == {SUSPENDED: 1}
    assert [run.trigger for run in decision.runs] == [TRIGGER_MANUAL]
    assert decision.status["runNowToken"] == "tok-1"


def test_existing_manual_job_acknowledges_the_token_without_a_run() -> None:
    existing = job(manual_job_name(NAME, "tok-1"), trigger=TRIGGER_MANUAL)

    decision = decide(run_now_view(), [existing], IDLE_NOW)

    assert decision.runs == []
    assert decision.status["runNowToken"] == "tok-1"
    assert decision.status["runsCreated"] == 1


def test_run_now_waits_for_a_scheduled_run_in_the_same_decision() -> None:
    sj = run_now_view()
    now = H12 + seconds(2)

    first = decide(sj, [], now)

    assert [(run.trigger, run.slot) for run in first.runs] == [(TRIGGER_SCHEDULE, H12)]
    assert "runNowToken" not in first.status
    assert first.wake_at == now

    sj2, jobs2 = after_apply(sj, [], first)
    second = decide(sj2, jobs2, now)

    assert [(run.trigger, run.run_now_token) for run in second.runs] == [(TRIGGER_MANUAL, "tok-1")]
    assert second.status["runNowToken"] == "tok-1"
    assert second.status["lastScheduleTime"] == ts(H12)
    assert second.wake_at == H13


# --- 11. runAt (one-off) -------------------------------------------------------------------------

RUN_AT = utc(2026, 1, 5, 10, 0)


def completed(decision: Decision) -> tuple[str, str]:
    found = condition(decision.status, "Completed")
    return found["status"], found["reason"]


def test_run_at_in_the_future_waits() -> None:
    decision = decide(view(run_at_spec(RUN_AT)), [], RUN_AT - timedelta(minutes=30))

    assert decision.runs == []
    assert decision.skips == []
    assert decision.wake_at == RUN_AT
    assert decision.status["nextScheduleTime"] == ts(RUN_AT)
    assert "processedUntil" not in decision.status
    assert decision.status["observedSchedule"] == trigger_key(run_at_spec(RUN_AT))
    assert completed(decision) == ("False", "Pending")
    assert condition(decision.status, "Ready")["status"] == "True"


@pytest.mark.parametrize(
    ("deadline", "late_by"),
    [
        pytest.param(None, 3 * 86400.0, id="no-deadline"),
        pytest.param(60, 61.0, id="within-deadline"),
        pytest.param(0, 0.5, id="deadline-zero-on-time"),
    ],
)
def test_past_run_at_runs_once(deadline: int | None, late_by: float) -> None:
    sj = view(run_at_spec(RUN_AT, startingDeadlineSeconds=deadline))
    now = RUN_AT + seconds(late_by)

    first = decide(sj, [], now)

    assert [(run.slot, run.trigger) for run in first.runs] == [(RUN_AT, TRIGGER_SCHEDULE)]
    assert first.skips == []
    assert first.status["processedUntil"] == ts(RUN_AT)
    assert first.status["lastScheduleTime"] == ts(RUN_AT)
    assert first.status["nextScheduleTime"] is None
    assert first.wake_at is None
    assert completed(first) == ("False", "Pending")

    sj2, jobs2 = after_apply(sj, [], first)
    second = decide(sj2, jobs2, now + timedelta(minutes=1))

    assert second.runs == []
    assert second.skips == []
    assert second.events == []
    assert completed(second) == ("False", "Pending")


def test_run_at_job_is_named_by_seconds() -> None:
    """A runAt instant has seconds precision; minute names could collide after an edit."""
    decision = decide(view(run_at_spec(RUN_AT)), [], RUN_AT + seconds(5))

    assert names(decision.runs) == [f"{NAME}-{int(RUN_AT.timestamp())}"]


def test_run_at_past_its_deadline_is_skipped_and_completed() -> None:
    raw = run_at_spec(RUN_AT, startingDeadlineSeconds=60)

    decision = decide(view(raw), [], RUN_AT + timedelta(minutes=5))

    assert decision.runs == []
    assert skip_counts(decision) == {DEADLINE: 1}
    assert decision.skips[0].latest == RUN_AT
    assert decision.status["processedUntil"] == ts(RUN_AT)
    assert completed(decision) == ("True", "Skipped")
    assert condition(decision.status, "Ready")["reason"] == "Completed"
    assert decision.status["nextScheduleTime"] is None
    assert decision.wake_at is None


@pytest.mark.parametrize(
    ("state", "reason"), [(SUCCEEDED, "RunSucceeded"), (FAILED, "RunFailed"), (ACTIVE, None)]
)
def test_run_at_completion_follows_its_job(state: JobState, reason: str | None) -> None:
    sj = view(run_at_spec(RUN_AT))
    first = decide(sj, [], RUN_AT + seconds(1))
    [run] = first.runs
    finished = job(
        run.job_name,
        state=state,
        slot=RUN_AT,
        created_at=RUN_AT,
        finished_at=None if state is ACTIVE else RUN_AT + timedelta(minutes=3),
    )

    decision = decide(
        dataclasses.replace(sj, status=first.status), [finished], RUN_AT + seconds(300)
    )

    assert decision.runs == []
    if reason is None:
        assert completed(decision) == ("False", "Pending")
        assert condition(decision.status, "Ready")["reason"] == "Scheduling"
    else:
        assert completed(decision) == ("True", reason)
        assert condition(decision.status, "Ready")["reason"] == "Completed"
        assert decision.status["recentRuns"][-1]["result"] == state.value


def test_run_at_outcome_survives_the_job_being_deleted() -> None:
    sj = view(run_at_spec(RUN_AT))
    first = decide(sj, [], RUN_AT + seconds(1))
    [run] = first.runs
    done = job(run.job_name, state=SUCCEEDED, slot=RUN_AT, finished_at=RUN_AT + seconds(60))
    second = decide(dataclasses.replace(sj, status=first.status), [done], RUN_AT + seconds(90))

    third = decide(dataclasses.replace(sj, status=second.status), [], RUN_AT + seconds(120))

    assert completed(third) == ("True", "RunSucceeded")
    assert third.runs == []


def test_run_at_edit_runs_the_new_instant() -> None:
    sj = view(run_at_spec(RUN_AT))
    first = decide(sj, [], RUN_AT + seconds(1))
    old_job = job(
        first.runs[0].job_name, state=SUCCEEDED, slot=RUN_AT, finished_at=RUN_AT + seconds(60)
    )
    done = decide(dataclasses.replace(sj, status=first.status), [old_job], RUN_AT + seconds(90))
    assert completed(done) == ("True", "RunSucceeded")
    new_run_at = utc(2026, 1, 5, 10, 30)
    now = new_run_at + seconds(2)

    edited = decide(view(run_at_spec(new_run_at), status=done.status), [old_job], now)

    assert [run.slot for run in edited.runs] == [new_run_at]
    assert edited.status["processedUntil"] == ts(new_run_at)
    assert edited.status["observedSchedule"] == trigger_key(run_at_spec(new_run_at))
    assert completed(edited) == ("False", "Pending")
    assert edited.skips == []


def test_run_at_edit_to_the_future_resets_to_pending() -> None:
    sj = view(run_at_spec(RUN_AT, startingDeadlineSeconds=10))
    skipped = decide(sj, [], RUN_AT + timedelta(hours=1))
    assert completed(skipped) == ("True", "Skipped")
    new_run_at = utc(2026, 1, 6, 10, 0)

    edited = decide(
        view(run_at_spec(new_run_at, startingDeadlineSeconds=10), status=skipped.status),
        [],
        RUN_AT + timedelta(hours=2),
    )

    assert edited.runs == []
    assert edited.skips == []
    # The cursor stays: no edit moves it back (test_run_at_edits.py).
    assert edited.status["processedUntil"] == ts(RUN_AT)
    assert edited.status["nextScheduleTime"] == ts(new_run_at)
    assert edited.wake_at == new_run_at
    assert completed(edited) == ("False", "Pending")


def test_completed_condition_is_dropped_when_run_at_becomes_a_schedule() -> None:
    sj = view(run_at_spec(RUN_AT, startingDeadlineSeconds=10))
    one_off = decide(sj, [], RUN_AT + timedelta(hours=1))
    assert completed(one_off) == ("True", "Skipped")

    decision = decide(view(spec(), status=one_off.status), [], RUN_AT + timedelta(hours=2))

    kinds = {c["type"] for c in decision.status["conditions"]}
    assert kinds == {"Ready", "Suspended", "InvalidSpec"}


# --- 12. history limits --------------------------------------------------------------------------


def finished_job(
    name: str,
    state: JobState,
    *,
    finished: int | None = None,
    started: int | None = None,
    created: int | None = None,
    trigger: str = TRIGGER_SCHEDULE,
    owner_uid: str | None = UID,
    deleting: bool = False,
) -> JobInfo:
    """A Job whose timestamps are minutes after 08:00 on the test day."""

    def at(minute: int | None) -> datetime | None:
        return None if minute is None else utc(2026, 1, 5, 8) + timedelta(minutes=minute)

    return job(
        name,
        state=state,
        finished_at=at(finished),
        started_at=at(started),
        created_at=at(created),
        trigger=trigger,
        owner_uid=owner_uid,
        deleting=deleting,
    )


HISTORY_CASES = [
    pytest.param(
        {"successfulJobsHistoryLimit": 2},
        [finished_job(f"ok-{i}", SUCCEEDED, finished=10 * i) for i in (3, 1, 4, 2)],
        ["ok-1", "ok-2"],
        id="succeeded-over-limit",
    ),
    pytest.param(
        {},
        [finished_job(f"ok-{i}", SUCCEEDED, finished=i) for i in (1, 2, 3)],
        [],
        id="succeeded-default-limit-3",
    ),
    pytest.param(
        {},
        [finished_job(f"bad-{i}", FAILED, finished=i) for i in (3, 1, 2)],
        ["bad-1", "bad-2"],
        id="failed-default-limit-1",
    ),
    pytest.param(
        {"failedJobsHistoryLimit": 0, "successfulJobsHistoryLimit": 0},
        [
            finished_job("bad", FAILED, finished=1),
            finished_job("ok", SUCCEEDED, finished=2),
            finished_job("running", ACTIVE, created=0),
        ],
        ["ok", "bad"],
        id="zero-limits-spare-active",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1},
        [
            # finished_at, falling back to started_at, then created_at
            finished_job("by-finish", SUCCEEDED, finished=30, started=1, created=0),
            finished_job("by-start", SUCCEEDED, started=20, created=0),
            finished_job("by-creation", SUCCEEDED, created=40),
            finished_job("no-time", SUCCEEDED),
        ],
        ["no-time", "by-start", "by-finish"],
        id="fallback-ordering",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1},
        [
            finished_job("manual-new", SUCCEEDED, finished=50, trigger=TRIGGER_MANUAL),
            finished_job("sched-old", SUCCEEDED, finished=40),
        ],
        ["sched-old"],
        id="manual-runs-count",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1},
        [
            finished_job("gone", SUCCEEDED, finished=1, deleting=True),
            finished_job("foreign", SUCCEEDED, finished=2, owner_uid=OTHER_UID),
            finished_job("older", SUCCEEDED, finished=3),
            finished_job("newer", SUCCEEDED, finished=4),
        ],
        ["older"],
        id="ignores-deleting-and-foreign",
    ),
    pytest.param(
        {"successfulJobsHistoryLimit": 1, "failedJobsHistoryLimit": 1},
        [
            finished_job("ok-old", SUCCEEDED, finished=1),
            finished_job("bad-new", FAILED, finished=5),
            finished_job("ok-new", SUCCEEDED, finished=2),
            finished_job("bad-old", FAILED, finished=4),
        ],
        ["ok-old", "bad-old"],
        id="limits-per-state",
    ),
]


@pytest.mark.parametrize(("limits", "jobs", "deleted"), HISTORY_CASES)
def test_history_limits(limits: dict[str, int], jobs: list[JobInfo], deleted: list[str]) -> None:
    raw = spec(**limits)

    decision = decide(view(raw, status=processed(raw, H11)), jobs, IDLE_NOW)

    assert sorted(names(decision.deletions)) == sorted(deleted)
    assert all(d.reason == "HistoryLimit" for d in decision.deletions)
    by_name = {j.name: j for j in jobs}
    assert all(d.uid == by_name[d.job_name].uid for d in decision.deletions)
    assert decision.runs == []


# --- 13. status fields ---------------------------------------------------------------------------


def test_active_refs_are_sorted_and_include_the_planned_run() -> None:
    jobs = [
        job("backup-zz", uid="uid-zz"),
        job("backup-aa", uid="uid-aa"),
        job("backup-gone", uid="uid-gone", deleting=True),
        slot_job(H09, state=SUCCEEDED),
        job("other-1", uid="uid-o", owner_uid=OTHER_UID),
    ]

    decision = decide(view(status=processed(spec(), H11)), jobs, H12)

    assert decision.status["active"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "backup-29460240",
            "namespace": NAMESPACE,
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "backup-aa",
            "namespace": NAMESPACE,
        },
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "backup-zz",
            "namespace": NAMESPACE,
        },
    ]
    assert decision.status["activeCount"] == 3


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        pytest.param(None, H12, id="first"),
        pytest.param(H11, H12, id="later-slot"),
        pytest.param(utc(2026, 1, 5, 12, 30), utc(2026, 1, 5, 12, 30), id="keeps-max"),
    ],
)
def test_last_schedule_time(previous: datetime | None, expected: datetime) -> None:
    extra = {"lastScheduleTime": ts(previous)} if previous else {}

    decision = decide(view(status=processed(spec(), H11, **extra)), [], H12)

    assert decision.status["lastScheduleTime"] == ts(expected)


def test_last_schedule_time_is_absent_until_something_runs() -> None:
    decision = decide(view(), [], utc(2026, 1, 5, 8, 45))

    assert "lastScheduleTime" not in decision.status
    assert "lastSuccessfulTime" not in decision.status


@pytest.mark.parametrize(
    ("previous", "expected"),
    [
        pytest.param(None, utc(2026, 1, 5, 10, 7), id="from-jobs"),
        pytest.param(utc(2026, 1, 5, 9, 0), utc(2026, 1, 5, 10, 7), id="newer-job"),
        pytest.param(utc(2026, 1, 5, 11, 0), utc(2026, 1, 5, 11, 0), id="keeps-max"),
    ],
)
def test_last_successful_time(previous: datetime | None, expected: datetime) -> None:
    jobs = [
        slot_job(H09, state=SUCCEEDED, finished_at=utc(2026, 1, 5, 9, 4)),
        slot_job(H10, state=SUCCEEDED, finished_at=utc(2026, 1, 5, 10, 7)),
        slot_job(H11, state=FAILED, finished_at=utc(2026, 1, 5, 11, 9)),
    ]
    extra = {"lastSuccessfulTime": ts(previous)} if previous else {}

    decision = decide(view(status=processed(spec(), H11, **extra)), jobs, IDLE_NOW)

    assert decision.status["lastSuccessfulTime"] == ts(expected)


def test_runs_created_counts_up() -> None:
    fresh = decide(view(), [], H09)
    assert fresh.status["runsCreated"] == 1

    decision = decide(view(status=processed(spec(), H11, runsCreated=41)), [], H12)

    assert decision.status["runsCreated"] == 42


def recent(job_name: str, result: str, slot: datetime = H09) -> dict[str, Any]:
    return {
        "slot": ts(slot),
        "job": job_name,
        "trigger": TRIGGER_SCHEDULE,
        "result": result,
        "lagSeconds": 0.25,
    }


def test_recent_runs_follow_their_jobs() -> None:
    previous = [
        recent("backup-ok", "Active"),
        recent("backup-bad", "Active"),
        recent("backup-vanished", "Active"),
        recent("backup-pruned", "Succeeded"),
        recent("backup-running", "Active"),
    ]
    jobs = [
        job("backup-ok", state=SUCCEEDED, finished_at=utc(2026, 1, 5, 9, 3)),
        job("backup-bad", state=FAILED, finished_at=utc(2026, 1, 5, 9, 4)),
        job("backup-running"),
    ]
    now = H12 + seconds(1.5)

    decision = decide(view(status=processed(spec(), H11, recentRuns=previous)), jobs, now)

    assert decision.status["recentRuns"] == [
        recent("backup-ok", "Succeeded") | {"finishedAt": "2026-01-05T09:03:00Z"},
        recent("backup-bad", "Failed") | {"finishedAt": "2026-01-05T09:04:00Z"},
        recent("backup-vanished", "Deleted"),
        recent("backup-pruned", "Succeeded"),
        recent("backup-running", "Active"),
        {
            "slot": ts(H12),
            "job": slot_name(H12),
            "trigger": TRIGGER_SCHEDULE,
            "result": "Active",
            "lagSeconds": 1.5,
        },
    ]


def test_recent_runs_keep_the_newest_ten() -> None:
    previous = [recent(f"backup-old-{i}", "Deleted") for i in range(RECENT_RUNS)]

    decision = decide(view(status=processed(spec(), H11, recentRuns=previous)), [], H12)

    runs = decision.status["recentRuns"]
    assert len(runs) == RECENT_RUNS == 10
    assert [r["job"] for r in runs] == [f"backup-old-{i}" for i in range(1, 10)] + [slot_name(H12)]


def test_observed_generation() -> None:
    decision = decide(view(generation=7), [], H09)

    assert decision.status["observedGeneration"] == 7
    assert {c["observedGeneration"] for c in decision.status["conditions"]} == {7}


def test_conditions_of_a_healthy_schedule() -> None:
    decision = decide(view(), [], H09)

    summary = {c["type"]: (c["status"], c["reason"]) for c in decision.status["conditions"]}
    assert summary == {
        "InvalidSpec": ("False", "SpecValid"),
        "Suspended": ("False", "NotSuspended"),
        "Ready": ("True", "Scheduling"),
    }


def test_condition_transition_time_moves_only_when_the_status_changes() -> None:
    t1, t2, t3 = H09, H10 + seconds(1), H11 + seconds(1)
    first = decide(view(), [], t1)
    assert {c["lastTransitionTime"] for c in first.status["conditions"]} == {ts(t1)}

    second = decide(view(status=first.status), [], t2)
    assert {c["lastTransitionTime"] for c in second.status["conditions"]} == {ts(t1)}

    third = decide(view(spec(suspend=True), status=second.status), [], t3)
    times = {c["type"]: c["lastTransitionTime"] for c in third.status["conditions"]}
    assert times == {"InvalidSpec": ts(t1), "Suspended": ts(t3), "Ready": ts(t1)}


# --- 14. idempotence -----------------------------------------------------------------------------


def _scenario(name: str) -> tuple[ScheduledJobView, list[JobInfo], datetime]:
    deadline = spec(startingDeadlineSeconds=60)
    forbid = spec(concurrencyPolicy="Forbid")
    replace = spec(concurrencyPolicy="Replace")
    at = run_at_spec(RUN_AT)
    done = [finished_job(f"backup-ok-{i}", SUCCEEDED, finished=i) for i in range(5)]
    scenarios: dict[str, tuple[ScheduledJobView, list[JobInfo], datetime]] = {
        "fresh-run": (view(), [], H09 + seconds(2)),
        "fresh-idle": (view(), [], utc(2026, 1, 5, 8, 45)),
        "missed-slots": (view(status=processed(spec(), H09)), [], H12 + seconds(300)),
        "deadline-skip": (view(deadline, status=processed(deadline, H09)), [], H12 + seconds(300)),
        "suspended": (view(spec(suspend=True), status=processed(spec(), H09)), [], H12),
        "schedule-edit": (
            view(spec(schedule="30 * * * *"), status=processed(spec(), H09)),
            [],
            H12,
        ),
        "forbid": (view(forbid, status=processed(forbid, H11)), [RUNNING], H12),
        "replace": (view(replace, status=processed(replace, H11)), [RUNNING], H12),
        "history": (view(status=processed(spec(), H11)), done, IDLE_NOW),
        "run-now": (run_now_view(), [], IDLE_NOW),
        "run-at-future": (view(at), [], RUN_AT - seconds(60)),
        "run-at-past": (view(at), [], RUN_AT + seconds(60)),
        "invalid": (view(spec(schedule="0 0 30 2 *")), [], H12),
    }
    return scenarios[name]


SCENARIOS = [
    "fresh-run",
    "fresh-idle",
    "missed-slots",
    "deadline-skip",
    "suspended",
    "schedule-edit",
    "forbid",
    "replace",
    "history",
    "run-now",
    "run-at-future",
    "run-at-past",
    "invalid",
]


def _twice(name: str, *, with_uids: bool) -> tuple[Decision, Decision]:
    sj, jobs, now = _scenario(name)
    first = decide(sj, jobs, now)
    sj2, jobs2 = after_apply(sj, jobs, first, with_uids=with_uids)
    return first, decide(sj2, jobs2, now)


@pytest.mark.parametrize("name", SCENARIOS)
def test_second_decision_plans_nothing(name: str) -> None:
    _, second = _twice(name, with_uids=True)

    assert second.runs == []
    assert second.deletions == []
    assert second.skips == []
    assert second.events == []


@pytest.mark.parametrize(
    "name",
    SCENARIOS,
)
def test_second_decision_writes_an_identical_status(name: str) -> None:
    first, second = _twice(name, with_uids=True)

    assert second.status == first.status
    assert second.wake_at == first.wake_at


@pytest.mark.parametrize("name", SCENARIOS)
def test_status_is_stable_apart_from_new_jobs_uids(name: str) -> None:
    # The same as above with the created Jobs' uid unknown ("" is omitted from refs): everything
    # else in the status is already a fixed point after one decision.
    first, second = _twice(name, with_uids=False)

    assert second.status == first.status
    assert second.wake_at == first.wake_at


@pytest.mark.parametrize("name", SCENARIOS)
def test_third_decision_is_a_fixed_point(name: str) -> None:
    sj, jobs, now = _scenario(name)
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


# --- 15. invalid specs ---------------------------------------------------------------------------

INVALID = [
    pytest.param(NAME, spec(runAt="2026-01-05T10:00:00Z"), "runAt", id="schedule-and-run-at"),
    pytest.param(NAME, spec(schedule=None), "schedule", id="neither"),
    pytest.param(NAME, spec(schedule="0 0 30 2 *"), "spec.schedule", id="never-fires"),
    pytest.param(NAME, spec(schedule="61 * * * *"), "spec.schedule", id="bad-minute"),
    pytest.param(NAME, spec(timeZone="Mars/Olympus_Mons"), "spec.timeZone", id="bad-zone"),
    pytest.param("x" * 53, spec(), "metadata.name", id="name-too-long"),
    pytest.param(
        NAME,
        spec(startingDeadlineSeconds=-1),
        "spec.startingDeadlineSeconds",
        id="negative-deadline",
    ),
    pytest.param(
        NAME,
        spec(successfulJobsHistoryLimit="3"),
        "spec.successfulJobsHistoryLimit",
        id="limit-not-int",
    ),
    pytest.param(
        NAME, spec(concurrencyPolicy="Sometimes"), "spec.concurrencyPolicy", id="bad-policy"
    ),
    pytest.param(
        NAME,
        spec(jobTemplate={"spec": {"selector": {"matchLabels": {"a": "b"}}}}),
        "spec.jobTemplate.spec.selector",
        id="selector",
    ),
    pytest.param(NAME, spec(jobTemplate=None), "spec.jobTemplate", id="no-template"),
    pytest.param(NAME, run_at_spec("tomorrow"), "spec.runAt", id="bad-run-at"),
]


@pytest.mark.parametrize(("name", "raw", "field"), INVALID)
def test_invalid_spec_is_reported_once(name: str, raw: dict[str, Any], field: str) -> None:
    sj = view(raw, name=name, run_now="tok-1", generation=3)
    jobs = [job(f"{name}-1")]
    now = H12

    first = decide(sj, jobs, now)

    assert (first.runs, first.deletions, first.skips) == ([], [], [])
    invalid = condition(first.status, "InvalidSpec")
    assert (invalid["status"], invalid["reason"]) == ("True", "InvalidSpec")
    assert field in invalid["message"]
    ready = condition(first.status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert [(e.type, e.reason) for e in first.events] == [("Warning", "InvalidSpec")]
    assert field in first.events[0].message
    assert first.status["observedGeneration"] == 3
    assert "runNowToken" not in first.status
    assert first.wake_at is None

    second = decide(dataclasses.replace(sj, status=first.status), jobs, now + timedelta(hours=1))

    assert second.events == []
    assert second.runs == []
    assert second.status == first.status


def test_accepted_spec_variants_are_valid() -> None:
    for raw in (
        spec(startingDeadlineSeconds=0),
        spec(successfulJobsHistoryLimit=0, failedJobsHistoryLimit=0),
        spec(timeZone=""),
        spec(schedule="@daily"),
        run_at_spec("2026-01-05T11:00:00+01:00"),
    ):
        decision = decide(view(raw), [], H12)
        assert condition(decision.status, "InvalidSpec")["status"] == "False", raw


def test_fixing_an_invalid_spec_clears_the_condition() -> None:
    broken = view(spec(concurrencyPolicy="Sometimes"), status=processed(spec(), H11))
    first = decide(broken, [], IDLE_NOW)

    fixed = decide(view(spec(), status=first.status), [], IDLE_NOW + seconds(30))

    # The fix counts as an edit: it says so, and never runs slots from before it.
    assert [(e.type, e.reason) for e in fixed.events] == [("Normal", "ScheduleChanged")]
    assert fixed.runs == []
    invalid = condition(fixed.status, "InvalidSpec")
    assert (invalid["status"], invalid["lastTransitionTime"]) == (
        "False",
        ts(IDLE_NOW + seconds(30)),
    )
    assert condition(fixed.status, "Ready")["status"] == "True"


def test_a_changed_problem_is_reported_again() -> None:
    first = decide(view(spec(concurrencyPolicy="Sometimes")), [], H12)

    second = decide(view(spec(timeZone="Nowhere/Land"), status=first.status), [], H12)

    assert event_reasons(second) == ["InvalidSpec"]
    assert "spec.timeZone" in condition(second.status, "InvalidSpec")["message"]


def test_fixing_a_spec_invalid_since_creation_runs_nothing_retroactively() -> None:
    broken = decide(view(spec(schedule="0 0 30 2 *")), [], utc(2026, 1, 5, 10, 30))
    fixed_at = utc(2026, 1, 5, 12, 10)

    decision = decide(view(spec(), status=broken.status), [], fixed_at)

    assert decision.runs == []
    assert decision.skips == []


# --- 16. DST (Europe/Berlin) ---------------------------------------------------------------------

BERLIN_DAILY = spec(schedule="30 2 * * *", timeZone="Europe/Berlin")


def walk(raw: dict[str, Any], start: datetime, end: datetime, step: timedelta) -> list[datetime]:
    """Decide every `step` from `start` to `end`, applying each decision; the slots run."""
    sj = view(raw, status=processed(raw, start))
    jobs: list[JobInfo] = []
    ran: list[datetime] = []
    now = start
    while now <= end:
        decision = decide(sj, jobs, now)
        assert decision.skips == [], (now, decision.skips)
        ran += [run.slot for run in decision.runs]
        sj, jobs = after_apply(sj, jobs, decision)
        now += step
    return ran


@pytest.mark.parametrize(
    ("start", "end", "slots"),
    [
        pytest.param(
            utc(2025, 3, 29, 12), utc(2025, 3, 30, 6), [utc(2025, 3, 30, 1)], id="spring-forward"
        ),
        pytest.param(
            utc(2025, 10, 25, 12), utc(2025, 10, 26, 6), [utc(2025, 10, 26, 0, 30)], id="fall-back"
        ),
    ],
)
def test_dst_daily_runs_once(start: datetime, end: datetime, slots: list[datetime]) -> None:
    # In one decision (after an outage spanning the transition)...
    decision = decide(view(BERLIN_DAILY, status=processed(BERLIN_DAILY, start)), [], end)
    assert [run.slot for run in decision.runs] == slots
    assert names(decision.runs) == [slot_name(slot) for slot in slots]
    assert decision.skips == []
    # ...and decided every 15 minutes across it.
    assert walk(BERLIN_DAILY, start, end, timedelta(minutes=15)) == slots


def test_dst_fall_back_does_not_repeat_the_slot() -> None:
    status = processed(BERLIN_DAILY, utc(2025, 10, 26, 0, 30))

    decision = decide(view(BERLIN_DAILY, status=status), [], utc(2025, 10, 26, 1, 45))

    assert decision.runs == []
    assert decision.skips == []
    # 02:30 CET on the 27th.
    assert decision.status["nextScheduleTime"] == "2025-10-27T01:30:00Z"
    assert decision.wake_at == utc(2025, 10, 27, 1, 30)


def test_dst_spring_forward_next_schedule_time() -> None:
    status = processed(BERLIN_DAILY, utc(2025, 3, 29, 12))

    decision = decide(view(BERLIN_DAILY, status=status), [], utc(2025, 3, 29, 12, 1))

    assert decision.status["nextScheduleTime"] == "2025-03-30T01:00:00Z"


# --- misc ----------------------------------------------------------------------------------------


def test_jobs_of_other_scheduled_jobs_are_ignored_everywhere() -> None:
    foreign = [
        job(
            "other-29460240", uid="uid-f1", owner_uid=OTHER_UID
        ),  # (one with H12's name: test_trust)
        job("backup-done", uid="uid-f2", owner_uid=OTHER_UID, state=SUCCEEDED, finished_at=H09),
    ]
    raw = spec(successfulJobsHistoryLimit=0, concurrencyPolicy="Forbid")

    decision = decide(view(raw, status=processed(raw, H11)), foreign, H12)

    assert names(decision.runs) == [slot_name(H12)]
    assert decision.deletions == []
    assert decision.status["activeCount"] == 1
    assert "lastSuccessfulTime" not in decision.status


def test_created_jobs_helper_matches_planned_runs() -> None:
    decision = decide(view(), [], H09)

    assert [(j.name, j.slot, j.state, j.owner_uid) for j in created_jobs(decision)] == [
        (slot_name(H09), H09, ACTIVE, UID)
    ]
    assert spec()["schedule"] == HOURLY


def test_status_without_processed_until_does_not_crash() -> None:
    decision = decide(view(status={"observedSchedule": trigger_key(spec())}), [], H12)

    assert "processedUntil" in decision.status
