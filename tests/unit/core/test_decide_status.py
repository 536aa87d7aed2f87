"""decide(), table by table (cronlease.core.decide): history limits, status fields, invalid specs,
and the Jobs of other ScheduledJobs.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import (
    HOURLY,
    NAMESPACE,
    OTHER_UID,
    UID,
    condition,
    created_jobs,
    event_reasons,
    job,
    names,
    processed,
    run_at_spec,
    seconds,
    slot_job,
    spec,
    trigger_key,
    utc,
    view,
)
from hourly import (
    ACTIVE,
    FAILED,
    H09,
    H10,
    H11,
    H12,
    HISTORY_CASES,
    IDLE_NOW,
    INVALID,
    SUCCEEDED,
    recent,
    slot_name,
    ts,
)

from cronlease.core.decide.history import RECENT_RUNS
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobInfo
from cronlease.core.names.naming import (
    TRIGGER_SCHEDULE,
)

# --- 12. history limits --------------------------------------------------------------------------


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


# --- 15. invalid specs ---------------------------------------------------------------------------


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
