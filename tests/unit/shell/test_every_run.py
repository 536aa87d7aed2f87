"""Issue 33's findings about multi-step runs, on the pure supervisor and the run store: each test
failed on 50639a8 (the code the review read) and passes now.

The shell's side of the same findings (lost deletes, refused creations, a deleted Run, a taken
Lease, a standby's wake-ups) is in test_every_run_shell.py."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from builders import RUN_START as T0
from builders import STEP_TEMPLATE as TEMPLATE
from builders import bank_close, phases, run_through, status_at
from builders import run_view as view
from builders import step_job as job

from cronlease.core.bodies.stepjob import step_job_info, step_job_name
from cronlease.core.decide.supervision import (
    CREATE_REFUSED,
    CREATION_GRACE,
    LINGER_BOUND,
    STOPPING_MARGIN,
    Action,
    Escalation,
    RunView,
    StepJobPlan,
    supervise,
)
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import format_time
from cronlease.core.specs.policies import RetryPolicy
from cronlease.core.specs.steps import Compensation, OnFailure, Step, Steps
from cronlease.shell.runstore import RunStore

# Finding 1: a cancelled step outlives its Run.


def test_a_final_run_deletes_every_step_job_still_running_on_every_pass() -> None:
    """onFailure Stop: the Run is final (Failed) while a cancelled step's Job still runs. If the
    DELETE after the final status write was lost, the next pass must delete it again."""
    steps = bank_close(OnFailure.STOP)
    status = status_at(steps, ("snapshot", "Failed", 1), ("interest", "Cancelled", 1))
    status["phase"] = "Failed"
    still = [job("snapshot", state=JobState.FAILED), job("interest")]
    status = run_through(steps, [], T0, status).status  # with its summary (Ready, Stalled)
    plan = run_through(steps, still, T0, status)
    assert [j.name for j in plan.deletions] == ["interest-run-1"]
    assert plan.status == status  # nothing to write: only to delete


def test_an_invalid_run_deletes_its_running_steps() -> None:
    """A snapshot someone mangled: the run fails as InvalidRun, and its Jobs still go."""
    run = RunView("close-1", "bank", "run-uid", {"steps": "junk"}, {"phase": "Running"})
    plan = supervise(run, [job("snapshot")], {}, T0)
    assert plan.status["phase"] == "Failed"
    assert plan.escalation is Escalation.INVALID_RUN
    assert [j.name for j in plan.deletions] == ["snapshot-run-1"]


def test_a_final_run_lets_go_only_once_none_of_its_jobs_lives() -> None:
    steps = bank_close(OnFailure.STOP)
    status = status_at(steps, ("snapshot", "Failed", 1), ("interest", "Cancelled", 1))
    status["phase"] = "Failed"
    status["steps"][1]["jobUid"] = "uid-interest-run-1"
    held = RunView("close-1", "bank", "run-uid", view(steps).spec, status, supervised=True)
    running = [job("snapshot", state=JobState.FAILED), job("interest")]
    assert not supervise(held, running, {}, T0).release_run
    stopping = [running[0], job("interest", deleting=True, foreground=True)]
    assert not supervise(held, stopping, {}, T0).release_run
    assert supervise(held, running[:1], {}, T0).release_run


# Finding 3: restarts extend every heartbeat deadline.


def lease(renew: str, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "close-s1",
            "namespace": "bank",
            "resourceVersion": version,
            "labels": {"cronlease.io/run": "close-1", "cronlease.io/step": "interest"},
            "ownerReferences": [{"uid": "job-uid"}],
        },
        "spec": {"renewTime": renew},
    }


def test_a_restarted_operator_counts_a_heartbeat_from_its_renewal_not_from_its_start() -> None:
    """A hung step's Lease was last renewed 25 s before the operator (re)started; with a 30 s
    timeout it is lost 5 s later, not 30 s later: restarts never extend the deadline."""
    attempt = dataclasses.replace(job("interest"), name="close-s1", uid="job-uid")
    store = RunStore(lambda key: None, clock=lambda: T0)
    store.upsert_lease(lease("2026-12-01T01:59:35.000000Z"))
    assert store.heartbeats("bank", [attempt]) == {"close-s1": T0 - timedelta(seconds=25)}


def test_a_renewal_seen_later_still_counts_from_when_it_was_seen() -> None:
    """...while a clock that runs ahead still cannot defer the timeout past what was seen."""
    attempt = dataclasses.replace(job("interest"), name="close-s1", uid="job-uid")
    store = RunStore(lambda key: None, clock=lambda: T0)
    store.upsert_lease(lease("2099-01-01T00:00:00.000000Z"))
    assert store.heartbeats("bank", [attempt]) == {"close-s1": T0}


def test_a_heartbeat_attempt_whose_job_was_never_seen_is_abandoned_at_its_claims_deadline() -> None:
    """Found by the model-based test at 5,000 examples: a quota refused the attempt's Job after
    each of several restarts (each forgets the refusal), and it was made 48 s after its claim,
    past its 30 s deadline. A heartbeat counts from the claim whether or not the Job exists:
    the attempt is abandoned then, and what comes next waits for a Job made a moment before."""
    steps = bank_close(heartbeat=30)
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    done = [job("snapshot", state=JobState.SUCCEEDED)]
    before = run_through(steps, done, T0 + timedelta(seconds=29), status)
    assert phases(before)["interest"] == ("Running", 1)
    assert before.creations == [StepJobPlan("interest", Action.RUN, 1)]
    assert before.wake_at == T0 + timedelta(seconds=30)  # its deadline, Job or not
    late = T0 + timedelta(seconds=31)
    after = run_through(steps, done, late, status)
    interest = after.status["steps"][1]
    assert (interest["phase"], interest["reason"], interest["abandoned"]) == (
        "Retrying",
        "HeartbeatLost",
        [1],
    )
    assert interest["retryAt"] == format_time(late + CREATION_GRACE)  # not the 5 s backoff
    assert after.creations == []  # never made only to be abandoned
    last = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 2))
    failed = run_through(steps, done, late, last)
    assert failed.status["phase"] == "Compensating"
    assert failed.creations == []  # the compensation waits for a Job made a moment ago
    assert failed.wake_at == late + CREATION_GRACE
    graced = late + CREATION_GRACE + timedelta(seconds=1)
    undo = run_through(steps, done, graced, failed.status)
    assert undo.creations == [StepJobPlan("snapshot", Action.COMPENSATE, 1)]
    # It did show up after all: deleted, and the next attempt waits for it to go.
    shown = run_through(steps, [*done, job("interest")], graced, after.status)
    assert [j.name for j in shown.deletions] == ["interest-run-1"]
    assert phases(shown)["interest"] == ("Retrying", 1)
    assert shown.creations == []


def test_a_run_that_stops_on_a_heartbeat_never_seen_lets_go_after_the_creation_grace() -> None:
    steps = bank_close(OnFailure.STOP, heartbeat=30, retry=RetryPolicy(max_attempts=1))
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    done = [job("snapshot", state=JobState.SUCCEEDED)]
    late = T0 + timedelta(seconds=31)
    failed = run_through(steps, done, late, status)
    assert failed.status["phase"] == "Failed"
    held = RunView("close-1", "bank", "run-uid", view(steps).spec, failed.status, supervised=True)
    assert not supervise(held, done, {}, late).release_run
    graced = late + CREATION_GRACE + timedelta(seconds=1)
    assert supervise(held, done, {}, graced).release_run


# Finding 4: a step that leaves the supervisor's view is taken as ended while it runs.


def orphaned_step_job() -> dict[str, Any]:
    """A step Job as the leader made it, after a user removed its owner reference."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": step_job_name("close", "close-1", "interest", Action.RUN, 1),
            "namespace": "bank",
            "uid": "job-uid",
            "resourceVersion": "7",
            "labels": {
                "cronlease.io/run": "close-1",
                "cronlease.io/step": "interest",
                "cronlease.io/action": "run",
                "cronlease.io/attempt": "1",
            },
            "annotations": {"cronlease.io/leader": "a", "cronlease.io/fencing-token": "1"},
        },
        "spec": {},
    }


def test_a_step_job_whose_owner_reference_was_removed_is_still_its_attempt() -> None:
    info = step_job_info(orphaned_step_job())
    assert info.trusted
    assert info.run_uid == ""
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    status["steps"][1]["jobUid"] = "job-uid"
    plan = supervise(view(steps, status), [job("snapshot", state=JobState.SUCCEEDED), info], {}, T0)
    assert phases(plan)["interest"] == ("Running", 1)  # it runs: not lost, not redone
    assert plan.creations == []


def test_a_step_deleted_in_the_background_is_not_retried_while_its_pods_may_run() -> None:
    """`kubectl delete job` (background): the attempt is lost. Its pods run on while the Job is
    in view (the job controller ignores a Job being deleted, and a deletion's propagation cannot
    be changed once it started), and after it is gone for their grace period: the next attempt
    waits for both, and the status remembers it across restarts."""
    steps = bank_close(retry=RetryPolicy(max_attempts=2, initial_seconds=0))
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    background = [
        job("snapshot", state=JobState.SUCCEEDED),
        job("interest", deleting=True, grace=5),
    ]
    plan = run_through(steps, background, T0, status)
    assert phases(plan)["interest"] == ("Retrying", 1)
    assert plan.deletions == []  # deleting already: it cannot be asked to wait for its pods
    assert plan.status["steps"][1]["stopping"] == {"attempt": 1, "grace": 5}
    later = T0 + timedelta(seconds=5)
    held = run_through(steps, background, later, plan.status)
    assert held.creations == []  # still in view
    gone = run_through(steps, background[:1], later, held.status)
    assert gone.creations == []  # gone, its pods being stopped by the garbage collector
    assert gone.wake_at == later + timedelta(seconds=5) + STOPPING_MARGIN
    stopped = run_through(steps, background[:1], gone.wake_at, gone.status)
    assert stopped.creations == [StepJobPlan("interest", Action.RUN, 2)]
    assert "stopping" not in stopped.status["steps"][1]


def test_no_compensation_starts_while_a_stopped_steps_job_lives() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Failed", 2))
    status["phase"] = "Compensating"
    status["steps"][1]["finishedAt"] = "2026-12-01T02:00:00Z"
    lingering = [job("snapshot", state=JobState.SUCCEEDED), job("interest", 2, deleting=True)]
    plan = run_through(steps, lingering, T0 + timedelta(seconds=1), status)
    assert plan.creations == []
    late = run_through(steps, lingering, T0 + LINGER_BOUND, status)
    assert late.creations == []  # still never beside it, but escalated: someone must look
    assert late.escalation is Escalation.ATTEMPT_LINGERING


# Finding 5: a step whose Job the API refuses wedges its Run forever.


def test_a_refused_creation_fails_the_attempt_and_the_retry_policy_bounds_it() -> None:
    steps = bank_close(retry=RetryPolicy(max_attempts=2, initial_seconds=5))
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    done = [job("snapshot", state=JobState.SUCCEEDED)]
    quota = {("interest", Action.RUN, 1): ("exceeded quota: compute", False)}
    plan = supervise(view(steps, status), done, {}, T0, refused=quota)
    entry = plan.status["steps"][1]
    assert (entry["phase"], entry["reason"]) == ("Retrying", CREATE_REFUSED)
    assert "exceeded quota" in entry["message"]
    later = T0 + timedelta(seconds=5)
    second = supervise(view(steps, plan.status), done, {}, later, refused=quota)
    assert second.creations == [StepJobPlan("interest", Action.RUN, 2)]
    again = {**quota, ("interest", Action.RUN, 2): ("exceeded quota: compute", False)}
    last = supervise(view(steps, second.status), done, {}, later, refused=again)
    assert phases(last)["interest"] == ("Failed", 2)
    assert last.escalation is Escalation.RETRIES_EXHAUSTED
    assert last.status["phase"] == "Compensating"  # and the run moves on: never wedged


def test_a_template_the_server_rejects_is_not_retried() -> None:
    steps = bank_close(retry=RetryPolicy(max_attempts=5, initial_seconds=0))
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    invalid = {("interest", Action.RUN, 1): ("spec.template: Invalid value", True)}
    done = [job("snapshot", state=JobState.SUCCEEDED)]
    plan = supervise(view(steps, status), done, {}, T0, refused=invalid)
    assert phases(plan)["interest"] == ("Failed", 1)
    assert plan.escalation is Escalation.NOT_RETRYABLE


# Finding 9: Replace, CancelOther or a user's deletion of an active multi-step Run.


def test_a_run_deleted_while_it_runs_stops_its_steps_and_compensates_what_finished() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    jobs = [job("snapshot", state=JobState.SUCCEEDED), job("interest")]
    plan = supervise(view(steps, status, deleting=True), jobs, {}, T0)
    assert plan.status["phase"] == "Compensating"
    assert phases(plan)["interest"] == ("Cancelled", 1)
    assert [j.name for j in plan.deletions] == ["interest-run-1"]
    assert plan.escalation is None  # someone meant it
    cancelled = {c["type"]: c["reason"] for c in plan.status["conditions"]}
    assert cancelled == {
        "Cancelled": "RunDeleted",
        "Ready": "Compensating",  # and Reconciling, until the compensations are done
        "Reconciling": "Compensating",
    }
    assert [e.action for e in plan.log] == ["Cancelled", "Cancelled"]
    gone = [jobs[0]]
    compensating = supervise(view(steps, plan.status, deleting=True), gone, {}, T0)
    assert compensating.creations == [StepJobPlan("snapshot", Action.COMPENSATE, 1)]
    undone = [*gone, job("snapshot", state=JobState.SUCCEEDED, action=Action.COMPENSATE)]
    final = supervise(view(steps, compensating.status, deleting=True), undone, {}, T0)
    assert final.status["phase"] == "Compensated"


def test_a_run_deleted_with_nothing_to_compensate_ends_cancelled() -> None:
    steps = Steps((Step("only", TEMPLATE),))
    status = status_at(steps, ("only", "Running", 1))
    plan = supervise(view(steps, status, deleting=True), [job("only")], {}, T0)
    assert plan.status["phase"] == "Cancelled"
    assert [j.name for j in plan.deletions] == ["only-run-1"]
    assert plan.status["conditions"][-1]["reason"] == "Cancelled"  # Succeeded=False


def test_a_run_deleted_before_it_started_is_cancelled_at_once() -> None:
    steps = Steps((Step("only", TEMPLATE, compensate=Compensation(TEMPLATE, RetryPolicy())),))
    plan = supervise(view(steps, {}, deleting=True), [], {}, T0)
    assert plan.status["phase"] == "Cancelled"
    assert plan.creations == []
