"""Scheduling policies (issue 16) against the real control plane: pause on failure."""

from __future__ import annotations

from datetime import timedelta

from devcluster.replica import OperatorProcess
from kube import (
    Kube,
    jobs_of,
    parse_time,
    reasons,
    scheduled_at,
    scheduledjob,
    status_of,
    wait_for,
    wait_until,
)


def paused_condition(kube: Kube, namespace: str, name: str) -> dict[str, str] | None:
    for item in status_of(kube, namespace, name).get("conditions") or []:
        if item.get("type") == "Paused":
            return dict(item)
    return None


def test_failures_in_a_row_pause_until_resumed(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Every run fails: after two in a row the ScheduledJob pauses (a condition, the spec
    untouched), creates nothing while paused, and runs again once the annotation resumes it."""
    kube.apply(
        scheduledjob(
            "flaky",
            namespace,
            result="Failed",
            schedule="*/2 * * * * *",
            concurrencyPolicy="Forbid",
            pauseOnFailure={"consecutiveFailures": 2},
            failedJobsHistoryLimit=20,
        )
    )
    paused = wait_for(
        lambda: (c := paused_condition(kube, namespace, "flaky")) and c["status"] == "True" and c,
        30,
        "Paused=True",
    )
    assert paused["reason"] == "ConsecutiveFailures"
    assert "Paused" in reasons(kube, namespace, "flaky")
    spec = kube.get("scheduledjob", "flaky", namespace)["spec"]
    assert "suspend" not in spec or spec["suspend"] is False  # the spec is not edited
    paused_at = parse_time(paused["lastTransitionTime"])
    # Let three slots go by while paused, then resume.
    wait_until(paused_at + timedelta(seconds=7))
    resumed_at = paused_at + timedelta(seconds=7)
    kube.run("annotate", "scheduledjob", "flaky", "-n", namespace, "cronlease.io/resume=1")
    status = wait_for(
        lambda: (s := status_of(kube, namespace, "flaky")).get("resumeToken") == "1" and s,
        20,
        "the resume acknowledged",
    )
    assert status["slotsSkipped"]["Paused"] >= 3, status["slotsSkipped"]
    wait_for(
        lambda: any(scheduled_at(job) > resumed_at for job in jobs_of(kube, namespace, "flaky")),
        20,
        "a run after the resume",
    )
    # Nothing ran for a slot between the pause and the resume (the slot at the pause itself may
    # have been decided with it).
    quiet = [
        scheduled_at(job)
        for job in jobs_of(kube, namespace, "flaky")
        if paused_at + timedelta(seconds=1) < scheduled_at(job) <= resumed_at
    ]
    assert quiet == []
