"""The chaos auditor's audit of runs and attempts (hack/chaos_runs.py): each flaw it must find,
planted in Jobs as the API server would show them."""

from __future__ import annotations

from typing import Any

from chaos_runs import Seen, UserDeleted, audit_runs, seen

NOW = 1_000.0  # the auditor's clock when it audits


def job(
    attempt: int,
    *,
    run: str = "c0003-100",
    uid: str | None = None,
    ended: str | None = "Failed",
    reason: str = "BackoffLimitExceeded",
    max_attempts: int = 3,
    token: int = 1,
    dead_letter: bool = False,
) -> dict[str, Any]:
    labels = {"cronlease.io/scheduledjob": "c0003", "cronlease.io/run": run}
    labels["cronlease.io/attempt"] = str(attempt)
    if dead_letter:
        labels["cronlease.io/dead-letter"] = "true"
    annotations = {
        "cronlease.io/scheduled-at": "2026-12-01T14:00:00Z",
        "cronlease.io/leader": "chaos-0",
        "cronlease.io/fencing-token": str(token),
    }
    if max_attempts:
        annotations["cronlease.io/max-attempts"] = str(max_attempts)
    conditions = [{"type": ended, "status": "True", "reason": reason}] if ended else []
    return {
        "metadata": {
            "name": run if attempt == 1 else f"c0003-a{attempt}",
            "uid": uid or f"{run}/{attempt}",
            "labels": labels,
            "annotations": annotations,
            "creationTimestamp": "2026-12-01T14:00:00Z",
        },
        "status": {"conditions": conditions},
    }


def sighted(*jobs: dict[str, Any], at: float = 100.0) -> list[Seen]:
    """Each Job first seen `at` (already ended if it says so), one second after the other."""
    found = [seen(obj, at + index) for index, obj in enumerate(jobs)]
    assert all(found)
    return [entry for entry in found if entry is not None]


def audit(jobs: list[Seen], faults: tuple[float, ...] = ()) -> dict[str, Any]:
    return audit_runs(jobs, NOW, faults)


def test_a_run_that_succeeds_on_its_second_attempt_is_clean() -> None:
    result = audit(sighted(job(1), job(2, ended="Complete")))
    assert result["succeeded_on_attempt"] == {"2": 1}
    assert result["retries_created"] == 1
    for key in ("duplicated_attempts", "attempt_gaps", "attempts_over_max", "lost_attempts"):
        assert result[key] == 0, key


def test_a_failed_attempt_with_attempts_left_and_no_successor_is_lost() -> None:
    assert audit(sighted(job(1)))["lost_attempts"] == 1
    # ... unless it failed too recently for the operator to have acted
    recent = audit(sighted(job(1), at=NOW - 1))
    assert (recent["lost_attempts"], recent["runs_by_verdict"]) == (
        0,
        {"still going at the end: its latest attempt failed just before": 1},
    )


def test_a_run_whose_failed_attempt_the_user_deleted_has_ended() -> None:
    jobs = sighted(job(1))
    jobs[0].user_deleted = UserDeleted.WAITING
    result = audit(jobs)
    assert result["lost_attempts"] == 0
    assert result["runs_by_verdict"] == {
        "cancelled: failed attempt deleted while the run waited": 1
    }


def test_attempts_twice_with_a_gap_or_beyond_the_maximum_are_found() -> None:
    twice = audit(sighted(job(1), job(2, uid="a"), job(2, uid="b", ended="Complete")))
    assert twice["duplicated_attempts"] == 1
    gap = audit(sighted(job(1), job(3, ended="Complete")))
    assert gap["attempt_gaps"] == 1
    over = audit(sighted(job(1, max_attempts=1), job(2, ended="Complete", max_attempts=1)))
    assert over["attempts_over_max"] == 1
    # without spec.retry a run is one Job
    plain = audit(sighted(job(1, max_attempts=0), job(2, ended="Complete", max_attempts=0)))
    assert plain["attempts_over_max"] == 1


def test_a_run_out_of_attempts_must_be_labelled_a_dead_letter() -> None:
    jobs = sighted(job(1), job(2), job(3))
    assert audit(jobs)["exhausted_not_dead_lettered"] == 1
    jobs[2].observe(job(3, dead_letter=True), 200.0)  # the label, seen in a later event
    labelled = audit(jobs)
    assert labelled["exhausted_not_dead_lettered"] == 0
    assert labelled["runs_by_verdict"] == {"dead-lettered": 1}


def test_a_final_failure_is_not_retried() -> None:
    final = job(1, reason="PodFailurePolicy", dead_letter=True)
    assert audit(sighted(final))["runs_by_verdict"] == {"dead-lettered (not retryable)": 1}
    retried = audit(sighted(final, job(2, ended="Complete")))
    assert retried["attempts_after_final"] == 1
    after_success = audit(sighted(job(1, ended="Complete"), job(2, ended="Complete")))
    assert after_success["attempts_after_final"] == 1


def test_a_leader_fault_between_two_attempts_is_counted() -> None:
    # attempt 1 seen failed at 100, attempt 2 first seen at 101 under a new token
    jobs = sighted(job(1), job(2, ended="Complete", token=2))
    result = audit(jobs, faults=(100.5,))
    assert (result["runs_waiting_at_leader_fault"], result["next_attempt_by_new_leader"]) == (1, 1)
    assert audit(jobs, faults=(99.0, 102.0))["runs_waiting_at_leader_fault"] == 0


def test_a_multi_step_run_ends_with_its_final_phase_not_with_job_conditions() -> None:
    run = {**job(1, ended=None, max_attempts=0), "kind": "Run", "status": {"phase": "Running"}}
    entry = seen(run, 100.0)
    assert entry is not None
    assert entry.ended is None
    # A Run's conditions are not a Job's: Complete/Failed never appear, its phase says it.
    entry.observe({**run, "status": {"phase": "Compensating"}}, 101.0)
    assert entry.ended is None
    entry.observe({**run, "status": {"phase": "Compensated"}}, 102.0)
    assert (entry.ended, entry.succeeded, entry.failure_reason) == (102.0, False, "Compensated")
    later = seen({**run, "status": {"phase": "Succeeded"}}, 103.0)
    assert later is not None
    assert (later.ended, later.succeeded) == (103.0, True)
