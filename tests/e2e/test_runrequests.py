"""Replay and backfill through RunRequests, on the real control plane (issue 15, item 4)."""

from __future__ import annotations

import itertools
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devcluster.replica import OperatorProcess
from kube import (
    Kube,
    creation_time,
    jobs_of,
    leader_of,
    parse_time,
    scheduled_at,
    scheduledjob,
    status_of,
    wait_for,
)

DAILY = "0 0 * * *"
KEY = "cronlease.io/idempotency-key"


def stamp(instant: datetime) -> str:
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def run_request(name: str, namespace: str, target: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "cronlease.io/v1alpha1",
        "kind": "RunRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scheduledJobName": target, **spec},
    }


def request_status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get("runrequest", name, namespace) or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def request_jobs(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.items("jobs", namespace, f"cronlease.io/request={name}")


def request_events(kube: Kube, namespace: str, name: str) -> list[str]:
    selector = f"involvedObject.name={name},involvedObject.kind=RunRequest"
    items = kube.json("get", "events", "-n", namespace, "--field-selector", selector)["items"]
    return [event["reason"] for event in items]


def complete(kube: Kube, namespace: str, name: str, timeout: float) -> dict[str, Any]:
    return wait_for(
        lambda: (s := request_status(kube, namespace, name)).get("phase") == "Complete" and s,
        timeout,
        f"RunRequest {name} to complete",
    )


def past_days(count: int) -> tuple[datetime, datetime]:
    """The last `count` midnights (UTC), oldest first: slots of DAILY, all past."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=count - 1), today


def test_a_dead_letter_replayed_after_a_fix_succeeds_with_its_slot_and_key(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    retry = {"maxAttempts": 2, "backoff": {"initialSeconds": 1, "factor": 1}}
    now = stamp(datetime.now(UTC))
    broken = scheduledjob("close", namespace, result="Failed", runAt=now, retry=retry)
    kube.apply(broken)
    (letter,) = wait_for(
        lambda: status_of(kube, namespace, "close").get("deadLetters"), 40, "the dead letter"
    )
    # The bug is fixed in the template; the dead letter is replayed.
    kube.apply(scheduledjob("close", namespace, runAt=now, retry=retry))
    kube.apply(run_request("again", namespace, "close", replay={"deadLetters": True}))
    status = complete(kube, namespace, "again", 40)
    assert (status["total"], status["succeeded"], status["failed"]) == (1, 1, 0)
    assert status["targets"] == [{"run": letter["run"], "slot": letter["slot"]}]
    (replay,) = request_jobs(kube, namespace, "again")
    labels, pod = replay["metadata"]["labels"], replay["spec"]["template"]["metadata"]
    assert labels["cronlease.io/trigger"] == "Replay"
    assert pod["annotations"]["cronlease.io/scheduled-at"] == letter["slot"]
    original = kube.get("job", letter["job"], namespace)
    assert original is not None
    assert pod["annotations"][KEY] == original["spec"]["template"]["metadata"]["annotations"][KEY]
    # The dead letter is one no more: labelled replayed, gone from status.deadLetters.
    wait_for(
        lambda: "deadLetters" not in status_of(kube, namespace, "close"), 15, "deadLetters cleared"
    )
    relabelled = kube.get("job", letter["job"], namespace)
    assert relabelled is not None
    assert relabelled["metadata"]["labels"]["cronlease.io/dead-letter"] == "replayed"
    assert kube.items("jobs", namespace, "cronlease.io/dead-letter=true") == []
    events = sorted(request_events(kube, namespace, "again"))  # kubectl lists them by name
    assert events == ["RequestAccepted", "RequestComplete"]


def test_a_backfill_of_ten_past_slots_runs_each_once_in_order(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("daily", namespace, schedule=DAILY, successfulJobsHistoryLimit=20))
    start, end = past_days(10)
    kube.apply(
        run_request("fill", namespace, "daily", backfill={"from": stamp(start), "to": stamp(end)})
    )
    status = complete(kube, namespace, "fill", 90)
    assert (status["total"], status["succeeded"], status["succeededIndexes"]) == (10, 10, "0-9")
    jobs = request_jobs(kube, namespace, "fill")
    assert len(jobs) == 10
    by_index = sorted(
        jobs, key=lambda job: int(job["metadata"]["annotations"]["cronlease.io/request-index"])
    )
    assert [scheduled_at(job) for job in by_index] == [start + timedelta(days=d) for d in range(10)]
    # Forbid: each started after the one before it ended.
    for before, after in itertools.pairwise(by_index):
        assert creation_time(after) >= parse_time(before["status"]["completionTime"])
    assert {job["metadata"]["labels"]["cronlease.io/trigger"] for job in jobs} == {"Backfill"}
    # The pods see the slot they backfill.
    env = by_index[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"CRONLEASE_SCHEDULED_AT", "CRONLEASE_TRIGGER"} <= {var["name"] for var in env}
    assert by_index[0]["spec"]["template"]["metadata"]["annotations"]["cronlease.io/trigger"] == (
        "Backfill"
    )
    # The schedule itself ran none of them (its first slot is tonight).
    assert len(jobs_of(kube, namespace, "daily")) == 10


def test_deleting_a_backfill_cancels_it(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("slow", namespace, "2s", schedule=DAILY))
    start, end = past_days(10)
    window = {"from": stamp(start), "to": stamp(end)}
    kube.apply(run_request("fill", namespace, "slow", backfill=window))
    wait_for(lambda: len(request_jobs(kube, namespace, "fill")) >= 2, 30, "two targets started")
    kube.run("delete", "runrequest", "fill", "-n", namespace)
    # The leader has seen the deletion once it released the request's Jobs.
    wait_for(
        lambda: (
            not any(j["metadata"].get("finalizers") for j in request_jobs(kube, namespace, "fill"))
        ),
        20,
        "the request's Jobs released",
    )
    started = len(request_jobs(kube, namespace, "fill"))
    # A later decision of the same ScheduledJob (a run-now) starts nothing more of the request.
    kube.run("annotate", "scheduledjob", "slow", "-n", namespace, "cronlease.io/run-now=probe")
    wait_for(
        lambda: status_of(kube, namespace, "slow").get("runNowToken") == "probe", 20, "run-now"
    )
    wait_for(
        lambda: all(
            j.get("status", {}).get("completionTime") for j in jobs_of(kube, namespace, "slow")
        ),
        30,
        "every run to end",
    )
    assert started < 10
    assert len(request_jobs(kube, namespace, "fill")) == started


def test_bad_requests_are_refused_at_apply_or_fail_with_one_event(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    kube.apply(scheduledjob("daily", namespace, schedule=DAILY))
    reversed_window = {"from": "2026-01-02T00:00:00Z", "to": "2026-01-01T00:00:00Z"}
    refusals = {
        "spec.backfill.to: before spec.backfill.from": {"backfill": reversed_window},
        "exactly one of replay and backfill": {},
        "name runs, or set deadLetters": {"replay": {"deadLetters": False}},
    }
    for message, spec in refusals.items():
        result = kube.create(run_request("bad", namespace, "daily", **spec), check=False)
        assert result.returncode != 0
        assert message in result.stderr, result.stderr
    future = datetime.now(UTC) + timedelta(days=3)
    start, _ = past_days(2)
    kube.apply(
        run_request(
            "ahead", namespace, "daily", backfill={"from": stamp(start), "to": stamp(future)}
        )
    )
    kube.apply(run_request("ghost", namespace, "daily", replay={"runs": ["daily-123"]}))
    for name, message in (("ahead", "spec.backfill.to"), ("ghost", "spec.replay.runs[0]")):
        status = wait_for(
            lambda n=name: (s := request_status(kube, namespace, n)).get("phase") and s,
            20,
            f"{name} to be judged",
        )
        assert status["phase"] == "Failed"
        assert message in status["message"]
        assert request_events(kube, namespace, name) == ["RequestFailed"]
    assert jobs_of(kube, namespace, "daily") == []
    # Its spec is immutable: a change is refused, naming why.
    changed = run_request("ghost", namespace, "daily", replay={"runs": ["daily-456"]})
    result = kube.apply(changed, check=False)
    assert "spec is immutable" in result.stderr


def test_a_request_for_a_scheduledjob_not_yet_applied_waits_then_runs(
    kube: Kube, namespace: str, operator: OperatorProcess
) -> None:
    start, end = past_days(1)
    window = {"from": stamp(start), "to": stamp(end)}
    kube.apply(run_request("early", namespace, "later", backfill=window))
    status = wait_for(
        lambda: (s := request_status(kube, namespace, "early")).get("phase") and s, 20, "Pending"
    )
    assert status["phase"] == "Pending"
    assert "ScheduledJob later not found" in status["message"]
    kube.apply(scheduledjob("later", namespace, schedule=DAILY))
    assert complete(kube, namespace, "early", 30)["succeeded"] == 1


def test_leader_kills_during_a_backfill_with_retries_lose_and_double_nothing(
    kube: Kube, namespace: str, started: list[OperatorProcess], operator_kubeconfig: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Two replicas; every run's first attempt fails and its second succeeds; the leader is
    SIGKILLed twice while the backfill goes on. Each of the 10 targets: attempts 1 and 2, once."""
    for i in range(2):
        started.append(OperatorProcess(operator_kubeconfig, tmp_path, f"replica-{i}"))
        started[-1].start()
    retry = {"maxAttempts": 3, "backoff": {"initialSeconds": 1, "factor": 1}}
    kube.apply(
        scheduledjob(
            "nightly", namespace, schedule=DAILY, fail_attempts=[1], retry=retry,
            successfulJobsHistoryLimit=100, failedJobsHistoryLimit=100,
        )
    )  # fmt: skip
    start, end = past_days(10)
    kube.apply(
        run_request("fill", namespace, "nightly", backfill={"from": stamp(start), "to": stamp(end)})
    )
    for progress in (3, 6):
        wait_for(
            lambda p=progress: len(request_jobs(kube, namespace, "fill")) >= 2 * p - 1,
            60,
            f"target {progress} under way",
        )
        leader = leader_of(started, kube)
        leader.stop(signal.SIGKILL)
        leader.start()  # back as a standby
    status = complete(kube, namespace, "fill", 120)
    assert (status["succeeded"], status["failed"]) == (10, 0)
    jobs = request_jobs(kube, namespace, "fill")
    seen = sorted(
        (
            int(job["metadata"]["annotations"]["cronlease.io/request-index"]),
            int(job["metadata"]["labels"]["cronlease.io/attempt"]),
        )
        for job in jobs
    )
    assert seen == [(index, attempt) for index in range(10) for attempt in (1, 2)]
    writers = {job["metadata"]["annotations"]["cronlease.io/leader"] for job in jobs}
    assert len(writers) >= 2  # the backfill went on under more than one leader
