"""Ready, Reconciling and Stalled (cronlease.conditions) as the kstatus conventions want them, on
every kind the operator writes status for, read by the rules kstatus applies to a kind it has no
built-in rules for. tests/e2e/test_kstatus.py reads real objects through the library itself
(hack/kstatus); these tests cover every state without a cluster."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
from builders import after_apply, condition, processed, run_at_spec, spec, utc, view

from cronlease.conditions import READY, RECONCILING, STALLED, Summary, summarize
from cronlease.decision import Decision, ScheduledJobView
from cronlease.jobinfo import JobInfo, JobState
from cronlease.naming import ANNOTATION_RESUME
from cronlease.reconcile import decide
from cronlease.requestplan import plan_waiting
from cronlease.runrequest import RunRequestView, summarize_request
from cronlease.steps import OnFailure, Step, Steps, snapshot
from cronlease.supervision import Action as StepAction
from cronlease.supervision import RunView, StepJob, supervise

H9 = utc(2026, 1, 5, 9)
H = [utc(2026, 1, 5, hour) for hour in range(24)]


def kstatus(obj: dict[str, Any]) -> str:
    """What sigs.k8s.io/cli-utils v0.37.2's status.Compute says of a custom kind: deletion, then
    an unobserved generation, then Reconciling or Stalled (True), then Ready, else Current."""
    metadata, status = obj.get("metadata", {}), obj.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return "Terminating"
    observed = status.get("observedGeneration")
    if "generation" in metadata and observed is not None and observed != metadata["generation"]:
        return "InProgress"
    conditions = status.get("conditions") or []
    for item in conditions:
        if item["type"] == RECONCILING and item["status"] == "True":
            return "InProgress"
        if item["type"] == STALLED and item["status"] == "True":
            return "Failed"
    for item in conditions:
        if item["type"] == READY:
            return "Current" if item["status"] == "True" else "InProgress"
    return "Current"


def read(status: dict[str, Any], generation: int = 1) -> str:
    return kstatus({"metadata": {"generation": generation}, "status": status})


def summary_of(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Ready, Reconciling and Stalled: (status, reason) of those present."""
    return {
        c["type"]: (c["status"], c["reason"])
        for c in status.get("conditions", [])
        if c["type"] in (READY, RECONCILING, STALLED)
    }


def assert_conventions(status: dict[str, Any], generation: int) -> None:
    """Ready always there; the abnormal-true ones only when True; every one of the generation."""
    kinds = summary_of(status)
    assert READY in kinds
    assert all(kinds[t][0] == "True" for t in (RECONCILING, STALLED) if t in kinds), kinds
    assert not (RECONCILING in kinds and STALLED in kinds), kinds
    assert status["observedGeneration"] == generation
    assert {
        c["observedGeneration"]
        for c in status["conditions"]
        if c["type"] in (READY, RECONCILING, STALLED)
    } == {generation}


# --- summarize() ---------------------------------------------------------------------------------


def test_summarize_removes_the_abnormal_conditions_that_are_no_longer_true() -> None:
    conditions: list[dict[str, Any]] = []
    summarize(conditions, Summary.STALLED, "InvalidSpec", "bad", 2, H9)
    assert summary_of({"conditions": conditions}) == {
        READY: ("False", "InvalidSpec"),
        STALLED: ("True", "InvalidSpec"),
    }
    summarize(conditions, Summary.RECONCILING, "Running", "busy", 3, H9 + timedelta(seconds=1))
    assert summary_of({"conditions": conditions}) == {
        READY: ("False", "Running"),
        RECONCILING: ("True", "Running"),
    }
    later = H9 + timedelta(seconds=2)
    summarize(conditions, Summary.READY, "Scheduling", "ok", 3, later)
    assert conditions == [
        {
            "type": READY,
            "status": "True",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-01-05T09:00:02Z",
            "reason": "Scheduling",
            "message": "ok",
        }
    ]
    # Unchanged: nothing moves, so an idle reconcile writes nothing.
    before = [dict(c) for c in conditions]
    summarize(conditions, Summary.READY, "Scheduling", "ok", 3, later + timedelta(hours=1))
    assert conditions == before


# --- ScheduledJob --------------------------------------------------------------------------------


def test_a_valid_scheduledjob_is_current() -> None:
    decision = decide(view(generation=4), [], H9)
    assert_conventions(decision.status, 4)
    assert summary_of(decision.status) == {READY: ("True", "Scheduling")}
    assert read(decision.status, 4) == "Current"
    # Edited, not yet seen by the operator: in progress, not current.
    assert read(decision.status, 5) == "InProgress"


def test_an_invalid_scheduledjob_is_stalled_not_in_progress_for_ever() -> None:
    decision = decide(view(spec(concurrencyPolicy="Sometimes"), generation=2), [], H9)
    assert_conventions(decision.status, 2)
    assert summary_of(decision.status) == {
        READY: ("False", "InvalidSpec"),
        STALLED: ("True", "InvalidSpec"),
    }
    assert "concurrencyPolicy" in condition(decision.status, STALLED)["message"]
    assert read(decision.status, 2) == "Failed"

    fixed = decide(view(spec(), status=decision.status, generation=3), [], H[10])
    assert_conventions(fixed.status, 3)
    assert summary_of(fixed.status) == {READY: ("True", "Scheduling")}
    assert read(fixed.status, 3) == "Current"


def test_a_refused_job_template_is_stalled_until_the_spec_is_edited() -> None:
    refused = {"generation": 1, "message": 'unknown field "spec.backofLimit"'}
    decision = decide(view(status={"templateError": refused}), [], H9)
    assert summary_of(decision.status)[STALLED] == ("True", "InvalidSpec")
    assert read(decision.status) == "Failed"


def test_a_suspended_scheduledjob_is_current_and_says_so() -> None:
    decision = decide(view(spec(suspend=True)), [], H9)
    assert summary_of(decision.status) == {READY: ("True", "Suspended")}
    assert read(decision.status) == "Current"


def test_a_one_off_that_ran_is_current_and_completed() -> None:
    raw = run_at_spec(H9)
    decision = decide(view(raw, status=processed(raw, H9)), [], H9 + timedelta(hours=1))
    assert summary_of(decision.status) == {READY: ("True", "Completed")}
    assert read(decision.status) == "Current"


class PausingWorld:
    """Decisions applied as the shell would: status written, Jobs created, then finished."""

    def __init__(self) -> None:
        raw = spec(pauseOnFailure={"consecutiveFailures": 1}, startingDeadlineSeconds=600)
        self.sj: ScheduledJobView = view(raw, status=processed(raw, H[8]))
        self.jobs: list[JobInfo] = []

    def decide(self, now: datetime) -> Decision:
        decision = decide(self.sj, self.jobs, now)
        self.sj, self.jobs = after_apply(self.sj, self.jobs, decision)
        return decision

    def fail_all(self, at: datetime) -> None:
        self.jobs = [
            dataclasses.replace(j, state=JobState.FAILED, finished_at=at) for j in self.jobs
        ]


def test_a_paused_scheduledjob_is_stalled_until_resumed() -> None:
    world = PausingWorld()
    assert world.decide(H[9]).runs
    world.fail_all(H[9] + timedelta(minutes=5))
    paused = world.decide(H[9] + timedelta(minutes=5))
    assert condition(paused.status, "Paused")["status"] == "True"
    assert_conventions(paused.status, 1)
    assert summary_of(paused.status) == {READY: ("False", "Paused"), STALLED: ("True", "Paused")}
    assert (
        condition(paused.status, STALLED)["message"]
        == condition(paused.status, "Paused")["message"]
    )
    assert read(paused.status) == "Failed"

    world.sj = dataclasses.replace(world.sj, annotations={ANNOTATION_RESUME: "1"})
    resumed = world.decide(H[9] + timedelta(minutes=6))
    assert_conventions(resumed.status, 1)
    assert summary_of(resumed.status) == {READY: ("True", "Scheduling")}
    assert read(resumed.status) == "Current"


# --- Run -----------------------------------------------------------------------------------------

TEMPLATE = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
ONE_STEP = Steps((Step("only", TEMPLATE),), OnFailure.STOP)


def run_view(status: dict[str, Any] | None = None, generation: int = 1) -> RunView:
    return RunView("r-1", "ns", "run-uid", snapshot(ONE_STEP), status or {}, generation=generation)


def step_job(state: JobState) -> StepJob:
    return StepJob(
        name="only-run-1",
        uid="uid-only",
        run_uid="run-uid",
        step="only",
        action=StepAction.RUN,
        attempt=1,
        state=state,
        finished_at=None if state is JobState.ACTIVE else H9,
    )


def test_a_running_run_is_reconciling_then_current_once_it_succeeded() -> None:
    started = supervise(run_view(), [], {}, H9)
    assert_conventions(started.status, 1)
    assert summary_of(started.status) == {
        READY: ("False", "Running"),
        RECONCILING: ("True", "Running"),
    }
    assert read(started.status) == "InProgress"

    done = supervise(run_view(started.status), [step_job(JobState.SUCCEEDED)], {}, H9)
    assert done.status["phase"] == "Succeeded"
    assert_conventions(done.status, 1)
    assert summary_of(done.status) == {READY: ("True", "Succeeded")}
    assert read(done.status) == "Current"


def test_a_failed_run_is_stalled_with_its_escalation() -> None:
    started = supervise(run_view(), [], {}, H9)
    failed = supervise(run_view(started.status), [step_job(JobState.FAILED)], {}, H9)
    assert failed.status["phase"] == "Failed"
    assert summary_of(failed.status) == {READY: ("False", "Failed"), STALLED: ("True", "Failed")}
    escalated = condition(failed.status, "Escalated")
    assert condition(failed.status, STALLED)["message"] == escalated["message"]
    assert read(failed.status) == "Failed"


def test_an_unreadable_run_is_stalled() -> None:
    plan = supervise(RunView("r", "ns", "uid", {"steps": "nope"}, {}), [], {}, H9)
    assert summary_of(plan.status)[STALLED] == ("True", "Failed")
    assert read(plan.status) == "Failed"


# --- RunRequest ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "summary", "reading"),
    [
        ({"phase": "Pending"}, "Pending", RECONCILING, "InProgress"),
        ({"phase": "Running"}, "Running", RECONCILING, "InProgress"),
        ({"phase": "Complete", "failed": 0}, "Complete", READY, "Current"),
        ({"phase": "Complete", "failed": 2}, "RunsFailed", STALLED, "Failed"),
        ({"phase": "Failed", "message": "no"}, "Failed", STALLED, "Failed"),
    ],
)
def test_a_runrequest_reads_as_its_phase(
    status: dict[str, Any], reason: str, summary: str, reading: str
) -> None:
    status = {**status, "conditions": [{"type": STALLED, "status": "True"}]}  # a stale one goes
    summarize_request(status, 1, H9)
    assert_conventions(status, 1)
    expected = {READY: ("True" if summary == READY else "False", reason)}
    if summary != READY:
        expected[summary] = ("True", reason)
    assert summary_of(status) == expected
    assert read(status) == reading


def test_a_waiting_runrequest_is_in_progress() -> None:
    waiting = RunRequestView("fill", "ns", "uid", "1", H9, {"scheduledJobName": "x"}, {})
    (written,) = plan_waiting("x", [waiting], H9).requests
    assert summary_of(written.status)[RECONCILING] == ("True", "Pending")
    assert read(written.status) == "InProgress"


def test_a_request_decided_with_its_scheduledjob_carries_the_summary() -> None:
    request = RunRequestView(
        "fill",
        "ns",
        "uid",
        "1",
        H9,
        {"scheduledJobName": "backup", "replay": {"runs": ["gone"]}},
        {},
        generation=1,
    )
    decision = decide(view(), [], H9, [request])
    (written,) = decision.requests
    assert written.status["phase"] == "Failed"  # no such run to replay
    assert_conventions(written.status, 1)
    assert read(written.status) == "Failed"
