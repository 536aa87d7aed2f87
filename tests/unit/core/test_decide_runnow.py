"""decide(), table by table (cronlease.core.decide): run-now and runAt (one-off)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from builders import (
    NAME,
    after_apply,
    condition,
    job,
    names,
    run_at_spec,
    seconds,
    skip_counts,
    spec,
    trigger_key,
    utc,
    view,
)
from hourly import (
    ACTIVE,
    DEADLINE,
    DONE_OK,
    FAILED,
    H11,
    H12,
    H13,
    IDLE_NOW,
    RUN_AT,
    RUNNING,
    SUCCEEDED,
    SUSPENDED,
    completed,
    run_now_view,
    ts,
)

from cronlease.core.decide.decision import PlannedDeletion
from cronlease.core.decide.reconcile import decide
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import (
    TRIGGER_MANUAL,
    TRIGGER_SCHEDULE,
    manual_job_name,
)

# --- 10. run-now ---------------------------------------------------------------------------------


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
