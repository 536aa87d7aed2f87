"""decide(), table by table (cronlease.core.decide): due slots: catch-up, the upstream CronJob
bug, deadlines, suspend, concurrencyPolicy, a slot whose Job exists, Job names, DST.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    NAME,
    condition,
    event_reasons,
    names,
    processed,
    seconds,
    skip_counts,
    slot_job,
    spec,
    utc,
    view,
)
from hourly import (
    ACTIVE,
    BERLIN_DAILY,
    DAILY,
    DEADLINE,
    DONE_BAD,
    DONE_OK,
    FAILED,
    FORBID,
    FOREIGN,
    H09,
    H10,
    H11,
    H12,
    H13,
    ORPHAN,
    RUNNING,
    RUNNING_2,
    STOPPING,
    SUCCEEDED,
    SUPERSEDED,
    SUSPENDED,
    slot_name,
    ts,
    walk,
)

from cronlease.core.decide.decision import PlannedDeletion
from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.slots import MAX_CATCH_UP_RUNS, MAX_ENUMERATED_SLOTS
from cronlease.core.names.jobinfo import JobInfo, JobState
from cronlease.core.names.naming import (
    TRIGGER_SCHEDULE,
    manual_job_name,
)

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


# --- 16. DST (Europe/Berlin) ---------------------------------------------------------------------


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
