"""Issue 33 on the real control plane: a multi-step run's steps stay exactly once, bounded and
recorded whatever users, quotas and the garbage collector do to them (kwok plays the pods)."""

from __future__ import annotations

import time
from typing import Any

from test_steps import RETRY, bank_close, finished_run, step, step_jobs, steps_of, the_run, undo

from devcluster.replica import OperatorProcess
from kube import Kube, condition, wait_for


def running(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The Run, once step `name` runs (its Job made, and seen)."""

    def ready() -> dict[str, Any] | None:
        run = the_run(kube, namespace)
        if not run or not (run.get("status") or {}).get("steps"):
            return None
        entry = steps_of(run).get(name, {})
        return run if entry.get("phase") == "Running" and entry.get("jobUid") else None

    return wait_for(ready, 60, f"step {name} to run")


def test_a_run_deleted_while_it_runs_stops_its_steps_compensates_then_goes(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        bank_close(
            namespace,
            step("snapshot", compensate=undo()),
            step("apply-interest", "snapshot", duration="300s"),
        )
    )
    run = running(kube, namespace, "apply-interest")
    name = run["metadata"]["name"]
    assert "cronlease.io/supervision" in run["metadata"]["finalizers"]
    kube.run("delete", "run", name, "-n", namespace, "--wait=false")  # a user (or Replace)
    seen: dict[tuple[str, str, int], dict[str, Any]] = {}

    def gone() -> bool:
        seen.update(step_jobs(kube, namespace))  # the garbage collector takes them with the Run
        return kube.get("run", name, namespace) is None

    wait_for(gone, 60, "the run to go")
    assert ("snapshot", "compensate", 1) in seen, sorted(seen)  # what finished was undone
    jobs = step_jobs(kube, namespace)
    live = [key for key, job in jobs.items() if not job["status"].get("completionTime")]
    assert live == [], live  # the cancelled step's Job went with it
    reasons = {e["reason"] for e in kube.items("events", namespace)}
    assert {"Cancelled", "Compensating", "Compensated"} <= reasons, reasons


def test_a_step_deleted_in_the_background_is_redone_only_once_its_pods_are_gone(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """`kubectl delete job` while a step runs: the attempt is lost, and its pods run on (the
    job controller ignores a Job being deleted) until the Job is gone and then for their grace
    period. The next attempt waits for all of it."""
    snapshot = step("snapshot", duration="300s", retry=RETRY)
    snapshot["jobTemplate"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 2
    kube.apply(bank_close(namespace, snapshot))
    running(kube, namespace, "snapshot")
    first = step_jobs(kube, namespace)[("snapshot", "run", 1)]["metadata"]["name"]
    kube.run("delete", "job", first, "-n", namespace, "--cascade=background", "--wait=false")
    gone_at = None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        jobs = step_jobs(kube, namespace)
        if ("snapshot", "run", 1) in jobs:
            assert ("snapshot", "run", 2) not in jobs, "attempt 2 beside attempt 1's Job"
        elif gone_at is None:
            gone_at = time.monotonic()
        if ("snapshot", "run", 2) in jobs:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("attempt 2 never started")
    assert gone_at is not None
    assert time.monotonic() - gone_at >= 2, "attempt 2 within attempt 1's pods' grace period"
    run = the_run(kube, namespace)
    assert run is not None
    assert steps_of(run)["snapshot"]["attempt"] == 2
    lost = [e for e in run["status"]["recoveryLog"] if e["action"] == "WillRestart"]
    assert [e["reason"] for e in lost] == ["JobDeleted"]


def test_a_quota_that_refuses_a_step_fails_it_and_escalates(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-jobs", "namespace": namespace},
        "spec": {"hard": {"count/jobs.batch": "0"}},
    }
    kube.apply(quota)
    wait_for(
        lambda: (
            (kube.get("resourcequota", "no-jobs", namespace) or {}).get("status", {}).get("hard")
        ),
        30,
        "the quota to be counted",
    )
    kube.apply(bank_close(namespace, step("snapshot", retry=RETRY), step("publish", "snapshot")))
    run = finished_run(kube, namespace)
    entry = steps_of(run)["snapshot"]
    assert (entry["phase"], entry["reason"], entry["attempt"]) == ("Failed", "CreateRefused", 2)
    assert "exceeded quota" in entry["message"]
    assert condition(run, "Escalated") == "True"
    assert step_jobs(kube, namespace) == {}
    reasons = {e["reason"] for e in kube.items("events", namespace)}
    assert "FailedCreate" in reasons


def test_an_orphaned_step_runs_on_as_its_attempt(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(
        bank_close(
            namespace, step("snapshot", duration="6s", retry=RETRY), step("publish", "snapshot")
        )
    )
    running(kube, namespace, "snapshot")
    job = step_jobs(kube, namespace)[("snapshot", "run", 1)]["metadata"]["name"]
    patch = '[{"op": "remove", "path": "/metadata/ownerReferences"}]'
    kube.run("patch", "job", job, "-n", namespace, "--type=json", "-p", patch)
    run = finished_run(kube, namespace)
    assert run["status"]["phase"] == "Succeeded", run["status"]
    assert steps_of(run)["snapshot"]["attempt"] == 1  # never taken as lost, never redone
    assert ("snapshot", "run", 2) not in step_jobs(kube, namespace)
