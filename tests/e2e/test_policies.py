"""Scheduling policies (issue 16) against the real control plane: the buffering overlap policies
(no two runs overlap, judged from the pods' lives in the API server's own order), and pause on
failure."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from devcluster.replica import OperatorProcess
from kube import (
    Kube,
    Watch,
    creation_time,
    events_of,
    jobs_of,
    parse_time,
    reasons,
    scheduled_at,
    scheduledjob,
    status_of,
    wait_for,
    wait_until,
)

TERMINATED = ("Succeeded", "Failed")


def most_pods_alive(events: list[dict[str, Any]]) -> int:
    """The most pods alive at once in a pod watch: from ADDED until their phase is Succeeded or
    Failed, or they are DELETED. One watch stream is in the order etcd stored the changes, so
    this judges overlap without sampling and without comparing clocks."""
    alive: set[str] = set()
    most = 0
    for event in events:
        pod = event["object"]
        name = pod["metadata"]["name"]
        phase = (pod.get("status") or {}).get("phase")
        if event["type"] == "DELETED" or phase in TERMINATED:
            alive.discard(name)
        else:
            alive.add(name)
        most = max(most, len(alive))
    return most


def even_slots(after: datetime, until: datetime) -> int:
    """How many slots "*/2 * * * * *" has in (after, until]."""
    return int(until.timestamp()) // 2 - int(after.timestamp()) // 2


def assert_every_slot_accounted(
    kube: Kube, namespace: str, name: str, jobs_kept: bool = True
) -> dict[str, Any]:
    """Each slot from the creation to processedUntil: one run, one recorded skip, or waiting;
    and, if no Job was deleted, each run a Job of its own slot."""
    sj = kube.get("scheduledjob", name, namespace)
    status = sj["status"]
    due = even_slots(creation_time(sj), parse_time(status["processedUntil"]))
    ran = {scheduled_at(job) for job in jobs_of(kube, namespace, name)}
    accounted = status["runsCreated"] + sum(status.get("slotsSkipped", {}).values())
    accounted += len(status.get("buffered") or [])
    assert accounted == due, (status, due)
    assert not jobs_kept or len(ran) == status["runsCreated"], "a Job of its own slot per run"
    return dict(status)


def buffering(name: str, namespace: str, policy: str, duration: str, **spec: Any) -> Any:
    return scheduledjob(
        name,
        namespace,
        duration,
        schedule="*/2 * * * * *",
        concurrencyPolicy=policy,
        successfulJobsHistoryLimit=50,
        failedJobsHistoryLimit=50,
        **spec,
    )


def test_buffer_one_runs_back_to_back(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Runs of 3 s every 2 s: one slot waits and runs as the run before ends; the others are
    BufferFull; never two pods at once."""
    pods = Watch(kube, "pods", namespace)
    kube.apply(buffering("one", namespace, "BufferOne", "3s"))
    wait_for(
        lambda: (
            len(jobs_of(kube, namespace, "one")) >= 4
            and status_of(kube, namespace, "one").get("slotsSkipped", {}).get("BufferFull")
        ),
        40,
        "4 runs and a BufferFull skip",
    )
    kube.apply(buffering("one", namespace, "BufferOne", "3s", suspend=True))
    status = assert_every_slot_accounted(kube, namespace, "one")
    assert len(status.get("buffered") or []) <= 1
    assert most_pods_alive(pods.stop()) == 1


def test_buffer_all_runs_every_slot_in_order(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Runs of 3 s every 2 s, up to 3 waiting: the slots run one after another, oldest first,
    never two pods at once; once 3 wait, the newest are BufferFull."""
    pods = Watch(kube, "pods", namespace)
    kube.apply(buffering("all", namespace, "BufferAll", "3s", bufferLimit=3))
    wait_for(
        lambda: status_of(kube, namespace, "all").get("slotsSkipped", {}).get("BufferFull"),
        60,
        "3 slots waiting, then BufferFull",
    )
    kube.apply(buffering("all", namespace, "BufferAll", "3s", bufferLimit=3, suspend=True))
    status = assert_every_slot_accounted(kube, namespace, "all")
    jobs = sorted(jobs_of(kube, namespace, "all"), key=lambda job: job["metadata"]["name"])
    by_creation = sorted(jobs, key=lambda job: (creation_time(job), scheduled_at(job)))
    assert [scheduled_at(job) for job in by_creation] == sorted(scheduled_at(job) for job in jobs)
    assert len(jobs) >= 3, status
    assert most_pods_alive(pods.stop()) == 1


def test_cancel_other_stops_the_run_before_the_next(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    """Runs of 60 s every 2 s: each slot deletes the active run (foreground) and starts once its
    pod is gone; never two pods at once."""
    pods = Watch(kube, "pods", namespace)
    kube.apply(buffering("cancel", namespace, "CancelOther", "60s"))
    wait_for(
        lambda: (
            sum(
                run["result"] == "Deleted"
                for run in status_of(kube, namespace, "cancel").get("recentRuns") or []
            )
            >= 3
        ),
        40,
        "three runs cancelled",
    )
    kube.apply(buffering("cancel", namespace, "CancelOther", "60s", suspend=True))
    assert_every_slot_accounted(kube, namespace, "cancel", jobs_kept=False)
    assert "(CancelOther)" in " ".join(e["message"] for e in events_of(kube, namespace, "cancel"))
    events = pods.stop()
    assert sum(event["type"] == "DELETED" for event in events) >= 2
    assert most_pods_alive(events) == 1


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
