"""supervise(), table by table (issue 17): the pure supervisor of multi-step Runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from builders import RUN_START as T0
from builders import STEP_TEMPLATE as TEMPLATE
from builders import bank_close, phases, run_through, status_at
from builders import run_view as view  # the Run close-1 of namespace bank
from builders import step_job as job

from cronlease.core.decide.supervision import (
    Action,
    Escalation,
    RunView,
    StepJob,
    StepJobPlan,
    supervise,
)
from cronlease.core.names.jobinfo import JobState
from cronlease.core.specs.policies import RetryPolicy, SpecError
from cronlease.core.specs.spec import parse_spec
from cronlease.core.specs.steps import Compensation, OnFailure, Step, Steps


def test_a_new_run_claims_its_first_steps_and_creates_their_jobs_after() -> None:
    plan = run_through(bank_close(), [], T0)
    assert phases(plan) == {
        "snapshot": ("Running", 1),
        "interest": ("Pending", 0),
        "publish": ("Pending", 0),
    }
    assert plan.status["phase"] == "Running"
    assert plan.creations == [StepJobPlan("snapshot", Action.RUN, 1)]


def test_a_step_starts_once_the_steps_it_depends_on_succeeded() -> None:
    first = run_through(bank_close(), [], T0)
    plan = run_through(bank_close(), [job("snapshot", state=JobState.SUCCEEDED)], T0, first.status)
    assert phases(plan)["snapshot"] == ("Succeeded", 1)
    assert phases(plan)["interest"] == ("Running", 1)
    assert plan.creations == [StepJobPlan("interest", Action.RUN, 1)]


def test_a_claimed_attempt_whose_job_was_never_created_is_created_not_claimed_again() -> None:
    """A crash between the claim (status) and the creation: the same attempt's Job, by name."""
    claimed = run_through(bank_close(), [], T0).status
    plan = run_through(bank_close(), [], T0 + timedelta(minutes=5), claimed)
    assert phases(plan)["snapshot"] == ("Running", 1)
    assert plan.creations == [StepJobPlan("snapshot", Action.RUN, 1)]


def test_a_failed_attempt_is_retried_after_its_backoff_as_the_next_attempt() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    failed = [job("snapshot", state=JobState.SUCCEEDED), job("interest", state=JobState.FAILED)]
    plan = run_through(steps, failed, T0, status)
    assert phases(plan)["interest"] == ("Retrying", 1)
    assert plan.creations == []
    assert plan.wake_at == T0 + timedelta(seconds=5)
    later = run_through(steps, failed, T0 + timedelta(seconds=5), plan.status)
    assert phases(later)["interest"] == ("Running", 2)
    assert later.creations == [StepJobPlan("interest", Action.RUN, 2)]
    assert phases(later)["snapshot"] == ("Succeeded", 1)  # a finished step is never redone


def test_a_silent_heartbeat_abandons_the_attempt_and_its_late_result_never_counts() -> None:
    steps = bank_close(heartbeat=30)
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    running = [job("snapshot", state=JobState.SUCCEEDED), job("interest")]
    renewed = {"interest-run-1": T0 + timedelta(seconds=10)}
    quiet = supervise(view(steps, status), running, renewed, T0 + timedelta(seconds=40))
    assert phases(quiet)["interest"] == ("Running", 1)
    assert quiet.wake_at == T0 + timedelta(seconds=40)  # renewal + timeout
    lost = supervise(view(steps, status), running, renewed, T0 + timedelta(seconds=41))
    assert phases(lost)["interest"] == ("Retrying", 1)
    assert [j.name for j in lost.deletions] == ["interest-run-1"]
    # Attempt 1's Job is being deleted, its pod still stopping: attempt 2 waits for it.
    stopping = [running[0], job("interest", deleting=True, foreground=True)]
    waiting = run_through(steps, stopping, T0 + timedelta(seconds=46), lost.status)
    assert phases(waiting)["interest"] == ("Retrying", 1)
    assert waiting.creations == []
    restarted = run_through(steps, running[:1], T0 + timedelta(seconds=46), lost.status)
    assert phases(restarted)["interest"] == ("Running", 2)
    # Attempt 1's pod finishes after all: not counted, said once.
    late = [*running[:1], job("interest", state=JobState.SUCCEEDED), job("interest", 2)]
    plan = run_through(steps, late, T0 + timedelta(seconds=50), restarted.status)
    assert phases(plan)["interest"] == ("Running", 2)
    assert [e.action for e in plan.log] == ["IgnoredStaleResult"]
    again = run_through(steps, late, T0 + timedelta(seconds=51), plan.status)
    assert again.log == []
    # ...and its heartbeat neither: only the current attempt's Lease is read.
    stale_beat = {"interest-run-1": T0 + timedelta(seconds=100)}
    silent = supervise(view(steps, plan.status), late, stale_beat, T0 + timedelta(seconds=90))
    assert (
        phases(silent)["interest"] == ("Retrying", 2) or phases(silent)["interest"][0] == "Failed"
    )


def test_a_job_deleted_by_someone_else_fails_its_attempt() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Running", 1))
    plan = run_through(steps, [job("snapshot", deleting=True)], T0, status)
    entry = plan.status["steps"][0]
    assert (entry["phase"], entry["reason"]) == ("Failed", "JobDeleted")  # snapshot: one attempt


def test_a_step_past_its_attempts_stops_the_others_and_compensates_newest_first() -> None:
    steps = Steps(
        (
            Step("a", TEMPLATE, compensate=Compensation(TEMPLATE, RetryPolicy(max_attempts=1))),
            Step("b", TEMPLATE, compensate=Compensation(TEMPLATE, RetryPolicy(max_attempts=1))),
            Step("c", TEMPLATE, ("a", "b")),
            Step("slow", TEMPLATE),
        )
    )
    status = status_at(steps, ("a", "Succeeded", 1), ("b", "Succeeded", 1), ("c", "Running", 1))
    status["steps"][1]["order"] = 2  # b finished after a
    status["steps"][3].update(phase="Running", attempt=1)
    jobs = [
        job("a", state=JobState.SUCCEEDED),
        job("b", state=JobState.SUCCEEDED),
        job("c", state=JobState.FAILED),
        job("slow"),
    ]
    plan = run_through(steps, jobs, T0, status)
    assert plan.status["phase"] == "Compensating"
    assert plan.escalation is Escalation.RETRIES_EXHAUSTED
    assert phases(plan)["slow"] == ("Cancelled", 1)
    assert [j.name for j in plan.deletions] == ["slow-run-1"]
    assert plan.creations == []  # nothing is undone while another step still runs
    again = run_through(steps, jobs, T0, plan.status)
    assert [j.name for j in again.deletions] == ["slow-run-1"]  # until it is going
    # Deleted by someone else in the background meanwhile: not deleted again.
    elsewhere = [*jobs[:3], job("slow", deleting=True)]
    assert run_through(steps, elsewhere, T0, plan.status).deletions == []
    going = [*jobs[:3], job("slow", deleting=True, foreground=True)]
    assert run_through(steps, going, T0, plan.status).deletions == []
    jobs = jobs[:3]  # its Job is gone
    plan = run_through(steps, jobs, T0, plan.status)
    assert plan.creations == [StepJobPlan("b", Action.COMPENSATE, 1)]  # the newest first
    undone_b = [*jobs, job("b", state=JobState.SUCCEEDED, action=Action.COMPENSATE)]
    plan = run_through(steps, undone_b, T0, plan.status)
    assert plan.creations == [StepJobPlan("a", Action.COMPENSATE, 1)]  # then the older one
    undone = [*undone_b, job("a", state=JobState.SUCCEEDED, action=Action.COMPENSATE)]
    plan = run_through(steps, undone, T0, plan.status)
    assert plan.status["phase"] == "Compensated"
    types = {c["type"]: (c["status"], c["reason"]) for c in plan.status["conditions"]}
    assert types == {
        "Escalated": ("True", "RetriesExhausted"),
        "Compensated": ("True", "Compensated"),
        "Succeeded": ("False", "Compensated"),
        "Ready": ("False", "Compensated"),
        "Stalled": ("True", "Compensated"),
    }
    assert plan.creations == []


def test_a_compensation_that_fails_ends_the_run_compensation_failed() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Failed", 2))
    status["phase"] = "Compensating"
    status["steps"][0]["compensation"] = {"phase": "Running", "attempt": 1}
    jobs = [job("snapshot", state=JobState.FAILED, action=Action.COMPENSATE)]
    plan = run_through(steps, jobs, T0, status)
    assert plan.status["phase"] == "CompensationFailed"
    assert plan.escalation is Escalation.COMPENSATION_FAILED


@pytest.mark.parametrize(
    ("reason", "on_failure", "phase", "escalation"),
    [
        ("PodFailurePolicy", OnFailure.COMPENSATE, "Compensating", Escalation.NOT_RETRYABLE),
        ("BackoffLimitExceeded", OnFailure.STOP, "Retrying", None),
        ("PodFailurePolicy", OnFailure.STOP, "Failed", Escalation.NOT_RETRYABLE),
    ],
)
def test_failures_the_job_marks_not_retryable_are_not_retried(
    reason: str, on_failure: OnFailure, phase: str, escalation: Escalation | None
) -> None:
    steps = bank_close(on_failure)
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    jobs = [job("snapshot", state=JobState.SUCCEEDED), job("interest", state=JobState.FAILED)]
    jobs[1] = job("interest", state=JobState.FAILED, failure_reason=reason)
    plan = run_through(steps, jobs, T0, status)
    run_phase = plan.status["phase"]
    assert (phases(plan)["interest"][0] if phase == "Retrying" else run_phase) == phase
    assert plan.escalation is escalation


def test_the_bank_close_succeeds_when_every_step_did() -> None:
    steps = bank_close()
    status = status_at(
        steps, ("snapshot", "Succeeded", 1), ("interest", "Succeeded", 1), ("publish", "Running", 1)
    )
    jobs = [job(name, state=JobState.SUCCEEDED) for name in ("snapshot", "interest", "publish")]
    plan = run_through(steps, jobs, T0, status)
    assert plan.status["phase"] == "Succeeded"
    assert plan.escalation is None


def test_only_jobs_of_settled_attempts_are_released() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 2))
    jobs = [
        job("snapshot", state=JobState.SUCCEEDED, held=True),
        job("interest", 1, state=JobState.FAILED, held=True),
        job("interest", 2, held=True),
    ]
    plan = run_through(steps, jobs, T0, status)
    assert sorted(j.name for j in plan.releases) == ["interest-run-1", "snapshot-run-1"]
    final = {**status, "phase": "Compensated"}
    ended = supervise(view(steps, final), jobs, {}, T0)
    assert len(ended.releases) == 3  # a final run settles every attempt
    summary = ("conditions", "observedGeneration")  # a run from before they were written
    assert {k: v for k, v in ended.status.items() if k not in summary} == final
    assert supervise(view(steps, ended.status), jobs, {}, T0).status == ended.status


def test_jobs_the_leader_did_not_write_never_count() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Running", 1))
    forged = [
        job("snapshot", state=JobState.SUCCEEDED, trusted=False),
        job("snapshot", state=JobState.SUCCEEDED, run_uid="another-run"),
    ]
    plan = run_through(steps, forged, T0, status)
    assert phases(plan)["snapshot"] == ("Running", 1)
    assert plan.creations == [StepJobPlan("snapshot", Action.RUN, 1)]


def test_a_mangled_status_entry_reads_as_a_step_not_started() -> None:
    steps = bank_close()
    status = {"phase": "Running", "steps": [{"name": "snapshot", "phase": "Dancing"}, "junk"]}
    plan = run_through(steps, [], T0, status)
    assert phases(plan)["snapshot"] == ("Running", 1)


def test_a_run_whose_snapshot_is_unreadable_fails_once_and_escalates() -> None:
    plan = supervise(RunView("r", "ns", "uid", {"steps": "nope"}, {}), [], {}, T0)
    assert plan.status["phase"] == "Failed"
    assert plan.escalation is Escalation.INVALID_RUN
    again = supervise(RunView("r", "ns", "uid", {"steps": "nope"}, plan.status), [], {}, T0)
    assert again.escalation is None


def steps_spec(*steps: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"schedule": "0 2 * * *", "steps": list(steps), **spec}


def a(name: str, *after: str) -> dict[str, Any]:
    return {"name": name, "dependsOn": list(after), "jobTemplate": TEMPLATE}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (steps_spec(a("x", "y"), a("y", "x")), "spec.steps: dependsOn makes a cycle: x -> y -> x"),
        (steps_spec(a("x", "x")), "spec.steps[0].dependsOn: a step cannot depend on itself"),
        (steps_spec(a("x", "z")), "spec.steps[0].dependsOn: no step is named 'z'"),
        (steps_spec(a("x"), a("x")), "spec.steps[1].name: 'x' is used twice"),
        (steps_spec(*(a(f"s{i}") for i in range(21))), "spec.steps: must be a list of 1 to 20"),
        (steps_spec(a("X")), "spec.steps[0].name: must be a lowercase DNS label"),
        ({**steps_spec(a("x")), "jobTemplate": TEMPLATE}, "spec: set exactly one of jobTemplate"),
        ({**steps_spec(a("x")), "deadLetter": {}}, "spec.deadLetter: not with steps"),
        (
            {"schedule": "0 2 * * *", "jobTemplate": TEMPLATE, "onFailure": "Stop"},
            "spec.onFailure: only with spec.steps",
        ),
        (steps_spec(a("x"), onFailure="Retry"), "spec.onFailure: must be Compensate or Stop"),
        (
            steps_spec({**a("x"), "heartbeat": {"timeoutSeconds": 0}}),
            "spec.steps[0].heartbeat.timeoutSeconds: must be an integer from 1",
        ),
    ],
)
def test_bad_steps_are_refused_naming_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_spec("close", spec)
    assert str(refused.value).startswith(message), refused.value


def test_the_spec_retry_is_each_steps_default_and_a_step_may_override_it() -> None:
    spec = parse_spec(
        "close",
        steps_spec(a("x"), {**a("y"), "retry": {"maxAttempts": 4}}, retry={"maxAttempts": 3}),
    )
    assert spec.retry is None  # no run-level retries: steps retry themselves
    assert spec.steps is not None
    assert [step.retry.max_attempts for step in spec.steps.steps] == [3, 4]


def test_a_runs_status_stays_small_at_twenty_steps() -> None:
    """The worst case the bounds allow: 20 steps, each retried and compensated with long step
    names, every message at its limit, a full recovery log. (About 21 KB: design note 84.)"""
    import orjson

    undo = Compensation(TEMPLATE, RetryPolicy(max_attempts=10))
    many = Steps(
        tuple(
            Step(
                f"{'x' * 36}-{i:02d}", TEMPLATE, retry=RetryPolicy(max_attempts=10), compensate=undo
            )
            for i in range(20)
        )
    )
    status: dict[str, Any] = {}
    jobs: list[StepJob] = []
    now = T0
    for attempt in range(1, 11):  # every step fails 9 times, then succeeds
        plan = supervise(view(many, status), jobs, {}, now)
        status = plan.status
        state = JobState.SUCCEEDED if attempt == 10 else JobState.FAILED
        jobs = [job(s.name, attempt, state=state, finished_at=now) for s in many.steps]
        now += timedelta(hours=1)
        status = supervise(view(many, status), jobs, {}, now).status
    for entry in status["steps"]:  # and every field at its longest
        entry.update(message="m" * 256, reason="HeartbeatLost", abandoned=list(range(1, 10)))
        entry["compensation"] = {
            **{
                k: entry.get(k, "2026-12-01T12:00:00Z")
                for k in ("attempt", "startedAt", "finishedAt", "reason", "message")
            },
            "phase": "Failed",
        }
    size = len(orjson.dumps(status))
    print(f"a Run's status at 20 steps, worst case: {size} bytes")
    assert len(status["recoveryLog"]) == 20
    assert size < 24_000, size


def test_a_cancelled_attempt_never_seen_gets_time_to_show_before_compensation() -> None:
    """Its Job may have been created a moment ago, its watch event not in yet: compensating at
    once could undo a step while another still runs."""
    undo = Compensation(TEMPLATE, RetryPolicy(max_attempts=1))
    steps = Steps(
        (
            Step("a", TEMPLATE, compensate=undo),
            Step("b", TEMPLATE, ("a",)),
            Step("c", TEMPLATE, ("a",)),
        )
    )
    status = status_at(steps, ("a", "Succeeded", 1), ("b", "Running", 1), ("c", "Running", 1))
    jobs = [job("a", state=JobState.SUCCEEDED), job("b", state=JobState.FAILED)]  # c unseen
    plan = run_through(steps, jobs, T0, status)
    assert phases(plan)["c"] == ("Cancelled", 1)
    assert plan.creations == []
    assert plan.wake_at == T0 + timedelta(seconds=30)
    seen = run_through(steps, [*jobs, job("c")], T0 + timedelta(seconds=1), plan.status)
    assert [j.name for j in seen.deletions] == ["c-run-1"]  # it showed up: deleted first
    assert seen.creations == []
    later = run_through(steps, jobs, T0 + timedelta(seconds=30), plan.status)
    assert later.creations == [StepJobPlan("a", Action.COMPENSATE, 1)]  # never came: go on


def test_an_attempt_whose_job_was_seen_and_vanished_is_lost_not_made_again() -> None:
    """Its finalizer removed and the Job deleted (a tenant may): the attempt failed; the same
    attempt's Job is never created twice."""
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Running", 1))
    seen = run_through(steps, [job("snapshot")], T0, status)
    assert seen.status["steps"][0]["jobUid"] == "uid-snapshot-run-1"
    gone = run_through(steps, [], T0, seen.status)
    assert gone.status["steps"][0]["reason"] == "JobDeleted"
    assert gone.creations == []


def test_a_name_someone_else_holds_fails_the_attempt() -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    jobs = [job("snapshot", state=JobState.SUCCEEDED)]
    plan = supervise(view(steps, status), jobs, {}, T0, frozenset({("interest", Action.RUN, 1)}))
    entry = plan.status["steps"][1]
    assert (entry["phase"], entry["reason"]) == ("Retrying", "NameConflict")  # attempt 2 next
    assert plan.creations == []


@pytest.mark.parametrize(
    "mangled",
    [{"compensation": "x"}, {"abandoned": 7}, {"order": "first"}, {"compensation": {"phase": 1}}],
)
def test_a_mangled_field_of_a_step_entry_is_read_as_absent(mangled: dict[str, Any]) -> None:
    steps = bank_close()
    status = status_at(steps, ("snapshot", "Succeeded", 1), ("interest", "Running", 1))
    status["steps"][0].update(mangled)
    plan = run_through(steps, [job("snapshot", state=JobState.SUCCEEDED)], T0, status)
    assert phases(plan)["interest"] == ("Running", 1)


def test_step_job_names_leave_room_for_their_pods_names() -> None:
    """The API server cuts a pod's generateName to 58 characters: "<job>-" must fit whole, or
    the heartbeat policy would not know the attempt's own pods."""
    from cronlease.core.bodies.stepjob import MAX_STEP_JOB_NAME, step_job_name

    name = step_job_name("x" * 52, "x" * 52 + "-29412000", "interest", Action.RUN, 1)
    assert len(name) == MAX_STEP_JOB_NAME == 57
    other = step_job_name("x" * 52, "x" * 52 + "-29412000", "interest", Action.RUN, 2)
    assert name != other
