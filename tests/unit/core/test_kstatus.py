"""Ready, Reconciling and Stalled (cronlease.core.names.conditions) as the kstatus conventions want
them, on every kind the operator writes status for, read by sigs.k8s.io/cli-utils' kstatus itself:
the statuses the operator computes are piped into hack/kstatus (`make kstatus` builds it into
.cache/bin), the library at the version its go.mod pins. tests/e2e/test_ecosystem.py reads real
objects through it on the control plane; these tests cover every state without a cluster."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from builders import (
    World,
    condition,
    processed,
    run_at_spec,
    run_view,
    spec,
    step_job,
    utc,
    view,
)

from cronlease.core.decide.reconcile import decide
from cronlease.core.decide.requestplan import plan_waiting
from cronlease.core.decide.runrequest import RunRequestView, summarize_request
from cronlease.core.decide.supervision import RunView, supervise
from cronlease.core.names.conditions import READY, RECONCILING, STALLED, Summary, summarize
from cronlease.core.names.jobinfo import JobState
from cronlease.core.names.naming import ANNOTATION_RESUME

H9 = utc(2026, 1, 5, 9)
H = [utc(2026, 1, 5, hour) for hour in range(24)]
REPO = Path(__file__).resolve().parents[3]
KSTATUS = Path(os.environ.get("KSTATUS", str(REPO / ".cache" / "bin" / "kstatus")))


def kstatus(obj: dict[str, Any]) -> dict[str, Any]:
    """What kstatus' status.Compute says of `obj`: hack/kstatus's reading (status, message,
    conditions)."""
    if not KSTATUS.exists():
        pytest.fail(f"the kstatus reader is not built at {KSTATUS}: run `make kstatus`")
    out = subprocess.run(
        [str(KSTATUS)], input=json.dumps(obj), capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stderr
    reading: dict[str, Any] = json.loads(out.stdout)
    return reading


def read(status: dict[str, Any], generation: int = 1, kind: str = "ScheduledJob") -> str:
    """kstatus' status of a cronlease object of `kind` with `status`, at `generation`."""
    metadata = {"name": "x", "namespace": "ns", "generation": generation}
    obj = {"apiVersion": "cronlease.io/v1alpha1", "kind": kind, "metadata": metadata}
    return str(kstatus({**obj, "status": status})["status"])


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


def test_a_paused_scheduledjob_is_stalled_until_resumed() -> None:
    world = World(spec(pauseOnFailure={"consecutiveFailures": 1}, startingDeadlineSeconds=600))
    assert world.decide(H[9]).runs
    world.finish(JobState.FAILED, H[9] + timedelta(minutes=5))
    paused = world.decide(H[9] + timedelta(minutes=5))
    assert condition(paused.status, "Paused")["status"] == "True"
    assert_conventions(paused.status, 1)
    assert summary_of(paused.status) == {READY: ("False", "Paused"), STALLED: ("True", "Paused")}
    assert (
        condition(paused.status, STALLED)["message"]
        == condition(paused.status, "Paused")["message"]
    )
    assert read(paused.status) == "Failed"

    world.annotate(ANNOTATION_RESUME, "1")
    resumed = world.decide(H[9] + timedelta(minutes=6))
    assert_conventions(resumed.status, 1)
    assert summary_of(resumed.status) == {READY: ("True", "Scheduling")}
    assert read(resumed.status) == "Current"


# --- Run -----------------------------------------------------------------------------------------


def test_a_running_run_is_reconciling_then_current_once_it_succeeded() -> None:
    started = supervise(run_view(), [], {}, H9)
    assert_conventions(started.status, 1)
    assert summary_of(started.status) == {
        READY: ("False", "Running"),
        RECONCILING: ("True", "Running"),
    }
    assert read(started.status, kind="Run") == "InProgress"

    succeeded = step_job(state=JobState.SUCCEEDED, finished_at=H9)
    done = supervise(run_view(status=started.status), [succeeded], {}, H9)
    assert done.status["phase"] == "Succeeded"
    assert_conventions(done.status, 1)
    assert summary_of(done.status) == {READY: ("True", "Succeeded")}
    assert read(done.status, kind="Run") == "Current"


def test_a_failed_run_is_stalled_with_its_escalation() -> None:
    started = supervise(run_view(), [], {}, H9)
    failing = step_job(state=JobState.FAILED, finished_at=H9)
    failed = supervise(run_view(status=started.status), [failing], {}, H9)
    assert failed.status["phase"] == "Failed"
    assert summary_of(failed.status) == {READY: ("False", "Failed"), STALLED: ("True", "Failed")}
    escalated = condition(failed.status, "Escalated")
    assert condition(failed.status, STALLED)["message"] == escalated["message"]
    assert read(failed.status, kind="Run") == "Failed"


def test_an_unreadable_run_is_stalled() -> None:
    plan = supervise(RunView("r", "ns", "uid", {"steps": "nope"}, {}), [], {}, H9)
    assert summary_of(plan.status)[STALLED] == ("True", "Failed")
    assert read(plan.status, kind="Run") == "Failed"


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
    assert read(status, kind="RunRequest") == reading


def test_a_waiting_runrequest_is_in_progress() -> None:
    waiting = RunRequestView("fill", "ns", "uid", "1", H9, {"scheduledJobName": "x"}, {})
    (written,) = plan_waiting("x", [waiting], H9).requests
    assert summary_of(written.status)[RECONCILING] == ("True", "Pending")
    assert read(written.status, kind="RunRequest") == "InProgress"


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
    assert read(written.status, kind="RunRequest") == "Failed"
